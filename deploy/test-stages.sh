# shellcheck shell=bash
# Stages of a test run and the one summary at its end, for deploy/test.sh and
# deploy/test-presets.sh (sourced, not run).
#
# A stage is one step with a time and a result:
#   stage_step NAME CMD...           a command (installing, building): ok or
#                                    failed by its exit status
#   stage_ctest NAME LOG_DIR ARGS... ctest ARGS, one line per test as it ends;
#                                    its tests counted passed/failed/skipped,
#                                    each one's whole output in
#                                    LOG_DIR/tests/NAME.log
#   stage_counts NAME SECS FILE RC   a suite that wrote its own counts to
#                                    FILE (tests/verbs_suite.sh's summary)
#   stage_not_run NAME WHY           a stage that did not run: "skipped" when
#                                    left out on purpose (a skip), "not run"
#                                    when an earlier stage failed
# stage_summary TITLE [LOGS] prints every stage's time and counts, the failures' names and
# the skips' reasons, and returns 1 when a stage failed or, with
# RKV_NO_SKIP=1 (CI: every test must run there), when anything was skipped.
#
# A test whose machine cannot give it what it needs (root, a mount namespace,
# an RDMA device) reports a gtest skip with the reason; ctest counts it as
# skipped (gtest_discover_tests' SKIP_REGULAR_EXPRESSION), never as passed.

# Lines of a failed test's output printed on the console, and for how many
# failures of a stage (the rest are named, with their log files).
readonly STAGE_FAILURE_TAIL=40
readonly STAGE_FAILURES_SHOWN=10

stage_name=()
stage_secs=()
stage_result=()  # ok | failed | skipped | not run
stage_passed=()
stage_failed=()
stage_skipped=()
stage_note=()
stage_failures=()  # "STAGE: test"
stage_skips=()     # "STAGE: test: reason"

stage_record() {  # NAME SECS RESULT PASSED FAILED SKIPPED NOTE
  stage_name+=("$1")
  stage_secs+=("$2")
  stage_result+=("$3")
  stage_passed+=("$4")
  stage_failed+=("$5")
  stage_skipped+=("$6")
  stage_note+=("$7")
}

stage_clock() {  # SECONDS -> "1 h 02 min 05 s" / "12 min 05 s" / "7 s"
  local s="$1"
  if [ "${s}" -ge 3600 ]; then
    printf '%d h %02d min %02d s' $((s / 3600)) $((s % 3600 / 60)) $((s % 60))
  elif [ "${s}" -ge 60 ]; then
    printf '%d min %02d s' $((s / 60)) $((s % 60))
  else
    printf '%d s' "${s}"
  fi
}

stage_banner() {  # NAME
  echo
  echo "== $1"
}

stage_step() {  # NAME CMD...
  local name="$1" start=$SECONDS rc=0
  shift
  stage_banner "${name}"
  "$@" || rc=$?
  local secs=$((SECONDS - start))
  if [ "${rc}" -eq 0 ]; then
    stage_record "${name}" "${secs}" ok - - - ""
  else
    stage_record "${name}" "${secs}" failed - - - "exit status ${rc}"
  fi
  echo "== ${name}: $([ "${rc}" -eq 0 ] && echo ok || echo "FAILED (exit status ${rc})") after $(stage_clock "${secs}")"
  return "${rc}"
}

stage_not_run() {  # NAME WHY
  local result="not run"
  case "$2" in skipped*) result=skipped ;; esac
  stage_record "$1" 0 "${result}" - - - "$2"
  stage_banner "$1: $2"
}

# gtest's reason for a skip, from a test's output: the lines between
# "...: Skipped" and "[  SKIPPED ]", on one line.
stage_skip_reason() {  # LOG
  awk '/: Skipped$/ { on = 1; next } /^\[  SKIPPED \]/ { on = 0 } on' "$1" | tr '\n' ' ' | sed 's/ *$//'
}

# Splits ctest's JUnit file into LOG_DIR/tests/NAME.log, one per test, and
# prints "STATUS NAME" for each: pass, fail or skip ("notrun" with a skip
# message is a skip; ctest's other "notrun", a missing executable, fails).
stage_split_junit() {  # JUNIT LOG_DIR
  awk -v dir="$2/tests" '
    function unescape(s) {
      gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s)
      gsub(/&apos;/, "\047", s); gsub(/&amp;/, "\\&", s)
      return s
    }
    /<testcase / {
      name = $0; sub(/.*<testcase name="/, "", name); sub(/".*/, "", name); name = unescape(name)
      status = $0; sub(/.* status="/, "", status); sub(/".*/, "", status)
      file = name; gsub(/[^A-Za-z0-9._-]/, "_", file); file = dir "/" file ".log"
      printf "" > file
      skip = 0
    }
    /<skipped message="SKIP_/ { skip = 1 }
    /<system-out>/ { out = 1; sub(/.*<system-out>/, "") }
    out {
      line = $0
      done = sub(/<\/system-out>.*/, "", line)
      if (!done || line != "") print unescape(line) > file
      if (done) {
        out = 0
        close(file)
        verdict = status == "run" ? "pass" : (status == "notrun" && skip ? "skip" : "fail")
        print verdict, name
      }
    }
  ' "$1"
}

stage_ctest() {  # NAME LOG_DIR CTEST_ARGS...
  local name="$1" log_dir="$2" start=$SECONDS rc=0
  shift 2
  stage_banner "${name}: ctest, one line per test; each one's output in ${log_dir}/tests/"
  rm -rf "${log_dir}"
  mkdir -p "${log_dir}/tests"
  local junit
  junit="$(cd "${log_dir}" && pwd)/junit.xml"
  ctest --output-junit "${junit}" "$@" 2>&1 | tee "${log_dir}/ctest.log" | grep --line-buffered -v -E '^ +Start +[0-9]+: |^$'
  rc=${PIPESTATUS[0]}
  local secs=$((SECONDS - start)) passed=0 failed=0 skipped=0 verdict test shown=0
  if [ -s "${junit}" ]; then
    while read -r verdict test; do
      local log
      log="${log_dir}/tests/$(printf '%s' "${test}" | tr -c 'A-Za-z0-9._-' '_').log"
      case "${verdict}" in
        pass) passed=$((passed + 1)) ;;
        skip)
          skipped=$((skipped + 1))
          stage_skips+=("${name}: ${test}: $(stage_skip_reason "${log}")")
          ;;
        *)
          failed=$((failed + 1))
          stage_failures+=("${name}: ${test} (${log})")
          if [ "${shown}" -lt "${STAGE_FAILURES_SHOWN}" ]; then
            shown=$((shown + 1))
            if [ -s "${log}" ]; then
              echo "-- ${test} failed; the last ${STAGE_FAILURE_TAIL} lines of ${log}:"
              tail -n "${STAGE_FAILURE_TAIL}" "${log}" | sed 's/^/    | /'
            else
              echo "-- ${test} failed, with no output"
            fi
          fi
          ;;
      esac
    done < <(stage_split_junit "${junit}" "${log_dir}")
  fi
  local result=ok note=""
  if [ "${failed}" -gt 0 ]; then
    result=failed
  elif [ "${rc}" -ne 0 ] || [ ! -s "${junit}" ]; then
    result=failed
    note="ctest exited ${rc} (see ${log_dir}/ctest.log)"
  elif [ "$((passed + skipped))" -eq 0 ]; then
    result=failed
    note="no tests ran"
  fi
  stage_record "${name}" "${secs}" "${result}" "${passed}" "${failed}" "${skipped}" "${note}"
  echo "== ${name}: ${passed} passed, ${failed} failed, ${skipped} skipped after $(stage_clock "${secs}")${note:+; ${note}}"
  [ "${result}" = ok ]
}

stage_counts() {  # NAME SECS FILE RC
  local name="$1" secs="$2" file="$3" rc="$4"
  if [ ! -s "${file}" ]; then
    stage_record "${name}" "${secs}" failed - - - "no results (exit status ${rc}; no ${file})"
    return 1
  fi
  local key value passed=0 failed=0 skipped=0
  while read -r key value; do
    case "${key}" in
      passed) passed="${value}" ;;
      failed) failed="${value}" ;;
      skipped) skipped="${value}" ;;
      failure) stage_failures+=("${name}: ${value}") ;;
      skip) stage_skips+=("${name}: ${value}") ;;
    esac
  done < "${file}"
  local result=ok note=""
  if [ "${failed}" -gt 0 ]; then
    result=failed
  elif [ "$((passed + skipped))" -eq 0 ]; then
    result=failed
    note="no tests ran"
  elif [ "${rc}" -ne 0 ] && ! { [ "${skipped}" -gt 0 ] && [ "${RKV_NO_SKIP:-0}" = "1" ]; }; then
    result=failed
    note="exit status ${rc}"
  fi
  stage_record "${name}" "${secs}" "${result}" "${passed}" "${failed}" "${skipped}" "${note}"
  [ "${result}" = ok ]
}

# Prints the summary; returns 1 when the run failed (see the top).
stage_summary() {  # TITLE [WHERE THE LOGS ARE]
  local title="$1" i total=0 any_failed=0 any_skipped=0
  echo
  echo "== summary of ${title}${2:+; test logs in $2}"
  printf '%-22s %16s  %-8s %7s %7s %8s\n' stage time result passed failed skipped
  for i in "${!stage_name[@]}"; do
    total=$((total + stage_secs[i]))
    printf '%-22s %16s  %-8s %7s %7s %8s%s\n' "${stage_name[$i]}" "$(stage_clock "${stage_secs[$i]}")" \
      "${stage_result[$i]}" "${stage_passed[$i]}" "${stage_failed[$i]}" "${stage_skipped[$i]}" \
      "${stage_note[$i]:+  (${stage_note[$i]})}"
    case "${stage_result[$i]}" in
      failed) any_failed=1 ;;
      skipped) any_skipped=1 ;;
    esac
    [ "${stage_skipped[$i]}" = - ] || [ "${stage_skipped[$i]}" -eq 0 ] || any_skipped=1
  done
  printf '%-22s %16s\n' total "$(stage_clock "${total}")"
  if [ ${#stage_failures[@]} -gt 0 ]; then
    echo "failed:"
    printf '  %s\n' "${stage_failures[@]}"
  fi
  if [ ${#stage_skips[@]} -gt 0 ]; then
    echo "skipped:"
    printf '  %s\n' "${stage_skips[@]}"
  fi
  if [ "${any_failed}" -eq 1 ]; then
    echo "${title}: FAILED"
    return 1
  fi
  if [ "${any_skipped}" -eq 1 ]; then
    if [ "${RKV_NO_SKIP:-0}" = "1" ]; then
      echo "${title}: FAILED: something was skipped, and RKV_NO_SKIP=1 says every test must run here"
      return 1
    fi
    echo "${title}: passed, with the skips above (each for its reason; CI, with RKV_NO_SKIP=1, runs them all)"
    return 0
  fi
  echo "${title}: passed"
}
