#!/usr/bin/env bash
# Installs every Debian 12 package rkv needs to build, test and benchmark,
# including what the SoftRoCE harness (deploy/softroce/) needs.
# Idempotent: packages already present are not reinstalled, and apt's lists
# are refreshed only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates python3
  libibverbs-dev librdmacm-dev ibverbs-providers rdma-core
  ibverbs-utils rdmacm-utils perftest
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libgflags-dev libgoogle-glog-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  memcached libmemcached-dev libhiredis-dev redis-server redis-tools
  qemu-system-x86 busybox-static cpio kmod iproute2
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's postinst starts these services; rkv's scripts start their own
# instances on chosen ports, so the system-wide ones are not needed.
for svc in memcached redis-server; do
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl stop "$svc" 2>/dev/null || true; fi
done
echo "install-deps: done"
