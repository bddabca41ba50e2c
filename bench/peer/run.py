#!/usr/bin/env python3
"""The peer benchmark: the same model, data and LoRA trained by transformers + PEFT and by
glint, one after the other on the same GPU, in bf16.

Model: Qwen3-30B-A3B's layer shape (hidden 2048, 32 heads / 4 KV heads, head_dim 128,
128 experts of width 768, top-8, vocabulary 151,936) with --layers layers and random
weights, written once with transformers' save_pretrained so that both read the same
checkpoint. Data: rows of --seq-len random tokens (every token trained). LoRA r 16,
alpha 32, on q/k/v/o (target_modules) and on the packed experts (target_parameters
mlp.experts.gate_up_proj and mlp.experts.down_proj). AdamW, lr 1e-4, no clipping.

Prints one JSON object per trainer and a markdown table: tokens/s over the timed steps,
peak GPU memory, and
    LoRA-MFU = tokens/s x (4 N_active + 6 N_lora_active + 3 F_attn) / peak bf16 FLOP/s
where N_active counts the weights a token multiplies (attention, router, its top-k
experts, the output head), N_lora_active the LoRA weights it multiplies, and F_attn the
forward FLOPs of causal attention per token (4 x S/2 x heads x head_dim per layer).

Usage (torch, transformers >= 5 and peft installed; glint built against that torch):
    python3 bench/peer/run.py --glint build-gpu/glint [--layers 4] [--steps 10]
    python3 bench/peer/run.py --glint build/glint --dry-run   # tiny shape, CPU, float32
"""
import argparse
import json
import os
import subprocess
import sys
import time

QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 151936,
    "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "attention_bias": False, "initializer_range": 0.02,
    "output_router_logits": False, "router_aux_loss_coef": 0.0,
}
TINY = dict(QWEN3_30B_A3B, vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2)
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def flops_per_token(c, layers, r, seq_len):
    H, heads, kv, D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    I, E, K, V = c["moe_intermediate_size"], c["num_experts"], c["num_experts_per_tok"], c["vocab_size"]
    attn_w = H * heads * D * 2 + H * kv * D * 2  # q, o; k, v
    expert_w = 3 * H * I  # gate, up, down
    n_active = layers * (attn_w + H * E + K * expert_w) + V * H
    lora_attn = r * (H + heads * D) * 2 + r * (H + kv * D) * 2
    lora_expert = K * (r * (H + 2 * I) + r * (I + H))
    n_lora = layers * (lora_attn + lora_expert)
    f_attn = layers * 4 * (seq_len / 2) * heads * D
    return n_active, n_lora, f_attn, 4 * n_active + 6 * n_lora + 3 * f_attn


def make_model(cfg_dict, path, dtype):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    if os.path.exists(os.path.join(path, "config.json")):
        return
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**cfg_dict)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    model.save_pretrained(path, safe_serialization=True)


def make_data(path, vocab, seq_len, rows, seed=1):
    import random
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(rows):
            f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(seq_len)]}) + "\n")


def run_peft(a, model_dir, data_path, device, dtype):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    rows = [json.loads(l)["input_ids"] for l in open(data_path)]
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype).to(device)
    backend = "default"
    for name in ("grouped_mm", "batched_mm"):  # transformers v5's expert kernels, fastest first
        try:
            model.set_experts_implementation(name)
            backend = name
            break
        except Exception:
            continue
    cfg = LoraConfig(r=a.r, lora_alpha=2 * a.r, target_modules=ATTENTION, target_parameters=EXPERTS,
                     task_type="CAUSAL_LM")
    model = get_peft_model(model, cfg)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    times, tokens = [], 0
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    for step in range(a.warmup + a.steps):
        ids = torch.tensor(rows[(step * a.batch) % len(rows):][:a.batch], device=device)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
            tokens += ids.numel()
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
    return {"trainer": "transformers+peft", "experts_backend": backend, "tokens_per_s": tokens / sum(times),
            "peak_gpu_mb": peak, "final_loss": loss.item()}


def run_glint(a, model_dir, data_path, device, dtype_name):
    out = os.path.join(a.work, "glint-run")
    cmd = [a.glint, "train", "--model", model_dir, "--data", data_path,
           "--device", device, "--dtype", dtype_name, "--seq-len", str(a.seq_len), "--batch-size", str(a.batch),
           "--micro-batch-size", str(a.batch), "--steps", str(a.warmup + a.steps), "--lr", "1e-4",
           "--lora-r", str(a.r), "--lora-alpha", str(2 * a.r), "--max-grad-norm", "0", "--warmup-steps", "0",
           "--lora-targets", ",".join(ATTENTION + ["experts.gate_up_proj", "experts.down_proj"]),
           "--output", out, "--overwrite", "--log-every", "1", "--eval-samples", "0"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        return {"trainer": "glint", "exit": p.returncode, "tail": p.stdout[-2000:]}
    steps = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))][a.warmup:]
    seconds = sum(s["tokens"] / s["tokens_per_s"] for s in steps)
    rec = {"trainer": "glint", "tokens_per_s": sum(s["tokens"] for s in steps) / seconds,
           "peak_gpu_mb": max((s.get("peak_gpu_mb", 0) for s in steps), default=None),
           "final_loss": steps[-1]["loss"] if steps else None,
           "phase_s": {k: sum(s.get(k, 0) for s in steps) / max(1, len(steps))
                       for k in ("forward_s", "backward_s", "optimizer_s")}}
    allocs = [s.get("gpu_device_allocs") for s in steps if "gpu_device_allocs" in s]
    if len(allocs) >= 2:
        rec["driver_allocs_in_timed_steps"] = allocs[-1] - allocs[0]
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--glint", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--work", default="/tmp/glint-peer")
    ap.add_argument("--peak-tflops", type=float, default=0, help="bf16 peak of the GPU (default: by its name)")
    ap.add_argument("--only", choices=["peft", "glint"], default=None)
    ap.add_argument("--dry-run", action="store_true", help="a tiny shape on the CPU in float32")
    a = ap.parse_args()
    import torch
    dry = a.dry_run or not torch.cuda.is_available()
    if dry and not a.dry_run:
        sys.exit("peer benchmark: no GPU here (--dry-run runs a tiny shape on the CPU)")
    if dry:
        a.seq_len, a.steps, a.warmup = min(a.seq_len, 64), min(a.steps, 2), 1
    device = "cpu" if dry else "cuda"
    dtype, dtype_name = (torch.float32, "float32") if dry else (torch.bfloat16, "bfloat16")
    cfg = dict(TINY if dry else QWEN3_30B_A3B, num_hidden_layers=a.layers)
    os.makedirs(a.work, exist_ok=True)
    model_dir = os.path.join(a.work, f"model-{'tiny' if dry else 'a3b'}-{a.layers}l")
    make_model(cfg, model_dir, dtype)
    data = os.path.join(a.work, f"data-{a.seq_len}.jsonl")
    make_data(data, cfg["vocab_size"], a.seq_len, a.batch * (a.warmup + a.steps))
    n_active, n_lora, f_attn, per_token = flops_per_token(cfg, a.layers, a.r, a.seq_len)
    gpu = torch.cuda.get_device_name(0) if not dry else "cpu"
    peak = a.peak_tflops * 1e12 or next((v for k, v in PEAK_BF16.items() if k in gpu), 0)
    results = []
    if a.only in (None, "peft"):
        results.append(run_peft(a, model_dir, data, device, dtype))
        torch.cuda.empty_cache() if not dry else None
    if a.only in (None, "glint"):
        results.append(run_glint(a, model_dir, data, device, dtype_name))
    for r in results:
        r.update({"gpu": gpu, "layers": a.layers, "seq_len": a.seq_len, "batch": a.batch, "lora_r": a.r,
                  "n_active": n_active, "n_lora_active": n_lora, "f_attn": f_attn})
        if peak and r.get("tokens_per_s"):
            r["lora_mfu"] = r["tokens_per_s"] * per_token / peak
        print(json.dumps(r), flush=True)
    print("\n| trainer | tokens/s | peak GPU MB | LoRA-MFU |\n|---|---|---|---|")
    for r in results:
        mfu = f"{100 * r['lora_mfu']:.1f}%" if "lora_mfu" in r else "-"
        tps = f"{r['tokens_per_s']:.0f}" if r.get("tokens_per_s") else "failed"
        print(f"| {r['trainer']} | {tps} | {r.get('peak_gpu_mb') or '-'} | {mfu} |")


if __name__ == "__main__":
    main()
