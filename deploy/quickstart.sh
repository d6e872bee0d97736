#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running rkv server:
# installs what is missing, builds, installs rkv-server, rkv-coordinator,
# kvctl, rkv-gateway, librkv, its headers and its CMake package under a
# prefix ($HOME/.local by default, /usr/local through sudo), starts one
# rkv-server on 127.0.0.1:7700 with its data, token and log under
# .rkv-local/ and an rkv-gateway beside it (Redis clients on 127.0.0.1:6380,
# memcached clients on 127.0.0.1:11212), and shows it serving with a PUT
# and a GET through the installed kvctl and a GET through redis-cli. When
# the prefix's bin/ is not on PATH it prints the one line that puts it
# there.
usage() {
  cat <<'USAGE'
Usage: deploy/quickstart.sh [--prefix DIR]  build, install under DIR (default
                                             $HOME/.local; /usr/local when run
                                             through sudo), start (or restart)
                                             the local server on 127.0.0.1:7700
                                             and rkv-gateway beside it
       deploy/quickstart.sh stop            stop both (SIGTERM: clean shutdown)
       deploy/quickstart.sh --help          this text
Environment: RKV_LISTEN=HOST:PORT (default 127.0.0.1:7700),
             RKV_REDIS_LISTEN=HOST:PORT (default 127.0.0.1:6380),
             RKV_MEMCACHED_LISTEN=HOST:PORT (default 127.0.0.1:11212);
             an empty RKV_REDIS_LISTEN and RKV_MEMCACHED_LISTEN start no
             gateway.
Data, token and logs: .rkv-local/ in the repository root.
USAGE
}
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
state="${root}/.rkv-local"
pidfile="${state}/server.pid"
gateway_pidfile="${state}/gateway.pid"
listen="${RKV_LISTEN:-127.0.0.1:7700}"
redis_listen="${RKV_REDIS_LISTEN-127.0.0.1:6380}"
memcached_listen="${RKV_MEMCACHED_LISTEN-127.0.0.1:11212}"
# Through sudo, $HOME is root's, whose bin/ the user's shell never finds.
if [ -n "${SUDO_USER:-}" ]; then prefix=/usr/local; else prefix="${HOME:?}/.local"; fi
command=start
while [ $# -gt 0 ]; do
  case "$1" in
    stop) command=stop ;;
    -h | --help) usage; exit 0 ;;
    --prefix) [ $# -ge 2 ] || { echo "quickstart: --prefix needs a directory" >&2; exit 2; }; prefix="$2"; shift ;;
    --prefix=*) prefix="${1#--prefix=}" ;;
    *) echo "quickstart: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ -n "${prefix}" ] || { echo "quickstart: --prefix must not be empty" >&2; exit 2; }
case "${prefix}" in /*) ;; *) prefix="${root}/${prefix}" ;; esac

stop_process() {  # PIDFILE NAME
  if [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; then
    kill -TERM "$(cat "$1")"
    for _ in $(seq 1 50); do
      kill -0 "$(cat "$1")" 2>/dev/null || break
      sleep 0.1
    done
    echo "quickstart: $2 stopped"
  fi
  rm -f "$1"
}
stop_server() {
  # The gateway first: it is the server's client.
  stop_process "${gateway_pidfile}" rkv-gateway
  stop_process "${pidfile}" rkv-server
}

if [ "${command}" = stop ]; then
  stop_server
  exit 0
fi

deploy/install-deps.sh
deploy/build.sh release
echo "quickstart: installing rkv under ${prefix}"
if ! cmake --install build/release --prefix "${prefix}" > "${root}/build/release/quickstart-install.log"; then
  cat "${root}/build/release/quickstart-install.log" >&2
  exit 2
fi
bin="${prefix}/bin"

mkdir -p "${state}/data"
if [ ! -s "${state}/token" ]; then
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${state}/token"
  chmod 600 "${state}/token"
fi
stop_server

"${bin}/rkv-server" --listen="${listen}" --data_dir="${state}/data" \
  --token_file="${state}/token" --transport=auto --memory=268435456 \
  > "${state}/server.out" 2> "${state}/server.log" &
echo $! > "${pidfile}"
for _ in $(seq 1 100); do
  grep -q "listening on" "${state}/server.out" 2>/dev/null && break
  if ! kill -0 "$(cat "${pidfile}")" 2>/dev/null; then
    echo "quickstart: rkv-server failed to start; its log:" >&2
    cat "${state}/server.log" >&2
    exit 2
  fi
  sleep 0.1
done
cat "${state}/server.out"

kvctl=("${bin}/kvctl" --server="${listen}" --token_file="${state}/token")
echo "\$ kvctl put greeting 'hello from rkv'"
"${kvctl[@]}" put greeting "hello from rkv"
echo "\$ kvctl get greeting"
"${kvctl[@]}" get greeting
# kvctl ends a value with a newline only on a terminal.
[ -t 1 ] || echo

# rkv-gateway beside the server: Redis and memcached clients, unchanged.
gateway_line=""
if [ -n "${redis_listen}${memcached_listen}" ]; then
  "${bin}/rkv-gateway" --server="${listen}" --token_file="${state}/token" \
    --redis_listen="${redis_listen}" --memcached_listen="${memcached_listen}" \
    > "${state}/gateway.out" 2> "${state}/gateway.log" &
  echo $! > "${gateway_pidfile}"
  want=0
  [ -z "${redis_listen}" ] || want=$((want + 1))
  [ -z "${memcached_listen}" ] || want=$((want + 1))
  for _ in $(seq 1 100); do
    [ "$(grep -c "listening on" "${state}/gateway.out" 2>/dev/null)" -ge "${want}" ] && break
    if ! kill -0 "$(cat "${gateway_pidfile}")" 2>/dev/null; then
      echo "quickstart: rkv-gateway failed to start; its log:" >&2
      cat "${state}/gateway.log" >&2
      stop_server
      exit 2
    fi
    sleep 0.1
  done
  cat "${state}/gateway.out"
  if [ -n "${redis_listen}" ]; then
    redis_port="${redis_listen##*:}"
    gateway_line="redis-cli -p ${redis_port} GET greeting"
    if command -v redis-cli > /dev/null; then
      echo "\$ ${gateway_line}"
      redis-cli -p "${redis_port}" GET greeting
    fi
  fi
fi
token="${state#"${root}/"}/token"
cat <<MSG

rkv-server is running (pid $(cat "${pidfile}"), log ${state}/server.log).
MSG
if [ -f "${gateway_pidfile}" ]; then
  cat <<MSG
rkv-gateway is running beside it (pid $(cat "${gateway_pidfile}"), log ${state}/gateway.log):
Redis clients on ${redis_listen:-(off)}, memcached clients on ${memcached_listen:-(off)}.
MSG
fi
cat <<MSG
Installed under ${prefix}: bin/kvctl, bin/rkv-server, bin/rkv-coordinator,
bin/rkv-gateway, librkv, include/rkv/, lib/cmake/rkv/ (find_package(rkv)).
Try (from ${root}):
       kvctl --server=${listen} --token_file=${token} get greeting
       kvctl --help
MSG
[ -z "${gateway_line}" ] || echo "       ${gateway_line}"
cat <<MSG
Stop:  deploy/quickstart.sh stop
MSG
# One line to paste when the installed kvctl is not what the shell finds.
case ":${PATH}:" in
  *":${bin}:"*) ;;
  *)
    echo
    echo "${bin} is not on your PATH; to use kvctl as above, run:"
    echo "export PATH=\"${bin}:\$PATH\""
    ;;
esac
