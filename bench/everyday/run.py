#!/usr/bin/env python3
"""The everyday-trainer benchmark: Qwen3's real 151,936-token vocabulary on an 81 M
parameter Qwen3-MoE (bench/everyday/model.json, mostly embeddings and head), Qwen3's
tokenizer and chat template, a 50-line chat file (chats.jsonl), 20 steps of LoRA.

Usage: run.py GLINT_BINARY QWEN3_TOKENIZER_DIR [--variants name,...] [--work DIR]

Builds the model once (glint init-model, seed 0) with the tokenizer files beside it,
then runs each variant as its own `glint train` process and prints one JSON object per
variant: tokens/s (non-padding tokens over the steps' own time, steps 2..20), peak RSS
of the process (/usr/bin/time), the wall time, and the final loss. The old binary
(before the chunked loss) takes the same flags, except where a variant says otherwise."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

VARIANTS = {
    # item 2 of the issue: batch 32 at --seq-len 128, no micro-batch given
    "b32_seq128": ["--batch-size", "32", "--seq-len", "128"],
    # the same with every default: automatic --seq-len, micro-batch from the budget
    "b32_defaults": ["--batch-size", "32"],
    "b32_mb8_pack_seq128": ["--batch-size", "32", "--seq-len", "128", "--micro-batch-size", "8", "--pack"],
    "b32_pack": ["--batch-size", "32", "--pack"],
    "b32_mb8": ["--batch-size", "32", "--micro-batch-size", "8"],
    "b32_mb4": ["--batch-size", "32", "--micro-batch-size", "4"],
    # bf16 mixed precision against float32 at the same micro-batch
    "b32_mb8_bf16": ["--batch-size", "32", "--micro-batch-size", "8", "--dtype", "bfloat16"],
    "b32_mb8_f32": ["--batch-size", "32", "--micro-batch-size", "8", "--dtype", "float32"],
    # two short chats at --seq-len 1024
    "two_chats_seq1024": ["--batch-size", "2", "--seq-len", "1024", "--data", "@two"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("glint")
    ap.add_argument("tokenizer")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--work", default="/tmp/glint-bench-everyday")
    ap.add_argument("--steps", default="20")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    model = os.path.join(a.work, "model")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        os.makedirs(a.work, exist_ok=True)
        subprocess.run([a.glint, "init-model", "--config", os.path.join(HERE, "model.json"), "--output", model,
                        "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer, f), model)
    chats = os.path.join(HERE, "chats.jsonl")
    two = os.path.join(a.work, "two.jsonl")
    with open(chats) as f, open(two, "w") as g:
        lines = [l for l in f if '"tool_calls"' not in l and len(l) < 700][:2]
        g.writelines(lines)
    for name in a.variants.split(","):
        flags = list(VARIANTS[name])
        data = chats
        if "--data" in flags:
            i = flags.index("--data")
            data = two if flags[i + 1] == "@two" else flags[i + 1]
            del flags[i:i + 2]
        out = os.path.join(a.work, "run-" + name + (("-" + a.label) if a.label else ""))
        shutil.rmtree(out, ignore_errors=True)
        cmd = ["/usr/bin/time", "-v", a.glint, "train", "--model", model, "--data", data, "--steps", a.steps,
               "--output", out, "--log-every", "100"] + flags
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        text = p.stdout
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
        rec = {"variant": name, "label": a.label, "flags": flags, "exit": p.returncode,
               "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None,
               "wall": wall.group(1) if wall else None}
        metrics = os.path.join(out, "metrics.jsonl")
        if p.returncode == 0 and os.path.exists(metrics):
            steps = [json.loads(l) for l in open(metrics)]
            timed = steps[1:] or steps
            tokens = sum(s["tokens"] for s in timed)
            seconds = sum(s["tokens"] / s["tokens_per_s"] for s in timed)
            rec.update({"tokens_per_s": round(tokens / seconds, 1), "tokens_per_step": tokens // len(timed),
                        "final_loss": round(steps[-1]["loss"], 4)})
            est = re.search(r"estimated peak ([\d,]+) MB", text)
            if est:
                rec["estimated_peak_mb"] = int(est.group(1).replace(",", ""))
            mb = re.search(r"micro-batch (\d+) x (\d+) tokens", text)
            if mb:
                rec["micro_batch"] = int(mb.group(1))
                rec["seq_len"] = int(mb.group(2))
        else:
            rec["tail"] = text[-600:]
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    sys.exit(main())
