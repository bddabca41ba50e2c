#!/usr/bin/env bash
# glint against the eager PyTorch CPU peer (bench/peer/eager_cpu.py) on the same
# checkpoint, in one sitting: per shape, N rounds of  glint | peer+tcmalloc | peer+glibc,
# alternated, then the medians and their ratios. Every run: LoRA r 16, alpha 32 on
# q/k/v/o and the packed experts (--targets), AdamW lr 1e-4, float32, batch 4 x 512
# (--batch), --threads each. The families the peer has: bench/peer/eager_models.py.
#
# glint runs on the host (`glint bench train`, which links tcmalloc); the peer runs in the
# Debian 13 chroot of scripts/torch2-check.sh (python3-torch 2.6, python3-numpy,
# libtcmalloc-minimal4t64 installed there), entered in a private mount namespace so that
# its bind mounts vanish with it. Both run with OMP_WAIT_POLICY=PASSIVE, which glint sets
# for itself (src/cli/main.cc).
#
# Before the timing, a loss check: glint train --steps 1 and the peer on the same 4 token
# rows (WORK/NAME.rows.jsonl, random tokens, seed 1); both print their step-1 loss.
#
#   bench/peer/cpu_compare.sh [options] CONFIG.json...     (as root: chroot, mount)
#     --glint PATH     glint binary, glint-core beside it (default: build/glint)
#     --rounds N       rounds per shape (default 3)
#     --steps N        timed steps per run (default 3), after --warmup N (default 1)
#     --threads N      threads on both sides (default 2)
#     --batch N        rows of 512 tokens per step (default 4)
#     --targets LIST   LoRA targets on both sides, as glint's --lora-targets (default
#                      q_proj,k_proj,v_proj,o_proj,experts.gate_up_proj,experts.down_proj;
#                      all: every linear and both expert tensors, glint's default)
#     --work DIR       models, rows and logs (default /tmp/peer); must be outside the repo
#     --chroot DIR     the Debian 13 root (default /var/cache/glint/debian13)
#     --no-glibc       leave out the peer's glibc-malloc runs
# A CONFIG's model is made once with `glint init-model --seed 1` in WORK/<config name>.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
glint=$repo/build/glint
rounds=3 steps=3 warmup=1 threads=2 work=/tmp/peer root=/var/cache/glint/debian13 glibc=1
batch=4 seq=512
targets=q_proj,k_proj,v_proj,o_proj,experts.gate_up_proj,experts.down_proj
configs=()
while [ $# -gt 0 ]; do
  case $1 in
    --glint) glint=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --steps) steps=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --threads) threads=$2; shift ;;
    --batch) batch=$2; shift ;;
    --targets) targets=$2; shift ;;
    --work) work=$2; shift ;;
    --chroot) root=$2; shift ;;
    --no-glibc) glibc=0 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cpu_compare: unknown option $1" >&2; exit 2 ;;
    *) configs+=("$1") ;;
  esac
  shift
done
[ ${#configs[@]} -gt 0 ] || configs=("$repo/bench/peer/qwen3moe_a.json" "$repo/bench/peer/qwen3moe_b.json")
[ -x "$glint" ] && [ -x "$(dirname "$glint")/glint-core" ] || { echo "cpu_compare: no $glint (and glint-core beside it)" >&2; exit 2; }
[ -x "$root/usr/bin/python3" ] || { echo "cpu_compare: no Debian 13 chroot at $root (scripts/torch2-check.sh --prepare)" >&2; exit 2; }
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[ -e "$root$tcmalloc" ] || { echo "cpu_compare: $root has no $tcmalloc (apt-get install libtcmalloc-minimal4t64 there)" >&2; exit 2; }
work=$(mkdir -p "$work" && cd "$work" && pwd)
mkdir -p "$root/peer-src" "$root$work"

# peer LD_PRELOAD ARGS...: eager_cpu.py in the chroot; its JSON on stdout.
peer() {
  local preload=$1; shift
  unshare -m bash -c '
    set -e; root=$1 repo=$2 work=$3 preload=$4; shift 4
    mount --bind /proc "$root/proc"; mount --bind /dev "$root/dev"
    mount --bind "$repo" "$root/peer-src"; mount --bind "$work" "$root$work"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
      OMP_WAIT_POLICY=PASSIVE ${preload:+LD_PRELOAD=$preload} \
      python3 /peer-src/bench/peer/eager_cpu.py "$@"' peer "$root" "$repo" "$work" "$preload" "$@"
}

# json FILE EXPR: a field of the JSON object in FILE, or of its last line (python3: json only).
json() { python3 -c 'import json,sys
t = open(sys.argv[1]).read().strip()
try: d = json.loads(t)
except ValueError: d = json.loads(t.splitlines()[-1])
print(eval(sys.argv[2], {}, {"d": d}))' "$1" "$2"; }

echo "cpu_compare: glint $glint ($(ldd "$(dirname "$glint")/glint-core" | grep -o 'libtcmalloc[^ ]*' | head -1 || echo 'glibc malloc'))," \
     "$rounds rounds, $warmup+$steps steps, $threads threads, batch $batch x $seq, LoRA on $targets, started $(date -u +%H:%M:%S)"
summary=()
for cfg in "${configs[@]}"; do
  name=$(basename "$cfg" .json)
  model=$work/$name
  if ! compgen -G "$model/*.safetensors" > /dev/null; then
    nice "$glint" init-model --config "$cfg" --output "$model" --seed 1 >&2
  fi
  vocab=$(json "$model/config.json" 'd["vocab_size"]')
  rows=$work/$name.rows.jsonl
  python3 -c 'import json,random,sys; r=random.Random(1); v,b,s=map(int,sys.argv[1:4])
print("\n".join(json.dumps({"input_ids": [r.randrange(v) for _ in range(s)]}) for _ in range(b)))' \
    "$vocab" "$batch" "$seq" > "$rows"

  # The loss check: step 1 on the same rows (B = 0: the base model's loss on both sides).
  nice "$glint" train --model "$model" --data "$rows" --steps 1 --batch-size $batch --micro-batch-size $batch \
    --seq-len $seq --no-pack --lr 1e-4 --warmup-steps 0 --max-grad-norm 0 --weight-decay 0 \
    --lora-r 16 --lora-alpha 32 --lora-targets $targets --dtype float32 --device cpu --threads "$threads" \
    --eval-samples 0 --output "$work/$name.glint-run" --overwrite --log-every 1 > "$work/$name.glint-train.log" 2>&1
  glint_loss=$(json "$work/$name.glint-run/metrics.jsonl" 'd["loss"]')
  peer "" --model "$model" --data "$rows" --steps 0 --warmup 1 --threads "$threads" --batch $batch --targets $targets \
    > "$work/$name.peer-loss.json"
  peer_loss=$(json "$work/$name.peer-loss.json" 'd["step1_loss"]')
  echo "$name: step-1 loss glint $glint_loss, peer $peer_loss"

  : > "$work/$name.runs.jsonl"
  for ((i = 1; i <= rounds; i++)); do
    "$glint" bench train --model "$model" --steps "$steps" --warmup "$warmup" --batch-size $batch \
      --micro-batch-size $batch --seq-len $seq --lora-r 16 --lora-alpha 32 --lora-targets $targets \
      --max-grad-norm 0 --weight-decay 0 --dtype float32 --device cpu --threads "$threads" \
      > "$work/$name.glint.json" 2> "$work/$name.glint.err"
    python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read()); print(json.dumps(dict(side="glint", round=int(sys.argv[2]), step_s=d["step_s"], tokens_per_s=d["tokens_per_s"], phase_s=d["phase_s"], peak_rss_mb=d["peak_rss_mb"])))' \
      "$work/$name.glint.json" "$i" >> "$work/$name.runs.jsonl"
    variants=(tcmalloc:$tcmalloc)
    [ $glibc = 0 ] || variants+=(glibc:)
    for v in "${variants[@]}"; do
      peer "${v#*:}" --model "$model" --data "$rows" --steps "$steps" --warmup "$warmup" --threads "$threads" \
        --batch $batch --targets $targets > "$work/$name.peer.json"
      python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read()); print(json.dumps(dict(side="peer-"+sys.argv[3], round=int(sys.argv[2]), step_s=d["step_s"], tokens_per_s=d["tokens_per_s"], phase_s=d["phase_s"], peak_rss_mb=d["peak_rss_mb"], torch=d["torch"])))' \
        "$work/$name.peer.json" "$i" "${v%%:*}" >> "$work/$name.runs.jsonl"
    done
    tail -n $((1 + ${#variants[@]})) "$work/$name.runs.jsonl" | python3 -c 'import json,sys
print("  round", ", ".join("%s %.1f tok/s" % (d["side"], d["tokens_per_s"]) for d in map(json.loads, sys.stdin)))'
  done
  summary+=("$(python3 - "$work/$name.runs.jsonl" "$name" "$glint_loss" "$peer_loss" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda side, f: statistics.median(f(r) for r in runs if r["side"] == side)
sides = [s for s in ("glint", "peer-tcmalloc", "peer-glibc") if any(r["side"] == s for r in runs)]
out = {"shape": sys.argv[2], "rounds": sum(r["side"] == "glint" for r in runs),
       "step1_loss": {"glint": float(sys.argv[3]), "peer": float(sys.argv[4])}}
for s in sides:
    out[s] = {"tokens_per_s": med(s, lambda r: r["tokens_per_s"]), "step_s": med(s, lambda r: r["step_s"]),
              "phase_s": {k: med(s, lambda r: r["phase_s"][k]) for k in ("forward", "backward", "optimizer")},
              "peak_rss_mb": med(s, lambda r: r["peak_rss_mb"])}
for s in sides[1:]:  # the ratio of the medians, and each round's own ratio (same round, back to back)
    out["glint/" + s] = out["glint"]["tokens_per_s"] / out[s]["tokens_per_s"]
    by_round = {r["round"]: r["tokens_per_s"] for r in runs if r["side"] == s}
    out["glint/" + s + " per round"] = [round(r["tokens_per_s"] / by_round[r["round"]], 3)
                                        for r in runs if r["side"] == "glint" and r["round"] in by_round]
print(json.dumps(out))
EOF
)")
done
echo "cpu_compare: done $(date -u +%H:%M:%S)"
for s in "${summary[@]}"; do echo "$s"; done
