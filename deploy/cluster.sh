#!/usr/bin/env bash
# A local rkv cluster on 127.0.0.1: one rkv-coordinator and N rkv-servers,
# with their data, logs, pids and a shared token under .rkv-cluster/.
#
# Usage: deploy/cluster.sh start [N]   start the cluster (default N=3); starts
#                                      only what is not running yet
#        deploy/cluster.sh stop        SIGTERM every process (servers first,
#                                      so that they leave the cluster) and wait
#        deploy/cluster.sh status      which processes run, and their addresses
#
# Ports: coordinator 7600, servers 7701..770N (override with
# RKV_COORDINATOR_PORT and RKV_SERVER_BASE_PORT). Binaries come from
# build/release (built with deploy/build.sh when missing), or from
# RKV_BUILD_DIR when set.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
state="${root}/.rkv-cluster"
build="${RKV_BUILD_DIR:-build/release}"
case "${build}" in /*) ;; *) build="${root}/${build}" ;; esac
coordinator_port="${RKV_COORDINATOR_PORT:-7600}"
base_port="${RKV_SERVER_BASE_PORT:-7701}"
host=127.0.0.1
coordinator_bin="${build}/coordinator/rkv-coordinator"
server_bin="${build}/server/rkv-server"
stop_wait_s=20
start_wait_s=30

die() {
  echo "cluster: $*" >&2
  exit 1
}

# pid_of NAME: the pid recorded for NAME when that process still runs and
# is an rkv process (a recycled pid is ignored); nothing otherwise.
pid_of() {
  local file="${state}/$1.pid" pid
  [ -f "${file}" ] || return 0
  pid="$(cat "${file}" 2>/dev/null || true)"
  case "${pid}" in '' | *[!0-9]*) return 0 ;; esac
  if kill -0 "${pid}" 2>/dev/null && tr '\0' ' ' < "/proc/${pid}/cmdline" 2>/dev/null | grep -q "rkv-"; then
    echo "${pid}"
  fi
}

cluster_size() {
  [ -f "${state}/size" ] && cat "${state}/size" || true
}

# wait_listening NAME WHAT: waits until NAME.out shows WHAT's listening line;
# on exit or timeout, shows the log and fails.
wait_listening() {
  local name="$1" what="$2" pid
  pid="$(cat "${state}/${name}.pid")"
  for _ in $(seq 1 $((start_wait_s * 10))); do
    if grep -q "^${what} listening on" "${state}/${name}.out" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "${pid}" 2>/dev/null; then
      echo "cluster: ${name} (${what}) exited during startup; the end of ${state}/${name}.log:" >&2
      tail -n 20 "${state}/${name}.log" >&2 || true
      rm -f "${state}/${name}.pid"
      exit 1
    fi
    sleep 0.1
  done
  die "${name} (${what}, pid ${pid}) printed no listening line within ${start_wait_s} s; see ${state}/${name}.log"
}

server_names() {
  local n="$1" i
  for i in $(seq 1 "${n}"); do echo "server-${i}"; done
}

do_status() {
  local n running=0 total=0 pid addr
  n="$(cluster_size)"
  if [ -z "${n}" ]; then
    echo "cluster: not started (no ${state})"
    return 0
  fi
  for name in coordinator $(server_names "${n}"); do
    total=$((total + 1))
    pid="$(pid_of "${name}")"
    addr="$(grep -h "listening on" "${state}/${name}.out" 2>/dev/null | tail -n 1 | sed 's/.*listening on \([^ ]*\).*/\1/' || true)"
    if [ -n "${pid}" ]; then
      running=$((running + 1))
      extra="$(grep -h "^rkv-server id" "${state}/${name}.out" 2>/dev/null | tail -n 1 | sed 's/^rkv-server //' || true)"
      printf '  %-12s running  pid %-8s %s %s\n' "${name}" "${pid}" "${addr}" "${extra}"
    else
      printf '  %-12s stopped\n' "${name}"
    fi
  done
  echo "cluster: ${running} of ${total} processes running (N=${n}, state in ${state})"
}

do_stop() {
  local n pids=() pid name
  n="$(cluster_size)"
  if [ -z "${n}" ]; then
    echo "cluster: not started (no ${state})"
    return 0
  fi
  # Servers first: each leaves the cluster while the coordinator still runs.
  for phase in servers coordinator; do
    pids=()
    if [ "${phase}" = servers ]; then names="$(server_names "${n}")"; else names=coordinator; fi
    for name in ${names}; do
      pid="$(pid_of "${name}")"
      if [ -n "${pid}" ]; then
        kill -TERM "${pid}" 2>/dev/null || true
        pids+=("${pid}")
      fi
      rm -f "${state}/${name}.pid"
    done
    for _ in $(seq 1 $((stop_wait_s * 10))); do
      alive=()
      for pid in "${pids[@]+"${pids[@]}"}"; do
        if kill -0 "${pid}" 2>/dev/null; then alive+=("${pid}"); fi
      done
      [ "${#alive[@]}" -eq 0 ] && break
      sleep 0.1
    done
    if [ "${#alive[@]}" -ne 0 ]; then
      die "still running ${stop_wait_s} s after SIGTERM: pid ${alive[*]} (kill -KILL them if they hang)"
    fi
  done
  echo "cluster: stopped"
}

do_start() {
  local n="${1:-3}" old started=0 pid
  case "${n}" in '' | *[!0-9]* | 0) die "N must be a positive number of servers, not '${n}'" ;; esac
  [ "${n}" -le 99 ] || die "N=${n} is too many for one machine (at most 99)"
  old="$(cluster_size)"
  if [ -n "${old}" ] && [ "${old}" != "${n}" ]; then
    die "${state} holds a cluster of ${old} servers; run 'deploy/cluster.sh stop' and remove ${state} to start one of ${n}"
  fi

  if [ ! -x "${coordinator_bin}" ] || [ ! -x "${server_bin}" ]; then
    if [ -n "${RKV_BUILD_DIR:-}" ]; then
      die "no rkv-coordinator/rkv-server in ${build} (RKV_BUILD_DIR); build them first"
    fi
    echo "cluster: building rkv (build/release is missing the binaries)"
    deploy/build.sh release
    [ -x "${coordinator_bin}" ] && [ -x "${server_bin}" ] || die "the build did not produce ${coordinator_bin} and ${server_bin}"
  fi

  mkdir -p "${state}"
  echo "${n}" > "${state}/size"
  if [ ! -s "${state}/token" ]; then
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${state}/token")
  fi
  # The servers' own credential for replication and catch-up: no client
  # holds it, so no client can forge a primary's writes.
  if [ ! -s "${state}/cluster_token" ]; then
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${state}/cluster_token")
  fi

  if [ -z "$(pid_of coordinator)" ]; then
    mkdir -p "${state}/coordinator"
    "${coordinator_bin}" --listen="${host}:${coordinator_port}" --data_dir="${state}/coordinator" \
      --token_file="${state}/token" --servers="${n}" --shards=1024 \
      > "${state}/coordinator.out" 2>> "${state}/coordinator.log" &
    echo $! > "${state}/coordinator.pid"
    wait_listening coordinator rkv-coordinator
    started=$((started + 1))
  fi
  for i in $(seq 1 "${n}"); do
    name="server-${i}"
    [ -z "$(pid_of "${name}")" ] || continue
    mkdir -p "${state}/${name}"
    "${server_bin}" --listen="${host}:$((base_port + i - 1))" --data_dir="${state}/${name}" \
      --token_file="${state}/token" --cluster_token_file="${state}/cluster_token" \
      --coordinator="${host}:${coordinator_port}" --transport=auto --memory=256M \
      > "${state}/${name}.out" 2>> "${state}/${name}.log" &
    echo $! > "${state}/${name}.pid"
    started=$((started + 1))
  done
  for i in $(seq 1 "${n}"); do
    wait_listening "server-${i}" rkv-server
  done

  if [ "${started}" -eq 0 ]; then
    echo "cluster: already running"
    do_status
    return 0
  fi
  do_status
  cat <<MSG

The servers join the coordinator at ${host}:${coordinator_port}; shards are
assigned once all ${n} have joined (see ${state}/coordinator.log).
Use it:  ${build#"${root}/"}/client/kvctl --coordinator=${host}:${coordinator_port} --token_file=.rkv-cluster/token put KEY VALUE
         ${build#"${root}/"}/client/kvctl --coordinator=${host}:${coordinator_port} --token_file=.rkv-cluster/token get KEY
Status:  deploy/cluster.sh status
Stop:    deploy/cluster.sh stop
MSG
}

case "${1:-}" in
  start) do_start "${2:-3}" ;;
  stop) do_stop ;;
  status) do_status ;;
  *)
    echo "usage: deploy/cluster.sh start [N] | stop | status" >&2
    exit 2
    ;;
esac
