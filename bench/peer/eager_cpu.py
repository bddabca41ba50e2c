#!/usr/bin/env python3
"""The CPU peer: glint's LoRA training step on a checkpoint of one of its MoE families,
written as a plain eager PyTorch loop that does the same maths, in float32 on the CPU.

Model: read from a glint / Hugging Face checkpoint directory (config.json and its
.safetensors files, as `glint init-model` writes them) by a small safetensors reader of
its own (json + torch.frombuffer; no safetensors or transformers package). Packed experts
(mlp.experts.gate_up_proj, mlp.experts.down_proj) and per-expert keys
(mlp.experts.N.{gate,up,down}_proj.weight) are both read; the latter are packed.

The families' forwards and the LoRA (eager_models.py beside this file): qwen3_moe,
glm4_moe, gpt_oss, deepseek_v3 / kimi_k2. Base weights frozen; AdamW (lr 1e-4, weight
decay 0, as glint's defaults) on the LoRA tensors; no gradient clipping.

Prints one JSON object: tokens/s and seconds per step over the timed steps (medians and
means), forward / backward / optimizer seconds, the step-1 loss, torch version, threads,
peak RSS.

    python3 bench/peer/eager_cpu.py --model /tmp/peer/a --threads 2 --steps 3 --warmup 1
    python3 bench/peer/eager_cpu.py --model DIR --data rows.jsonl   # glint's token rows
    python3 bench/peer/eager_cpu.py --model /tmp/bench/gpt-oss --targets all   # glint's default targets

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
                    help="comma list, as glint's --lora-targets; all: every linear and both expert tensors")
    return ap.parse_args(argv)


# Threads are fixed before torch starts its pools (OpenBLAS reads its variable at load).
if __name__ == "__main__":
    _args = parse_args()
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_v] = str(_args.threads)

import torch  # noqa: E402
import eager_models  # noqa: E402  (beside this file)

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
    model = eager_models.build(cfg, w, a)
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
    out = {
        "bench": "peer-eager-cpu", "trainer": "eager-pytorch",
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "allocator": "tcmalloc" if "tcmalloc" in os.environ.get("LD_PRELOAD", "") else "glibc",
        "model": model.describe(),
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
