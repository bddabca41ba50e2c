#!/usr/bin/env bash
# One command on a machine with a CUDA PyTorch: builds glint against that PyTorch's
# libtorch, runs the test suite, trains on the GPU (bench train, float32 and bf16), runs
# the peer benchmark against transformers + PEFT (bench/peer/run.py), writes the golden
# fixtures (tests/golden/make_golden.py, into DIR/golden: copy them to tests/golden and
# commit), and writes one report: DIR/report.json and DIR/report.md (for docs/BENCHMARKS.md).
#
#   scripts/gpu-check.sh [--out DIR] [--tests REGEX] [--dry-run]
#
# The machine needs python3 with torch, CMake and ninja; not the CUDA toolkit (without
# nvcc, cmake/cuda_without_toolkit.cmake takes CUDA's headers and libcudart from the
# nvidia-* packages beside torch). The other build dependencies
# (nlohmann-json, CLI11, GoogleTest, PCRE2, ICU, pkg-config) come from the system when it
# has them, else from .gpu-deps/*.deb (scripts/gpu-deps.sh downloads them on a machine
# with apt), unpacked under /tmp/glint-deps. --dry-run takes the same steps where no GPU
# is present (the device becomes the CPU): it checks the script, not the GPU.
#
# The suite runs as in CI with the GPU hidden; then, with GLINT_TEST_DEVICE=cuda, the
# device tests (tests/train/device_test.cc) train on the GPU in float32 and bf16 against
# the CPU's float64 run. The GPU is also exercised by the training runs, the peer
# benchmark and the golden fixtures below.
set -euo pipefail
cd "$(dirname "$0")/.."
out=/tmp/glint-gpu-check
tests=""
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "gpu-check: unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
log() { echo "gpu-check: $*" | tee -a "$out/steps.log"; }

python3 - >"$out/machine.json" <<'PY' || { echo "gpu-check: python3 cannot import torch" >&2; exit 2; }
import json, os, platform, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": torch.cuda.device_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu_cores": os.cpu_count(), "python": platform.python_version()}
print(json.dumps(info))
PY
gpus=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"])' "$out/machine.json")
if [ "$gpus" = 0 ] && [ "$dry" = 0 ]; then
  echo "gpu-check: torch sees no GPU here; --dry-run runs the steps on the CPU" >&2
  exit 2
fi
device=cuda
[ "$gpus" != 0 ] || device=cpu
log "machine: $(cat "$out/machine.json")"

# Build dependencies the image may lack, from downloaded .debs.
if [ -d .gpu-deps ] && ls .gpu-deps/*.deb >/dev/null 2>&1; then
  prefix=/tmp/glint-deps
  mkdir -p "$prefix"
  for f in .gpu-deps/*.deb; do
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$f" "$prefix"
    else  # no dpkg: the .deb is an ar archive around data.tar.{xz,zst,gz}
      member=$(ar t "$f" | grep '^data.tar')
      case "$member" in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
      ar p "$f" "$member" | tar -x $z -C "$prefix" -f -
    fi
  done
  multiarch=$prefix/usr/lib/x86_64-linux-gnu
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$multiarch${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$prefix/usr/bin:$PATH"
  # pkg-config files say prefix=/usr: the sysroot puts them under $prefix.
  export PKG_CONFIG_PATH="$multiarch/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  log "build dependencies from .gpu-deps unpacked in $prefix"
fi

start=$(date +%s)
GLINT_NO_INSTALL=1 GLINT_BUILD_DIR=build-gpu GLINT_REFERENCE_TESTS=OFF \
  GLINT_BUILD_JOBS="${GLINT_BUILD_JOBS:-$(nproc)}" ./scripts/build.sh --tests >"$out/build.log" 2>&1 || {
  log "build failed; the end of build.log:"
  tail -40 "$out/build.log"
  exit 1
}
build_s=$(( $(date +%s) - start ))
log "built in ${build_s} s: $(./build-gpu/glint --version)"

start=$(date +%s)
set +e
# The suite as CI runs it, with the GPU hidden (multi-rank tests start several ranks on one
# node, and `--device auto` would give each a GPU); then the device tests on the GPU.
(cd build-gpu && CUDA_VISIBLE_DEVICES= ctest -j"$(nproc)" --output-on-failure ${tests:+-R "$tests"}) \
  >"$out/ctest.log" 2>&1
ctest_rc=$?
(cd build-gpu && GLINT_TEST_DEVICE=$device ctest --output-on-failure -R OnTheTestDevice) >>"$out/ctest.log" 2>&1 ||
  ctest_rc=1
# Ranks over NCCL, one GPU each: 2 ranks with --ep 2 --fsdp (overlap on, the GPU default)
# against the 1-process run on one GPU, float32, every step's loss within 1e-5 relative.
mesh="skipped: needs 2+ GPUs, this machine has $gpus"
if [ "$gpus" -ge 2 ] 2>/dev/null && [ "$device" = cuda ]; then
  mesh_flags=(--steps 5 --batch-size 8 --eval-samples 0 --dtype float32 --device cuda --seed 3)
  ./build-gpu/glint train "${mesh_flags[@]}" --output "$out/mesh-1" >"$out/mesh.log" 2>&1 &&
    ./build-gpu/glint launch -n 2 -- ./build-gpu/glint train "${mesh_flags[@]}" --ep 2 --fsdp \
      --output "$out/mesh-2" >>"$out/mesh.log" 2>&1 &&
    mesh=$(python3 - "$out/mesh-1/metrics.jsonl" "$out/mesh-2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if l.strip()] for f in sys.argv[1:3])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(("passed" if len(a) == len(b) == 5 and worst <= 1e-5 else "FAILED") + f": worst loss difference {worst:.2e}")
PY
    ) || mesh="FAILED: see mesh.log"
  case "$mesh" in passed*) ;; *) ctest_rc=1 ;; esac
fi
set -e
log "multi-rank over NCCL (--ep 2 --fsdp vs 1 GPU): $mesh"
echo "$mesh" >"$out/mesh.txt"
tests_s=$(( $(date +%s) - start ))
summary=$(grep -E "tests passed|tests failed" "$out/ctest.log" | tr '\n' ';' | sed 's/;$//')
log "tests (${tests_s} s): ${summary:-no summary, see ctest.log}"

# Training on the device: the built-in bench model in float32 and in bf16.
: >"$out/bench.jsonl"
bench_flags=()
[ "$device" = cuda ] || bench_flags=(--steps 1 --warmup 0 --seq-len 64 --batch-size 2)  # a dry run: short
for dtype in float32 bfloat16; do
  if ./build-gpu/glint bench train --device "$device" --dtype "$dtype" "${bench_flags[@]}" \
       >"$out/bench-$dtype.log" 2>&1; then
    grep '^{' "$out/bench-$dtype.log" | tail -1 >>"$out/bench.jsonl" || true
    log "bench train $dtype on $device: $(tail -1 "$out/bench.jsonl")"
  else
    log "bench train $dtype on $device failed; the end of its log:"
    tail -20 "$out/bench-$dtype.log" | tee -a "$out/steps.log"
  fi
done

# The peer benchmark and the golden fixtures (they need transformers and peft).
peer_flags=(--glint ./build-gpu/glint --layers "${GLINT_PEER_LAYERS:-4}" --work "$out/peer-work")
[ "$device" = cuda ] || peer_flags+=(--dry-run)
if python3 bench/peer/run.py "${peer_flags[@]}" >"$out/peer.log" 2>&1; then
  grep '^{' "$out/peer.log" >"$out/peer.jsonl" || true
  log "peer benchmark: $(tr '\n' ' ' <"$out/peer.jsonl")"
else
  : >"$out/peer.jsonl"
  log "peer benchmark failed; the end of peer.log:"
  tail -20 "$out/peer.log" | tee -a "$out/steps.log"
fi
if python3 tests/golden/make_golden.py --out "$out/golden" >"$out/golden.log" 2>&1; then
  log "golden fixtures: $(tr '\n' ' ' <"$out/golden.log")"
else
  log "golden fixtures failed; the end of golden.log:"
  tail -20 "$out/golden.log" | tee -a "$out/steps.log"
fi

python3 - "$out" "$ctest_rc" "$build_s" "$tests_s" "$summary" <<'PY'
import json, sys
out, rc, build_s, tests_s, summary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
machine = json.load(open(out + "/machine.json"))
bench = [json.loads(l) for l in open(out + "/bench.jsonl") if l.strip()]
peer = [json.loads(l) for l in open(out + "/peer.jsonl") if l.strip()]
report = {"machine": machine, "build_s": build_s, "tests": {"exit": rc, "summary": summary, "seconds": tests_s},
          "multi_rank_nccl": open(out + "/mesh.txt").read().strip(),
          "bench_train": bench, "peer": peer}
json.dump(report, open(out + "/report.json", "w"), indent=1)
lines = [f"Machine: {machine['gpu'] or 'no GPU (dry run)'}, torch {machine['torch']} (CUDA {machine['cuda']}), "
         f"{machine['cpu_cores']} cores. Build {build_s} s; tests: {summary} ({tests_s} s).",
         f"Ranks over NCCL (--ep 2 --fsdp against one GPU): {report['multi_rank_nccl']}.", "",
         "| run | dtype | tokens/s | peak memory (MB) |", "|---|---|---|---|"]
for b in bench:
    mem = b.get("peak_gpu_mb", b.get("peak_rss_mb", ""))
    mem = f"{mem:.0f}" if isinstance(mem, (int, float)) else mem
    lines.append(f"| bench train | {b.get('dtype', '')} | {b.get('tokens_per_s', 0):.1f} | {mem} |")
lines += ["", "| peer benchmark | tokens/s | peak GPU MB | LoRA-MFU |", "|---|---|---|---|"]
for p in peer:
    mfu = f"{100 * p['lora_mfu']:.1f}%" if "lora_mfu" in p else "-"
    tps = f"{p['tokens_per_s']:.0f}" if p.get("tokens_per_s") else "failed"
    lines.append(f"| {p['trainer']} | {tps} | {p.get('peak_gpu_mb', '-')} | {mfu} |")
open(out + "/report.md", "w").write("\n".join(lines) + "\n")
print(json.dumps(report))
print("\n".join(lines))
PY
exit $ctest_rc
