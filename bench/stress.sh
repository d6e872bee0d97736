# bench/stress.sh - sourced by the bench scripts that take --stress_cpus=N:
# `stress-ng --cpu N` as a busy neighbour for the whole run, and the words
# the report uses for it.
#
#   stress_start N LOG  starts stress-ng --cpu N in the background (N > 0)
#                       with its output in LOG; sets stress_pid and
#                       stress_note (empty for N = 0). Returns 1, with the
#                       reason in stress_error, when it did not start.
#   stress_check LOG    appends to stress_note when stress-ng has exited
#                       before the run's end.
#   stress_stop         ends it (SIGTERM) and waits for it; safe to call
#                       when none runs.

stress_pid=""
stress_note=""
stress_error=""

stress_start() {  # N LOG
  local n=$1 log=$2
  ((n > 0)) || return 0
  command -v stress-ng >/dev/null 2>&1 || {
    stress_error="--stress_cpus=$n needs stress-ng, which is not on PATH (Debian: apt-get install stress-ng)"
    return 1
  }
  stress-ng --cpu "$n" --quiet >"$log" 2>&1 &
  stress_pid=$!
  sleep 1
  kill -0 "$stress_pid" 2>/dev/null || {
    stress_error="stress-ng --cpu $n did not start: $(tr '\n' ' ' <"$log")"
    stress_pid=""
    return 1
  }
  stress_note="with \`stress-ng --cpu $n\` ($n CPU-bound workers) running throughout, from before the cluster started to the end of the run"
}

stress_check() {  # LOG
  if [[ -n $stress_pid ]] && ! kill -0 "$stress_pid" 2>/dev/null; then
    stress_note+=" (**stress-ng had exited before the run's end**: $(tr '\n' ' ' <"$1"))"
  fi
}

stress_stop() {
  [[ -n $stress_pid ]] || return 0
  kill -TERM "$stress_pid" 2>/dev/null || true
  wait "$stress_pid" 2>/dev/null || true
  stress_pid=""
}
