#!/usr/bin/env bash
# Builds glint against a libtorch 2.x on CPU and runs the test suite with it: Debian 13's
# libtorch-dev (2.6) inside a Debian 13 chroot. CI runs this after the README's test
# command, so every change builds and passes against both 1.13 and 2.x.
#
# The chroot is made once with debootstrap (about 2.5 minutes and 1.3 GB) and reused while
# it exists; its ccache lives inside it, so a rebuild compiles only what changed. The
# tokenizer and template reference tests do not depend on libtorch and run only in the
# main build; so does the report page's browser check (no Chromium in the chroot: it
# reports itself skipped here).
#
#   scripts/torch2-check.sh                 make or reuse the chroot, build, run ctest
#   scripts/torch2-check.sh -L unit         extra arguments go to ctest
#   scripts/torch2-check.sh --prepare       make the chroot and install its packages only
#                                           (CI starts this early, beside the first stage)
#   scripts/torch2-check.sh --run 'CMD'     build, then run CMD in /src inside the chroot
#                                           (benchmarks: build-torch2/glint ...)
#   GLINT_CHROOT=/path                      where the chroot lives (default below)
#   GLINT_TORCH2_BUILD_ONLY=1               build, run no test
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${GLINT_CHROOT:-/var/cache/glint/debian13}
suite=trixie

if [ "$(id -u)" -ne 0 ]; then
  echo "torch2-check: needs root (debootstrap, chroot and bind mounts); run it with sudo" >&2
  exit 2
fi

if [ ! -e "$root/.glint-ready" ]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  }
  # The host's own Debian mirror (it may be a local proxy); debootstrap's default otherwise.
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  partial="$root.partial"
  rm -rf "$partial"
  mkdir -p "$(dirname "$root")"
  echo "torch2-check: making a Debian 13 chroot in $root"
  start=$(date +%s)
  debootstrap --variant=minbase "$suite" "$partial" $mirror >"$(dirname "$root")/debootstrap.log" 2>&1 || {
    echo "torch2-check: debootstrap failed; the end of its log:" >&2
    tail -20 "$(dirname "$root")/debootstrap.log" >&2
    exit 1
  }
  # apt inside the chroot must trust what the host trusts (a proxy's certificate too).
  mkdir -p "$partial/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$partial/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$root"
  mv "$partial" "$root"
  touch "$root/.glint-ready"
  echo "torch2-check: chroot made in $(( $(date +%s) - start )) s"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
if [ "${1:-}" = --prepare ] && [ -e "$root/.glint-packages" ]; then exit 0; fi

mounted=()
cleanup() {
  local i
  for (( i=${#mounted[@]}-1; i>=0; i-- )); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind SOURCE TARGET-INSIDE-ROOT
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mounted+=("$root$2")
}
bind /proc /proc
bind /dev /dev
bind /dev/pts /dev/pts
mkdir -p "$root/dev/shm"
mount -t tmpfs -o size=8g tmpfs "$root/dev/shm" && mounted+=("$root/dev/shm")
bind "$repo" /src

# The same build script as the README's, inside the chroot: Debian 13's packages under
# the same names, its own build tree, no npm reference tests.
in_chroot_build() {
  # A run stopped while apt installed leaves dpkg half done; finish it first.
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg --configure -a
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    CCACHE_DIR=/var/cache/ccache LANG=C.UTF-8 \
    GLINT_BUILD_DIR=build-torch2 GLINT_REFERENCE_TESTS=OFF \
    GLINT_BUILD_JOBS="${GLINT_BUILD_JOBS:-$(nproc)}" \
    bash /src/scripts/build.sh --tests "$@"
}
if [ "${1:-}" = --prepare ]; then
  in_chroot_build --install-only
  touch "$root/.glint-packages"
  exit 0
fi
in_chroot_build

if [ "${GLINT_TORCH2_BUILD_ONLY:-0}" = 1 ]; then exit 0; fi
if [ "${1:-}" = --run ]; then
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    bash -c 'cd /src && eval "$1"' run "${2:?--run needs a command}"
  exit
fi
# The simulated-node tests (MultiNode.*: network namespaces, which need the host's /sys
# and /run/netns) run in the main build only; the same Gloo code runs here in every
# single-machine multi-rank test.
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  bash -c 'cd /src/build-torch2 && exec ctest -j2 --output-on-failure -E "^MultiNode\." "$@"' ctest "$@"
