#!/usr/bin/env bash
# Downloads (does not install) the Debian packages whose headers and libraries glint's
# build needs beyond PyTorch, CMake and ninja, into .gpu-deps/ at the repository root, for
# a GPU machine that reaches no package registry: scripts/gpu-check.sh unpacks them there.
# Run it where apt works (a developer's Debian 12 machine).
# libgloo-dev: the c10d Gloo headers include gloo's, which a pip wheel of torch does not ship.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps
exclude=$(git rev-parse --git-path info/exclude)  # kept out of commits, still carried to a device
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu-deps/' "$exclude" 2>/dev/null || echo '/.gpu-deps/' >>"$exclude"
apt-get update -qq
cd .gpu-deps
rm -f ./*.deb
apt-get download -qq nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev \
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  libicu-dev libicu72 libgoogle-perftools-dev libgoogle-perftools4 libtcmalloc-minimal4 \
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libssl3 libbrotli-dev libbrotli1 zlib1g-dev \
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32 \
  pkgconf pkgconf-bin libpkgconf3 libgloo-dev 2>&1 | grep -v "unsandboxed as root" || true
ls -1 "$PWD"
