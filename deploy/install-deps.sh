#!/usr/bin/env bash
# Installs every Debian 12 package rkv needs to build, test and benchmark,
# including what the SoftRoCE harness (deploy/softroce/) needs.
# Idempotent: packages already present are not reinstalled, and apt's lists
# are refreshed only when something is missing. Installing prints a progress
# line every 15 s (apt's percentage and the package at hand); apt's own output
# goes to a log under /tmp, shown when it fails.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates python3
  libibverbs-dev librdmacm-dev ibverbs-providers rdma-core
  ibverbs-utils rdmacm-utils perftest
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev openssl
  librocksdb-dev libgflags-dev libgoogle-glog-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  memcached libmemcached-dev libmemcached-tools libhiredis-dev redis-server redis-tools
  # bench/compare's charts (PNG, through gnuplot's pngcairo terminal)
  gnuplot-nox
  qemu-system-x86 busybox-static cpio kmod iproute2
  clang libclang-rt-14-dev
  # etcd (the coordinator's state and leader election): the server and
  # etcdctl for tests and deployments, the .proto files rkv_etcd builds from
  etcd-server etcd-client golang-etcd-server-dev
  # GET /metrics of rkv-server and rkv-coordinator (--metrics_listen): the
  # HTTP library, and promtool, with which the tests check what they answer
  libcpp-httplib-dev prometheus
  # The Python module rkv (python/): pybind11 and Python's headers to build
  # it, pytest for its ctest python_module
  python3-pybind11 python3-dev python3-pytest
  # rkv-gateway's real-client ctests: redis-cli and redis-benchmark
  # (redis-tools, above), Python's redis client, Node.js and npm for the
  # npm clients (deploy/install-node-modules.sh, run below)
  python3-redis nodejs npm
)

# The npm packages of the gateway's ctests, once node and npm are there.
node_modules() { "$(dirname "$0")/install-node-modules.sh"; }

# A package counts as present when it is installed, or provided by one that
# is (NodeSource's nodejs provides npm, and conflicts with Debian's).
provided="$(dpkg-query -W -f='${Status}|${Provides}\n' 2>/dev/null | sed -n 's/^[^|]*ok installed|//p' \
  | tr ',' '\n' | sed 's/^ *//; s/[ (].*//' | sort -u)"
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && continue
  grep -qx -- "$p" <<< "${provided}" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  node_modules
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: ${#missing[@]} of ${#PACKAGES[@]} packages missing: ${missing[*]}"
echo "install-deps: refreshing apt's package lists"
$SUDO apt-get update -qq
total="$(apt-get install -s --no-install-recommends "${missing[@]}" 2>/dev/null | grep -c '^Inst ' || true)"
echo "install-deps: installing ${total} packages with their dependencies (several minutes on a fresh machine)"

# apt's own output goes to a log; its status lines (APT::Status-Fd) give a
# progress line every HEARTBEAT seconds: downloading, then installing, each
# with apt's percentage and the package at hand.
readonly HEARTBEAT=15
log="$(mktemp /tmp/rkv-install-deps.XXXXXX)"
status="${log}.status"
start=$SECONDS
$SUDO bash -c 'exec apt-get install -y -q --no-install-recommends -o APT::Status-Fd=3 "${@:2}" 3>"$1"' \
  _ "${status}" "${missing[@]}" > "${log}" 2>&1 &
apt_pid=$!
last=$SECONDS
while kill -0 "${apt_pid}" 2>/dev/null; do
  sleep 1
  if [ $((SECONDS - last)) -ge "${HEARTBEAT}" ]; then
    last=$SECONDS
    line="$(tail -n 1 "${status}" 2>/dev/null || true)"
    IFS=: read -r kind _ percent what <<< "${line}"
    case "${kind}" in
      dlstatus) what="downloading: ${what}" ;;
      pmstatus) ;;
      *) what="starting"; percent=0 ;;
    esac
    printf 'install-deps: [%3.0f%%] %s (%d s)\n' "${percent:-0}" "${what}" $((SECONDS - start))
  fi
done
rc=0
wait "${apt_pid}" || rc=$?
if [ "${rc}" -ne 0 ]; then
  echo "install-deps: apt-get install FAILED (exit status ${rc}); the last lines of its log ${log}:" >&2
  tail -n 30 "${log}" | sed 's/^/    | /' >&2
  exit "${rc}"
fi
rm -f "${log}" "${status}"
# Debian's postinst starts these services; rkv's scripts start their own
# instances on chosen ports, so the system-wide ones are not needed (and a
# system etcd would hold the ports deploy/cluster.sh start --ha uses).
for svc in memcached redis-server etcd; do
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl stop "$svc" 2>/dev/null || true; fi
done
echo "install-deps: ${total} packages installed in $((SECONDS - start)) s"
node_modules
