#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), then configures and builds glint into
# build/. Safe to re-run: installed packages are skipped, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache pkg-config
          libtorch-dev libgloo-dev libopenblas0-pthread
          nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
          libgoogle-perftools-dev
          libpcre2-dev libicu-dev
          openmpi-bin)
# The reference tests (tests/reference) install npm packages: Node.js and npm, from
# Debian where the machine has none.
command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

jobs=${GLINT_BUILD_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${GLINT_CMAKE_ARGS:-}
cmake --build build -j "$jobs"
