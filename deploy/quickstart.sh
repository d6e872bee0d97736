#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running rkv server:
# installs what is missing, builds, starts one rkv-server on 127.0.0.1:7700
# with its data, token and log under .rkv-local/, and shows it serving with
# a PUT and a GET through kvctl.
#
# Usage: deploy/quickstart.sh        start (or restart) the local server
#        deploy/quickstart.sh stop   stop it (SIGTERM: clean shutdown)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
state="${root}/.rkv-local"
pidfile="${state}/server.pid"
listen="${RKV_LISTEN:-127.0.0.1:7700}"

stop_server() {
  if [ -f "${pidfile}" ] && kill -0 "$(cat "${pidfile}")" 2>/dev/null; then
    kill -TERM "$(cat "${pidfile}")"
    for _ in $(seq 1 50); do
      kill -0 "$(cat "${pidfile}")" 2>/dev/null || break
      sleep 0.1
    done
    echo "quickstart: rkv-server stopped"
  fi
  rm -f "${pidfile}"
}

if [ "${1:-}" = "stop" ]; then
  stop_server
  exit 0
fi

deploy/install-deps.sh
deploy/build.sh release
bin="${root}/build/release"

mkdir -p "${state}/data"
if [ ! -s "${state}/token" ]; then
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${state}/token"
  chmod 600 "${state}/token"
fi
stop_server

"${bin}/server/rkv-server" --listen="${listen}" --data_dir="${state}/data" \
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

kvctl=("${bin}/client/kvctl" --server="${listen}" --token_file="${state}/token")
echo "\$ kvctl put greeting 'hello from rkv'"
"${kvctl[@]}" put greeting "hello from rkv"
echo "\$ kvctl get greeting"
"${kvctl[@]}" get greeting
echo
cat <<MSG

rkv-server is running (pid $(cat "${pidfile}"), log ${state}/server.log).
Try:   ${bin}/client/kvctl --server=${listen} --token_file=${state}/token --help
Stop:  deploy/quickstart.sh stop
MSG
