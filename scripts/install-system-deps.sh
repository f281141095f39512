#!/usr/bin/env bash
# Installs the Debian packages the test suites and benchmarks need: the real peers (tshark, nfs-ganesha,
# libnfs, rpcbind, haproxy, socat, glusterfs for the delegation-granting ganesha backend), the toolchain
# node-gyp builds the addons with (build-essential: gcc, g++, make; python3 for gyp) and the rdma-core
# headers for the optional native addon. Without the toolchain `npm install` still succeeds, but
# scripts/build-native.mjs records TOOLCHAIN_MISSING and CI fails later, in the native addon's tests.
# Idempotent; needs root (CI runs as root). Fails loudly on any error.
set -euo pipefail

packages=(
  tshark
  nfs-ganesha nfs-ganesha-vfs nfs-ganesha-proxy-v4 rpcbind libnfs-utils nfs-common
  glusterfs-server nfs-ganesha-gluster
  haproxy socat
  build-essential python3
  libibverbs-dev librdmacm-dev ibverbs-providers pkg-config
  valgrind
  shellcheck yamllint
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-system-deps: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-system-deps: missing packages (${missing[*]}) and not root; install them with apt-get" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-system-deps: installing ${missing[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

# The interop harness runs its own glusterd on port 24007 (test/interop/harness/gluster.ts): one that the
# package's service scripts started just now would hold the port, so it is stopped again.
if [[ " ${missing[*]} " == *" glusterfs-server "* ]] && pgrep -x glusterd > /dev/null; then
  echo "install-system-deps: stopping the glusterd the package started (the tests run their own)"
  systemctl stop glusterd 2> /dev/null || pkill -x glusterd || true
fi
