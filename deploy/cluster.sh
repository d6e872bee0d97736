#!/usr/bin/env bash
# A local rkv cluster on 127.0.0.1, with its data, logs, pids and the
# tokens under .rkv-cluster/.
#
# Usage: deploy/cluster.sh start [N]       one rkv-coordinator (its state in
#                                          .rkv-cluster/coordinator/) and N
#                                          rkv-servers (default N=3)
#        deploy/cluster.sh start --ha [N]  a three-member etcd, three
#                                          rkv-coordinators sharing the cluster
#                                          state in it (one leads, two stand
#                                          by) and N rkv-servers (default 3)
#        deploy/cluster.sh start --tls ...  either of the above with TLS on
#                                          the control plane: a CA and
#                                          certificates made with openssl in
#                                          .rkv-cluster/tls/, every process
#                                          started with --tls_cert, --tls_key
#                                          and --tls_ca, kvctl given --tls_ca
#        deploy/cluster.sh stop            SIGTERM every process (servers
#                                          first, so that they leave the
#                                          cluster, then the coordinators,
#                                          then etcd) and wait
#        deploy/cluster.sh status          which processes run, and their
#                                          addresses; with --ha also etcd's
#                                          health and the leading coordinator
#        deploy/cluster.sh --help          this text
#
# start starts only what is not running yet, so it also restarts what died.
# The state dir remembers which kind of cluster it holds: 'start' on an --ha
# one (or 'start --ha' on the other kind) is refused; a --tls one stays
# TLS ('start' restarts it with TLS), and 'start --tls' on a plain one is
# refused.
#
# TLS (docs/design.md §10): .rkv-cluster/tls/ holds ca.crt (the CA every
# process verifies peers with; its key ca.key), and NAME.crt/NAME.key for
# each process (coordinator or coordinator-I, server-I) and for kvctl
# (client), each with the SANs IP:127.0.0.1 and DNS:localhost. To rotate a
# certificate, replace its file (by a rename): the processes re-read their
# files every 5 s. The data plane is not encrypted here; over tcp a server
# takes --data_plane_tls for it (with the same files), and its clients
# --data_plane_tls with the CA (docs/design.md §10).
#
# Ports: coordinator 7600 (with --ha 7600, 7601, 7602), servers 7701..770N,
# etcd members client/peer 2379/2380, 2479/2480, 2579/2580 (override with
# RKV_COORDINATOR_PORT, RKV_SERVER_BASE_PORT and RKV_ETCD_BASE_PORT: member i
# uses BASE + 100 * (i - 1) and the port after it). Every coordinator and
# server serves GET /metrics (--metrics_listen) on its port + 1000:
# coordinator 8600 (8600..8602 with --ha), servers 8701..870N, what
# deploy/prometheus/prometheus.yml scrapes. With --ha the cluster's
# state is under the etcd prefix /rkv/local/. Binaries come from
# build/release (built with deploy/build.sh when missing), or from
# RKV_BUILD_DIR when set; etcd and etcdctl from PATH (Debian's etcd-server
# and etcd-client, 3.4 or later).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
state="${root}/.rkv-cluster"
build="${RKV_BUILD_DIR:-build/release}"
case "${build}" in /*) ;; *) build="${root}/${build}" ;; esac
coordinator_port="${RKV_COORDINATOR_PORT:-7600}"
base_port="${RKV_SERVER_BASE_PORT:-7701}"
etcd_base_port="${RKV_ETCD_BASE_PORT:-2379}"
host=127.0.0.1
coordinator_bin="${build}/coordinator/rkv-coordinator"
server_bin="${build}/server/rkv-server"
kvctl_bin="${build}/client/kvctl"
# With --ha: etcd members and coordinators (an etcd of three survives the
# loss of one member; any number of coordinators may share it).
ha_members=3
etcd_prefix=/rkv/local/
stop_wait_s=20
start_wait_s=30
# GET /metrics of each process: its own port plus this.
metrics_offset=1000
tls_dir="${state}/tls"
# Days a certificate made by --tls is valid.
tls_days=825

die() {
  echo "cluster: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^[^#]/{/^#/!d;s/^# \{0,1\}//;p}' "${root}/deploy/cluster.sh"
}

# pid_of NAME: the pid recorded for NAME when that process still runs and
# is one of this cluster's (a recycled pid is ignored): an rkv binary, or an
# etcd whose --data-dir lies under .rkv-cluster/; nothing otherwise.
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

# cluster_mode: 'ha' or 'single' for the cluster in the state dir (a state
# dir written before --ha existed holds a single one); nothing when none.
cluster_mode() {
  if [ -f "${state}/mode" ]; then
    cat "${state}/mode"
  elif [ -f "${state}/size" ]; then
    echo single
  fi
}

etcd_client_port() { echo $((etcd_base_port + 100 * ($1 - 1))); }
etcd_peer_port() { echo $((etcd_base_port + 100 * ($1 - 1) + 1)); }

etcd_endpoints() {
  local i list=""
  for i in $(seq 1 "${ha_members}"); do list="${list:+${list},}${host}:$(etcd_client_port "${i}")"; done
  echo "${list}"
}

etcdctl_all() {
  ETCDCTL_API=3 etcdctl --endpoints="$(etcd_endpoints)" --dial-timeout=1s --command-timeout=3s "$@"
}

# coordinator_list MODE: the --coordinator value of servers and clients.
coordinator_list() {
  local i list=""
  if [ "$1" = ha ]; then
    for i in $(seq 1 "${ha_members}"); do list="${list:+${list},}${host}:$((coordinator_port + i - 1))"; done
    echo "${list}"
  else
    echo "${host}:${coordinator_port}"
  fi
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

# wait_etcd: waits until every etcd member reports itself healthy (it has
# a leader and commits); on a member's exit or timeout, shows its log and
# fails.
wait_etcd() {
  local deadline=$((SECONDS + start_wait_s)) i pid
  while :; do
    for i in $(seq 1 "${ha_members}"); do
      pid="$(cat "${state}/etcd-${i}.pid")"
      if ! kill -0 "${pid}" 2>/dev/null; then
        echo "cluster: etcd-${i} exited during startup; the end of ${state}/etcd-${i}.log:" >&2
        tail -n 20 "${state}/etcd-${i}.log" >&2 || true
        rm -f "${state}/etcd-${i}.pid"
        exit 1
      fi
    done
    if etcdctl_all endpoint health > /dev/null 2>&1; then
      return 0
    fi
    if [ "${SECONDS}" -ge "${deadline}" ]; then
      etcdctl_all endpoint health >&2 || true
      die "etcd is not healthy ${start_wait_s} s after its start; see ${state}/etcd-*.log"
    fi
    sleep 0.2
  done
}

# leader_address: the address the leading coordinator published in etcd;
# nothing while none leads or etcd does not answer.
leader_address() {
  etcdctl_all get "${etcd_prefix}leader" --print-value-only 2> /dev/null || true
}

# wait_leader: waits until one of the coordinators leads, so that the
# servers join at once.
wait_leader() {
  local deadline=$((SECONDS + start_wait_s))
  until [ -n "$(leader_address)" ]; do
    [ "${SECONDS}" -lt "${deadline}" ] || die "no coordinator leads ${start_wait_s} s after their start; see ${state}/coordinator-*.log"
    sleep 0.2
  done
}

server_names() {
  local n="$1" i
  for i in $(seq 1 "${n}"); do echo "server-${i}"; done
}

# coordinator_names MODE, etcd_names MODE: the processes of each kind.
coordinator_names() {
  local i
  if [ "$1" = ha ]; then
    for i in $(seq 1 "${ha_members}"); do echo "coordinator-${i}"; done
  else
    echo coordinator
  fi
}

etcd_names() {
  local i
  if [ "$1" = ha ]; then
    for i in $(seq 1 "${ha_members}"); do echo "etcd-${i}"; done
  fi
}

do_status() {
  local n mode running=0 total=0 pid addr extra leader="" health etcd_up=0
  n="$(cluster_size)"
  if [ -z "${n}" ]; then
    echo "cluster: not started (no ${state})"
    return 0
  fi
  mode="$(cluster_mode)"
  # etcdctl waits out its timeouts when no member answers.
  for name in $(etcd_names "${mode}"); do
    [ -z "$(pid_of "${name}")" ] || etcd_up=1
  done
  if [ "${etcd_up}" = 1 ]; then
    leader="$(leader_address)"
  fi
  for name in $(etcd_names "${mode}") $(coordinator_names "${mode}") $(server_names "${n}"); do
    total=$((total + 1))
    pid="$(pid_of "${name}")"
    case "${name}" in
      etcd-*) addr="${host}:$(etcd_client_port "${name#etcd-}")" ;;
      *) addr="$(grep -h "listening on" "${state}/${name}.out" 2>/dev/null | tail -n 1 | sed 's/.*listening on \([^ ]*\).*/\1/' || true)" ;;
    esac
    if [ -n "${pid}" ]; then
      running=$((running + 1))
      extra="$(grep -h "^rkv-server id" "${state}/${name}.out" 2>/dev/null | tail -n 1 | sed 's/^rkv-server //' || true)"
      case "${name}" in
        coordinator-*) if [ -n "${leader}" ] && [ "${addr}" = "${leader}" ]; then extra=leader; else extra=standby; fi ;;
      esac
      printf '  %-14s running  pid %-8s %s %s\n' "${name}" "${pid}" "${addr}" "${extra}"
    else
      printf '  %-14s stopped\n' "${name}"
    fi
  done
  if [ "${mode}" = ha ]; then
    echo "etcd ($(etcd_endpoints)):"
    if [ "${etcd_up}" = 1 ]; then
      health="$(etcdctl_all endpoint health 2>&1 || true)"
      echo "${health}" | grep -E "is (un)?healthy" | sort | sed 's/^/  /' || echo "  no answer: ${health}"
    else
      echo "  no member runs"
    fi
    echo "leading coordinator (${etcd_prefix}leader): ${leader:-none}"
  fi
  echo "cluster: ${running} of ${total} processes running (N=${n}$([ "${mode}" = ha ] && echo ", --ha"), state in ${state})"
}

do_stop() {
  local n mode pids=() alive=() pid name names
  n="$(cluster_size)"
  if [ -z "${n}" ]; then
    echo "cluster: not started (no ${state})"
    return 0
  fi
  mode="$(cluster_mode)"
  # Servers first: each leaves the cluster while a coordinator still runs;
  # etcd last, since the coordinators keep their state in it.
  for phase in servers coordinators etcd; do
    pids=()
    alive=()
    case "${phase}" in
      servers) names="$(server_names "${n}")" ;;
      coordinators) names="$(coordinator_names "${mode}")" ;;
      etcd) names="$(etcd_names "${mode}")" ;;
    esac
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

# start_etcd: starts the members of the three-member etcd that are not
# running (adding them to do_start's count, started) and waits until all
# answer. A member whose data dir already holds it ignores the
# --initial-cluster flags and rejoins.
start_etcd() {
  local i initial="" client peer
  if ! command -v etcd > /dev/null || ! command -v etcdctl > /dev/null; then
    die "--ha needs etcd and etcdctl 3.4 or later on PATH (Debian: apt-get install etcd-server etcd-client, as deploy/install-deps.sh does)"
  fi
  for i in $(seq 1 "${ha_members}"); do
    initial="${initial:+${initial},}etcd-${i}=http://${host}:$(etcd_peer_port "${i}")"
  done
  for i in $(seq 1 "${ha_members}"); do
    [ -z "$(pid_of "etcd-${i}")" ] || continue
    client="${host}:$(etcd_client_port "${i}")"
    peer="${host}:$(etcd_peer_port "${i}")"
    # --max-txn-ops and --max-request-bytes: the coordinator commits every
    # server's record of a large cluster in one transaction.
    etcd --name="etcd-${i}" --data-dir="${state}/etcd-${i}" \
      --listen-client-urls="http://${client}" --advertise-client-urls="http://${client}" \
      --listen-peer-urls="http://${peer}" --initial-advertise-peer-urls="http://${peer}" \
      --initial-cluster="${initial}" --initial-cluster-state=new --initial-cluster-token=rkv-local \
      --max-txn-ops=10000 --max-request-bytes=16777216 --logger=zap --log-outputs=stderr \
      >> "${state}/etcd-${i}.log" 2>&1 &
    echo $! > "${state}/etcd-${i}.pid"
    started=$((started + 1))
  done
  wait_etcd
}

# cluster_tls: 'on' when the cluster in the state dir uses TLS.
cluster_tls() {
  if [ -f "${state}/tls-enabled" ]; then echo on; fi
}

# make_tls_ca: the cluster's CA in ${tls_dir} (made once; kept on restarts).
make_tls_ca() {
  command -v openssl > /dev/null || die "--tls needs the openssl command (Debian: apt-get install openssl, as deploy/install-deps.sh does)"
  mkdir -p "${tls_dir}"
  chmod 700 "${tls_dir}"
  [ -s "${tls_dir}/ca.crt" ] && [ -s "${tls_dir}/ca.key" ] && return 0
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "${tls_dir}/ca.key" -out "${tls_dir}/ca.crt" -days "${tls_days}" -subj "/CN=rkv local cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    > "${tls_dir}/openssl.log" 2>&1 || die "openssl could not make the CA; see ${tls_dir}/openssl.log"
}

# make_tls_cert NAME: NAME.key and NAME.crt in ${tls_dir}, signed by the CA,
# for 127.0.0.1 and localhost (made once).
make_tls_cert() {
  local name="$1"
  [ -s "${tls_dir}/${name}.crt" ] && [ -s "${tls_dir}/${name}.key" ] && return 0
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth,clientAuth" \
    > "${tls_dir}/${name}.ext"
  {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "${tls_dir}/${name}.key" &&
      openssl req -new -key "${tls_dir}/${name}.key" -subj "/CN=${name}" -out "${tls_dir}/${name}.csr" &&
      openssl x509 -req -in "${tls_dir}/${name}.csr" -CA "${tls_dir}/ca.crt" -CAkey "${tls_dir}/ca.key" \
        -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" -days "${tls_days}" \
        -extfile "${tls_dir}/${name}.ext" -out "${tls_dir}/${name}.crt"
  } >> "${tls_dir}/openssl.log" 2>&1 || die "openssl could not make the certificate of ${name}; see ${tls_dir}/openssl.log"
  rm -f "${tls_dir}/${name}.csr" "${tls_dir}/${name}.ext"
}

# set_tls_args NAME: tls_args becomes the TLS flags of process NAME (none
# without TLS).
set_tls_args() {
  tls_args=()
  [ "$(cluster_tls)" = on ] || return 0
  tls_args=("--tls_cert=${tls_dir}/$1.crt" "--tls_key=${tls_dir}/$1.key" "--tls_ca=${tls_dir}/ca.crt")
}

do_start() {
  local n="$1" mode="$2" tls="$3" old old_mode coordinators i name started=0 kvctl_tls="" tls_args=()
  case "${n}" in '' | *[!0-9]* | 0) die "N must be a positive number of servers, not '${n}'" ;; esac
  [ "${n}" -le 99 ] || die "N=${n} is too many for one machine (at most 99)"
  old_mode="$(cluster_mode)"
  if [ "${old_mode}" = ha ] && [ "${mode}" != ha ]; then
    die "${state} holds an --ha cluster (etcd and three coordinators); run 'deploy/cluster.sh start --ha' to start it again, or 'deploy/cluster.sh stop' and remove ${state} to start one with a single coordinator"
  fi
  if [ "${old_mode}" = single ] && [ "${mode}" = ha ]; then
    die "${state} holds a cluster with a single coordinator; run 'deploy/cluster.sh start' to start it again, or 'deploy/cluster.sh stop' and remove ${state} to start an --ha one"
  fi
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

  if [ "${tls}" = on ] && [ -n "${old}" ] && [ "$(cluster_tls)" != on ]; then
    die "${state} holds a cluster without TLS; run 'deploy/cluster.sh start' to start it again, or 'deploy/cluster.sh stop' and remove ${state} to start one with --tls"
  fi

  mkdir -p "${state}"
  echo "${n}" > "${state}/size"
  echo "${mode}" > "${state}/mode"
  if [ "${tls}" = on ]; then touch "${state}/tls-enabled"; fi
  if [ "$(cluster_tls)" = on ]; then
    make_tls_ca
    for name in $(coordinator_names "${mode}") $(server_names "${n}") client; do make_tls_cert "${name}"; done
    kvctl_tls=" --tls_ca=.rkv-cluster/tls/ca.crt"
  fi
  if [ ! -s "${state}/token" ]; then
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${state}/token")
  fi
  # The servers' own credential for replication, catch-up and their calls
  # to the coordinators (Join, Heartbeat, the reports): no client holds it,
  # so no client can forge a primary's writes or act as a server.
  if [ ! -s "${state}/cluster_token" ]; then
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${state}/cluster_token")
  fi
  coordinators="$(coordinator_list "${mode}")"

  if [ "${mode}" = ha ]; then
    start_etcd
    for i in $(seq 1 "${ha_members}"); do
      name="coordinator-${i}"
      [ -z "$(pid_of "${name}")" ] || continue
      set_tls_args "${name}"
      "${coordinator_bin}" --listen="${host}:$((coordinator_port + i - 1))" \
        --metrics_listen="${host}:$((coordinator_port + i - 1 + metrics_offset))" \
        --etcd="$(etcd_endpoints)" --etcd_prefix="${etcd_prefix}" \
        --token_file="${state}/token" --cluster_token_file="${state}/cluster_token" \
        --servers="${n}" --shards=1024 "${tls_args[@]+"${tls_args[@]}"}" \
        > "${state}/${name}.out" 2>> "${state}/${name}.log" &
      echo $! > "${state}/${name}.pid"
      started=$((started + 1))
    done
    for i in $(seq 1 "${ha_members}"); do
      wait_listening "coordinator-${i}" rkv-coordinator
    done
    wait_leader
  elif [ -z "$(pid_of coordinator)" ]; then
    mkdir -p "${state}/coordinator"
    set_tls_args coordinator
    "${coordinator_bin}" --listen="${host}:${coordinator_port}" --data_dir="${state}/coordinator" \
      --metrics_listen="${host}:$((coordinator_port + metrics_offset))" \
      --token_file="${state}/token" --cluster_token_file="${state}/cluster_token" \
      --servers="${n}" --shards=1024 "${tls_args[@]+"${tls_args[@]}"}" \
      > "${state}/coordinator.out" 2>> "${state}/coordinator.log" &
    echo $! > "${state}/coordinator.pid"
    wait_listening coordinator rkv-coordinator
    started=$((started + 1))
  fi
  for i in $(seq 1 "${n}"); do
    name="server-${i}"
    [ -z "$(pid_of "${name}")" ] || continue
    mkdir -p "${state}/${name}"
    set_tls_args "${name}"
    "${server_bin}" --listen="${host}:$((base_port + i - 1))" --data_dir="${state}/${name}" \
      --metrics_listen="${host}:$((base_port + i - 1 + metrics_offset))" \
      --token_file="${state}/token" --cluster_token_file="${state}/cluster_token" \
      --coordinator="${coordinators}" --transport=auto --memory=256M "${tls_args[@]+"${tls_args[@]}"}" \
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
  echo
  if [ "${mode}" = ha ]; then
    cat <<MSG
The coordinators keep the cluster's state in etcd under ${etcd_prefix}; one
leads, the others stand by and one of them takes over 2 to 3 s after the
leader's death. The servers join the leader; shards are assigned once all ${n}
have joined (see ${state}/coordinator-*.log).
MSG
  else
    cat <<MSG
The servers join the coordinator at ${coordinators}; shards are
assigned once all ${n} have joined (see ${state}/coordinator.log).
MSG
  fi
  cat <<MSG
Use it:  ${kvctl_bin#"${root}/"} --coordinator=${coordinators} --token_file=.rkv-cluster/token${kvctl_tls} put KEY VALUE
         ${kvctl_bin#"${root}/"} --coordinator=${coordinators} --token_file=.rkv-cluster/token${kvctl_tls} get KEY
Status:  deploy/cluster.sh status
Stop:    deploy/cluster.sh stop
MSG
}

case "${1:-}" in
  start)
    shift
    start_mode=single
    start_tls=off
    start_n=""
    for arg in "$@"; do
      case "${arg}" in
        --ha) start_mode=ha ;;
        --tls) start_tls=on ;;
        -*) die "unknown option '${arg}' of start (deploy/cluster.sh --help)" ;;
        *)
          [ -z "${start_n}" ] || die "start takes one N, not '${start_n}' and '${arg}'"
          start_n="${arg}"
          ;;
      esac
    done
    do_start "${start_n:-3}" "${start_mode}" "${start_tls}"
    ;;
  stop) do_stop ;;
  status) do_status ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
