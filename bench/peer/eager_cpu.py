#!/usr/bin/env python3
"""The CPU peer: glint's LoRA training step on a Qwen3-MoE checkpoint, written as a plain
eager PyTorch loop that does the same maths, in float32 on the CPU.

Model: read from a glint / Hugging Face checkpoint directory (config.json and
model.safetensors, as `glint init-model` writes them) by a small safetensors reader of its
own (json + torch.frombuffer; no safetensors or transformers package). Packed experts
(mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]) and per-expert
keys (mlp.experts.N.{gate,up,down}_proj.weight) are both read; the latter are packed.

Forward, per layer: RMSNorm -> attention (q/k/v/o projections, per-head q_norm/k_norm
RMSNorm, RoPE rotate-half with rope_theta, GQA by repeating the KV heads, causal
scaled_dot_product_attention) -> residual -> RMSNorm -> MoE (router linear in float32 ->
softmax -> top-k -> renormalised when norm_topk_prob; the token copies sorted by expert in
one stable permutation; per expert two GEMMs on its contiguous slice of the sorted rows
with the packed weights, gate = first I rows of gate_up, up = the next I, SiLU(gate) * up;
weighted combine with index_add) -> residual. Then the final norm, lm_head and the
cross-entropy of the next tokens (mean over the B x (S-1) labels).

LoRA (r 16, alpha 32, scale alpha / r) on q/k/v/o (A [r, in], B [out, r]) and on the packed
experts, one A and one B per expert for gate_up and for down, applied as two thin GEMMs
per expert on the same slices (x A_e^T B_e^T * scale) as glint does: no [E, out, in] delta
is ever formed. A ~ U(-1/sqrt(in), 1/sqrt(in)), B = 0, so step 1's loss is the base
model's. Base weights frozen; AdamW (lr 1e-4, weight decay 0, as glint's defaults) on the
LoRA tensors; no gradient clipping.

Prints one JSON object: tokens/s and seconds per step over the timed steps (medians and
means), forward / backward / optimizer seconds, the step-1 loss, torch version, threads,
peak RSS.

    python3 bench/peer/eager_cpu.py --model /tmp/peer/a --threads 2 --steps 3 --warmup 1
    python3 bench/peer/eager_cpu.py --model DIR --data rows.jsonl   # glint's token rows

Run it with LD_PRELOAD=<libtcmalloc_minimal.so.4> for the allocator glint links
(bench/peer/cpu_compare.sh does both, beside glint, in one sitting).
"""
import argparse
import json
import os
import resource
import struct
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + model.safetensors)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (step 1 gives the loss)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", help="JSONL of {\"input_ids\": [...]} rows; the first --batch rows are the batch "
                                   "(cut to --seq-len); default: random tokens from --seed")
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,experts.gate_up_proj,experts.down_proj",
                    help="comma list, as glint's --lora-targets")
    return ap.parse_args(argv)


# Threads are fixed before torch starts its pools (OpenBLAS reads its variable at load).
if __name__ == "__main__":
    _args = parse_args()
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_v] = str(_args.threads)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    """{name: float32 tensor} of one .safetensors file: an 8-byte little-endian header
    length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw data."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())  # writable: torch.frombuffer then shares it without a warning
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        count = (end - begin) // torch.empty((), dtype=dt).element_size()
        t = torch.frombuffer(data, dtype=dt, count=count, offset=begin) if count else torch.empty(0, dtype=dt)
        t = t.reshape(info["shape"])
        out[name] = t.float() if t.is_floating_point() else t.clone()  # copies: data is freed after
    return out


def load_checkpoint(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    if not files:
        sys.exit(f"{d}: no .safetensors file")
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(d, f)))
    return cfg, w


def packed_experts(w, prefix, E):
    """gate_up [E, 2I, H] and down [E, H, I] of one layer's experts, packed or per expert."""
    if prefix + "gate_up_proj" in w:
        return w[prefix + "gate_up_proj"].contiguous(), w[prefix + "down_proj"].contiguous()
    gu = torch.stack([torch.cat([w[f"{prefix}{e}.gate_proj.weight"], w[f"{prefix}{e}.up_proj.weight"]], 0)
                      for e in range(E)])
    down = torch.stack([w[f"{prefix}{e}.down_proj.weight"] for e in range(E)])
    return gu, down


class Model:
    """The base weights (frozen) and the LoRA tensors (trained) of a Qwen3-MoE model."""

    def __init__(self, cfg, w, a):
        if cfg.get("model_type") != "qwen3_moe":
            sys.exit(f"model_type {cfg.get('model_type')!r}: this peer does Qwen3-MoE only")
        if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
            sys.exit("dense layers (mlp_only_layers, decoder_sparse_step) are not supported")
        self.c = c = cfg
        self.H, self.E, self.K = c["hidden_size"], c["num_experts"], c["num_experts_per_tok"]
        self.I = c["moe_intermediate_size"]
        self.heads, self.kv = c["num_attention_heads"], c["num_key_value_heads"]
        self.D = c.get("head_dim") or self.H // self.heads
        self.eps, self.theta = c["rms_norm_eps"], c.get("rope_theta", 10000.0)
        self.norm_topk = c.get("norm_topk_prob", False)
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = w["lm_head.weight"] if "lm_head.weight" in w else self.embed
        self.layers = []
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            L = {k: w[p + n] for k, n in [
                ("in_norm", "input_layernorm.weight"), ("post_norm", "post_attention_layernorm.weight"),
                ("q", "self_attn.q_proj.weight"), ("k", "self_attn.k_proj.weight"),
                ("v", "self_attn.v_proj.weight"), ("o", "self_attn.o_proj.weight"),
                ("q_norm", "self_attn.q_norm.weight"), ("k_norm", "self_attn.k_norm.weight"),
                ("router", "mlp.gate.weight")]}
            L["gate_up"], L["down"] = packed_experts(w, p + "mlp.experts.", self.E)
            self.layers.append(L)
        # LoRA: A ~ U(-1/sqrt(in), 1/sqrt(in)), B = 0.
        targets = set(a.targets.split(","))
        self.scale = a.alpha / a.r
        gen = torch.Generator().manual_seed(a.seed)

        def A(shape, fan_in):
            bound = 1.0 / fan_in ** 0.5
            return (torch.rand(shape, generator=gen) * 2 * bound - bound).requires_grad_(True)

        def B(shape):
            return torch.zeros(shape, requires_grad=True)

        self.lora = []  # [(name, tensor)]
        for l, L in enumerate(self.layers):
            for n in ("q", "k", "v", "o"):
                if n + "_proj" in targets:
                    out_f, in_f = L[n].shape
                    L[n + "_A"], L[n + "_B"] = A((a.r, in_f), in_f), B((out_f, a.r))
                    self.lora += [(f"{l}.{n}_proj.A", L[n + "_A"]), (f"{l}.{n}_proj.B", L[n + "_B"])]
            if "experts.gate_up_proj" in targets:
                L["gu_A"], L["gu_B"] = A((self.E, a.r, self.H), self.H), B((self.E, 2 * self.I, a.r))
                self.lora += [(f"{l}.gate_up.A", L["gu_A"]), (f"{l}.gate_up.B", L["gu_B"])]
            if "experts.down_proj" in targets:
                L["d_A"], L["d_B"] = A((self.E, a.r, self.I), self.I), B((self.E, self.H, a.r))
                self.lora += [(f"{l}.down.A", L["d_A"]), (f"{l}.down.B", L["d_B"])]

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def linear(self, x, L, n):
        y = F.linear(x, L[n])
        if n + "_A" in L:
            y = y + F.linear(F.linear(x, L[n + "_A"]), L[n + "_B"]) * self.scale
        return y

    def rope(self, S):
        inv = (self.theta ** (-torch.arange(0, self.D, 2, dtype=torch.float64) / self.D)).float()
        f = torch.arange(S, dtype=torch.float32).unsqueeze(-1) * inv  # [S, D/2]
        emb = torch.cat([f, f], -1)                                   # [S, D]
        return emb.cos(), emb.sin()

    @staticmethod
    def rotate(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    def attention(self, x, L, cos, sin):
        B, S, _ = x.shape
        q = self.rms(self.linear(x, L, "q").view(B, S, self.heads, self.D), L["q_norm"]).transpose(1, 2)
        k = self.rms(self.linear(x, L, "k").view(B, S, self.kv, self.D), L["k_norm"]).transpose(1, 2)
        v = self.linear(x, L, "v").view(B, S, self.kv, self.D).transpose(1, 2)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        rep = self.heads // self.kv
        if rep > 1:  # GQA: each KV head serves `rep` query heads
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # [B, N, S, D]
        return self.linear(o.transpose(1, 2).reshape(B, S, self.heads * self.D), L, "o")

    def moe(self, x, L):
        shape = x.shape
        x = x.reshape(-1, self.H)                                     # [T, H]
        T, K, I = x.shape[0], self.K, self.I
        probs = torch.softmax(F.linear(x, L["router"]), -1)           # [T, E]
        with torch.no_grad():
            experts = torch.topk(probs, K, -1).indices                # [T, K]
        w = probs.gather(1, experts)                                  # differentiable
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        flat = experts.reshape(-1)                                    # [T*K]
        order = torch.sort(flat, stable=True).indices                 # one permutation
        token = torch.div(order, K, rounding_mode="floor")
        weight = w.reshape(-1).index_select(0, order)
        rows = x.index_select(0, token)                               # [T*K, H], grouped by expert
        counts = torch.bincount(flat, minlength=self.E).tolist()
        parts = rows.split(counts, 0)
        gu, down = L["gate_up"], L["down"]
        lora_gu, lora_d = "gu_A" in L, "d_A" in L
        outs = []
        for e, xe in enumerate(parts):
            if xe.shape[0] == 0:
                continue
            h = xe @ gu[e].t()                                        # [n, 2I]
            if lora_gu:
                h = h + (xe @ L["gu_A"][e].t()) @ L["gu_B"][e].t() * self.scale
            act = F.silu(h[:, :I]) * h[:, I:]                         # [n, I]
            y = act @ down[e].t()                                     # [n, H]
            if lora_d:
                y = y + (act @ L["d_A"][e].t()) @ L["d_B"][e].t() * self.scale
            outs.append(y)
        y = torch.cat(outs, 0) * weight.unsqueeze(1)
        return torch.zeros_like(x).index_add(0, token, y).view(shape)

    def loss(self, ids):
        B, S = ids.shape
        cos, sin = self.rope(S)
        h = F.embedding(ids, self.embed)
        for L in self.layers:
            h = h + self.attention(self.rms(h, L["in_norm"]), L, cos, sin)
            h = h + self.moe(self.rms(h, L["post_norm"]), L)
        logits = F.linear(self.rms(h, self.norm), self.lm_head)        # [B, S, V]
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def batch_tokens(a, vocab):
    if a.data:
        rows = []
        for line in open(a.data):
            if line.strip():
                rows.append(json.loads(line)["input_ids"][:a.seq_len])
            if len(rows) == a.batch:
                break
        if len(rows) < a.batch or any(len(r) != len(rows[0]) for r in rows):
            sys.exit(f"{a.data}: needs {a.batch} rows of one length (at least --seq-len {a.seq_len} tokens)")
        return torch.tensor(rows, dtype=torch.long)
    g = torch.Generator().manual_seed(a.seed)
    return torch.randint(0, vocab, (a.batch, a.seq_len), generator=g)


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def main(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    cfg, w = load_checkpoint(a.model)
    model = Model(cfg, w, a)
    del w
    load_s = time.perf_counter() - t0
    ids = batch_tokens(a, cfg["vocab_size"])
    params = [p for _, p in model.lora]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    steps, losses = [], []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = model.loss(ids)
        losses.append(loss.item())
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if step >= a.warmup:
            steps.append((t1 - t0, t2 - t1, t3 - t2))
    tokens = ids.numel()
    step_s = [sum(s) for s in steps]
    n = len(steps)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    c = cfg
    out = {
        "bench": "peer-eager-cpu", "trainer": "eager-pytorch",
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "allocator": "tcmalloc" if "tcmalloc" in os.environ.get("LD_PRELOAD", "") else "glibc",
        "model": {"layers": c["num_hidden_layers"], "hidden": c["hidden_size"], "heads": c["num_attention_heads"],
                  "kv_heads": c["num_key_value_heads"], "head_dim": model.D, "experts": c["num_experts"],
                  "top_k": c["num_experts_per_tok"], "moe_intermediate": c["moe_intermediate_size"],
                  "vocab": c["vocab_size"]},
        "lora": {"r": a.r, "alpha": a.alpha, "targets": a.targets,
                 "trainable_params": sum(p.numel() for p in params)},
        "batch_size": ids.shape[0], "seq_len": ids.shape[1], "data": a.data or f"random (seed {a.seed})",
        "warmup": a.warmup, "steps_timed": n,
        "tokens_per_s": tokens * n / sum(step_s) if n else None,
        "tokens_per_s_median": tokens / median(step_s) if n else None,
        "step_s": sum(step_s) / n if n else None,
        "step_s_median": median(step_s) if n else None,
        "phase_s": {k: sum(s[i] for s in steps) / n if n else None
                    for i, k in enumerate(("forward", "backward", "optimizer"))},
        "steps_s": [[round(x, 4) for x in s] for s in steps],  # each timed step: forward, backward, optimizer
        "step1_loss": losses[0], "losses": losses,
        "load_s": load_s, "peak_rss_mb": rss,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(_args)
