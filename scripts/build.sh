#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds glint into
# build/. Safe to re-run: installed packages are skipped, the build is incremental.
#
# Builds the `glint` binary alone (what `./build/glint train` needs); --tests builds every
# target, the test programs included (what ctest needs).
#
# libtorch, the first that exists of: GLINT_TORCH_DIR (a libtorch folder, or its
# share/cmake); the libtorch inside a python3 that imports torch (a pip-installed PyTorch,
# with its CUDA when it has one); Debian's libtorch-dev (1.13 on Debian 12, 2.6 on 13).
# GLINT_BUILD_DIR names another build tree; GLINT_REFERENCE_TESTS=OFF leaves out the npm
# reference tests (scripts/torch2-check.sh builds that way); GLINT_NO_INSTALL=1 installs
# nothing.
#
# --sanitize: a second tree, build-asan/, built with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer (-O1), holding the unit tests and the libFuzzer targets
# (tests/fuzz/, run by scripts/fuzz.sh); every target; no npm reference tests.
# --install-only: install what the other options would need, build nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
install_only=0
tests=0  # every target, the tests included
targets=(--target glint)
for arg in "$@"; do
  case $arg in
    --sanitize) sanitize=1; tests=1; targets=() ;;
    --tests) tests=1; targets=() ;;
    --install-only) install_only=1 ;;
    *) echo "build.sh: unknown argument $arg (known: --tests, --sanitize, --install-only)" >&2; exit 2 ;;
  esac
done

build_dir=${GLINT_BUILD_DIR:-build}
reference=${GLINT_REFERENCE_TESTS:-ON}
sanitize_args=()
if [ $sanitize = 1 ]; then
  build_dir=${GLINT_BUILD_DIR:-build-asan}
  reference=OFF
  sanitize_args=(-DGLINT_SANITIZE=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_RELEASE=-O1)
fi

torch_prefix=""
if [ -n "${GLINT_TORCH_DIR:-}" ]; then
  torch_prefix=$GLINT_TORCH_DIR
  [ -d "$torch_prefix" ] || { echo "GLINT_TORCH_DIR=$torch_prefix is not a directory" >&2; exit 2; }
elif command -v python3 >/dev/null &&
     torch_prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null) &&
     [ -f "$torch_prefix/Torch/TorchConfig.cmake" ]; then
  echo "libtorch: the one inside python3's torch ($torch_prefix)"
else
  torch_prefix=""
fi

packages=(build-essential cmake ninja-build ccache pkg-config
          libgloo-dev libopenblas0-pthread
          nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
          libgoogle-perftools-dev
          libpcre2-dev libicu-dev libcpp-httplib-dev libprotobuf-dev protobuf-compiler)
[ -n "$torch_prefix" ] || packages+=(libtorch-dev)
# What only the tests use: OpenMPI's mpirun (a launcher test), iproute2 (the simulated-node
# tests), and Node.js and npm where the machine has none (the reference tests,
# tests/reference, install npm packages).
[ $tests = 0 ] || packages+=(openmpi-bin iproute2)
# clang with its sanitizer and libFuzzer runtimes; llvm-symbolizer for readable reports.
[ $sanitize = 0 ] || packages+=(clang libclang-rt-dev llvm)
[ $tests = 0 ] || [ "$reference" = OFF ] || command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] && [ "${GLINT_NO_INSTALL:-0}" = 1 ]; then
  # A machine without a package registry (scripts/gpu-check.sh brings its own headers).
  echo "not installing (GLINT_NO_INSTALL=1): ${missing[*]}"
elif [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ $install_only = 0 ] || exit 0

# Paths relative to the checkout in ccache's keys: another clone of the repository (CI's
# clean clone) reuses what this one compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}

jobs=${GLINT_BUILD_JOBS:-$(nproc)}
torch_args=()
[ -z "$torch_prefix" ] || torch_args=(-DCMAKE_PREFIX_PATH="$torch_prefix")
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGLINT_REFERENCE_TESTS="$reference" "${torch_args[@]}" "${sanitize_args[@]}" ${GLINT_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
