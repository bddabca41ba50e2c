#!/usr/bin/env bash
# CI's CUDA compile stage: glint's whole library (glint_lib, glint_http, glint_cli) compiled
# as a CUDA build (-DGLINT_CUDA=1 -DUSE_C10D_NCCL: flash attention's varlen kernel,
# at::_grouped_mm below 2.8 excepted, the caching allocator's statistics, ProcessGroupNCCL)
# against Debian 13's libtorch-cuda 2.6 headers, on a machine with no GPU, no nvcc and
# nothing installed: two .deb files (2.8 MB) are unpacked into a private folder, and glint's
# own CMakeLists.txt configures against them through the stand-ins of
# cmake/cuda_without_toolkit.cmake, as on a GPU machine without the CUDA toolkit. No link:
# the libraries themselves are not downloaded (they are empty stand-in files here).
#
#   scripts/cuda-compile-check.sh            the stage (fails on any compile error)
#   scripts/cuda-compile-check.sh --newest   then the same compile commands, -fsyntax-only
#                                            and C++20, against Debian unstable's newest
#                                            libtorch-dev headers (2.14 today: the first
#                                            with the _grouped_mm path); prints one line
#                                            and never fails the stage
#
# CUDA's own headers (cuda_runtime_api.h, nccl.h): /usr/local/cuda/include where it has
# both, else Debian 13's nvidia-cuda-dev and libnccl-dev (about 1 GB to download, once).
# GLINT_CUDA_CHECK_DIR (default /var/cache/glint/cudacheck) keeps the downloads between
# runs; GLINT_BUILD_DIR (default build-cuda) is the build tree, whose objects go through ccache.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=${GLINT_CUDA_CHECK_DIR:-/var/cache/glint/cudacheck}
build=${GLINT_BUILD_DIR:-build-cuda}
newest=0
for arg in "$@"; do
  case $arg in
    --newest) newest=1 ;;
    *) echo "cuda-compile-check.sh: unknown argument $arg (known: --newest)" >&2; exit 2 ;;
  esac
done
log() { echo "cuda-compile-check: $*"; }

# fetch NAME "deb URL SUITE COMPONENTS" MAX_AGE_DAYS PACKAGE...: the packages' files,
# unpacked (not installed) into $work/NAME/sysroot; again only when older than MAX_AGE_DAYS.
fetch() {
  local name=$1 source=$2 max_age=$3
  shift 3
  local dir=$work/$name
  if [ -e "$dir/.ready" ] && [ -z "$(find "$dir/.ready" -mtime +"$max_age")" ]; then return 0; fi
  rm -rf "$dir"
  mkdir -p "$dir/apt/lists/partial" "$dir/apt/archives/partial" "$dir/debs" "$dir/sysroot"
  cat >"$dir/apt/apt.conf" <<EOF
Dir::State::Lists "$dir/apt/lists";
Dir::State::status "$dir/apt/status";
Dir::Cache "$dir/apt";
Dir::Cache::archives "$dir/apt/archives";
Dir::Etc::SourceList "$dir/apt/sources.list";
Dir::Etc::SourceParts "/nonexistent";
APT::Architecture "amd64";
APT::Sandbox::User "root";
EOF
  echo "$source" >"$dir/apt/sources.list"
  touch "$dir/apt/status"
  APT_CONFIG=$dir/apt/apt.conf apt-get update -qq
  (cd "$dir/debs" && APT_CONFIG=$dir/apt/apt.conf apt-get download -qq "$@")
  local f
  for f in "$dir"/debs/*.deb; do dpkg-deb -x "$f" "$dir/sysroot"; done
  rm -rf "$dir/apt/lists" "$dir/debs"
  touch "$dir/.ready"
}

mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

t0=$SECONDS
fetch torch26 "deb $mirror trixie contrib" 10000 libtorch-cuda-dev libgloo-cuda-dev
sysroot=$work/torch26/sysroot
# TorchConfig looks the libraries up and checks that they exist; nothing here links them.
# Empty files stand in for them: where the -dev package's links point, and for the
# versioned names the import targets name.
libdir=$sysroot/usr/lib/x86_64-linux-gnu
for link in "$libdir"/lib*.so; do
  target=$libdir/$(readlink "$link")
  [ -e "$target" ] || : >"$target"
done
for lib in c10 c10_cuda torch torch_cpu torch_cuda; do
  [ -e "$libdir/lib$lib.so.2.6.0" ] || : >"$libdir/lib$lib.so.2.6.0"
done
if [ -f /usr/local/cuda/include/cuda_runtime_api.h ] && [ -f /usr/local/cuda/include/nccl.h ]; then
  cuda_include=/usr/local/cuda/include
else
  fetch cuda "deb $mirror trixie main contrib non-free" 10000 nvidia-cuda-dev libnccl-dev libcu++-dev
  cuda_include=$work/cuda/sysroot/usr/include
fi
torch_version() { grep -ho '[0-9]*\.[0-9]*\.[0-9]*' "$1/usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfigVersion.cmake" | head -1; }
log "headers: libtorch-cuda $(torch_version "$sysroot"), CUDA's from $cuda_include ($((SECONDS - t0)) s)"

# Configured as a machine without the toolkit sees it: no nvcc on PATH, the stand-ins on.
path_without_nvcc=$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:)
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
t1=$SECONDS
PATH=$path_without_nvcc cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$sysroot/usr" -DGLINT_CUDA_STAND_IN=ON -DGLINT_CUDA_INCLUDE_DIRS="$cuda_include" \
  -DGLINT_BUILD_TESTS=OFF -DGLINT_REFERENCE_TESTS=OFF >"$work/configure.log" 2>&1 || {
  tail -30 "$work/configure.log"; log "FAILED: the configure against libtorch-cuda ($work/configure.log)"; exit 1; }
grep -q "glint: libtorch 2.6.0 with CUDA" "$work/configure.log" || {
  tail -30 "$work/configure.log"; log "FAILED: the configure did not take the CUDA branch"; exit 1; }
python3 - "$build/compile_commands.json" <<'PY' || { log "FAILED: the library is not compiled as a CUDA build"; exit 1; }
import json, sys
# What reads no torch header: glint_wire (the protobuf messages and their converter),
# and glint_base, glint_cli_base and the glint front (what links no libtorch).
torch_free = ("glint_wire.dir", "glint_base.dir", "glint_cli_base.dir", "/glint.dir/")
entries = [e for e in json.load(open(sys.argv[1]))
           if ("/src/" in e["file"] or "/unity/glint_" in e["file"])
           and not any(t in e.get("output", e["command"]) for t in torch_free)]
bad = [e["file"] for e in entries if "-DGLINT_CUDA=1" not in e["command"] or "-DUSE_C10D_NCCL" not in e["command"]]
if not entries or bad:
    print("without -DGLINT_CUDA=1 -DUSE_C10D_NCCL:", bad or "no entries", file=sys.stderr)
    sys.exit(1)
PY
PATH=$path_without_nvcc ninja -C "$build" glint_lib glint_http glint_cli >"$work/build.log" 2>&1 || {
  grep -A12 "error" "$work/build.log" | head -60; log "FAILED: the CUDA build of the library does not compile ($work/build.log)"; exit 1; }
# Every torch header came from the CUDA libtorch, none from the machine's own libtorch.
if ninja -C "$build" -t deps | grep -E '^ +/usr/include/(torch|ATen|c10)/' | head -3 | grep -q .; then
  log "FAILED: a torch header was read from /usr/include instead of $sysroot"; exit 1
fi
objects=$(ninja -C "$build" -t deps | grep -c '\.o: #deps' || true)
log "the library as a CUDA build against libtorch-cuda 2.6: $objects objects compiled in $((SECONDS - t1)) s"

if [ $newest = 1 ]; then
  t2=$SECONDS
  if fetch newest "deb $mirror sid main" 1 libtorch-dev >"$work/newest.log" 2>&1; then
    newroot=$work/newest/sysroot
    version=$(torch_version "$newroot")
    # A CPU build of libtorch: it ships the CUDA headers but not this generated one.
    mkdir -p "$work/newest/overlay/c10/cuda/impl"
    printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' >"$work/newest/overlay/c10/cuda/impl/cuda_cmake_macros.h"
    python3 - "$build/compile_commands.json" "$sysroot/usr/include" "$newroot/usr/include" "$work/newest/overlay" \
      >"$work/newest/commands.sh" <<'PY'
import json, shlex, sys
db, old, new, overlay = sys.argv[1:5]
for e in json.load(open(db)):
    args = shlex.split(e["command"])
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT"):
            skip = True
            continue
        if a in ("-c", "-MD") or a.endswith("ccache") or a.startswith("-std="):
            continue
        out.append(a.replace(old, new))
    # The commands name 2.6's include folders; from 2.9 on <torch/version.h> also reads
    # <torch/headeronly/version.h> from the sysroot's include root, searched last here so
    # that nothing else in it comes before the compiler's own headers.
    out[1:1] = ["-fsyntax-only", "-std=gnu++20", "-isystem", overlay, "-idirafter", new]
    print("cd %s && %s" % (shlex.quote(e["directory"]), shlex.join(out)))
PY
    if xargs -P "$(nproc)" -d '\n' -n 1 bash -c <"$work/newest/commands.sh" >>"$work/newest.log" 2>&1; then
      log "early warning: the same commands against Debian unstable's libtorch $version headers (C++20): ok ($((SECONDS - t2)) s)"
    else
      log "early warning: the library does not compile against Debian unstable's libtorch $version headers (C++20); not a failure of this stage ($work/newest.log):"
      grep -m5 "error" "$work/newest.log" || true
    fi
  else
    log "early warning: could not download Debian unstable's libtorch-dev ($work/newest.log); skipped"
  fi
fi
log "total $((SECONDS - t0)) s"
