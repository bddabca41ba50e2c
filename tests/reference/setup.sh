#!/usr/bin/env bash
# Installs the npm reference packages (tests/reference/package.json) into DIR.
# Usage: tests/reference/setup.sh DIR
set -euo pipefail
dir=${1:?usage: setup.sh DIR}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
if ! command -v npm >/dev/null; then
  echo "setup.sh: npm is not installed (scripts/build.sh installs it)" >&2
  exit 1
fi
# Reinstall only when package.json changed.
if [ -f "$dir/package.json" ] && cmp -s "$src/package.json" "$dir/package.json" && [ -d "$dir/node_modules" ]; then
  exit 0
fi
cp "$src/package.json" "$dir/package.json"
(cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
