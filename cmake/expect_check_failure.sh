#!/bin/sh
# Runs a check that must fail, and checks that it failed for the expected
# reasons: exit status 1 and every MESSAGE in its output.
# Usage: expect_check_failure.sh MESSAGE... -- COMMAND [ARG...]
set -u
messages_file=$(mktemp)
trap 'rm -f "$messages_file"' EXIT
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  printf '%s\n' "$1" >> "$messages_file"
  shift
done
if [ $# -lt 2 ]; then
  echo "usage: expect_check_failure.sh MESSAGE... -- COMMAND [ARG...]"
  exit 2
fi
shift
out=$("$@" 2>&1)
rc=$?
if [ "$rc" -ne 1 ]; then
  printf '%s\n' "$out" | tail -20
  echo "FAIL: $* exited with $rc, not 1"
  exit 1
fi
while IFS= read -r message; do
  if ! printf '%s\n' "$out" | grep -qF -- "$message"; then
    printf '%s\n' "$out" | tail -20
    echo "FAIL: $* failed, but did not say: $message"
    exit 1
  fi
  echo "ok: fails saying: $message"
done < "$messages_file"
