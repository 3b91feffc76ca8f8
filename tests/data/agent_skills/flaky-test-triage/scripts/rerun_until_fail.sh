#!/usr/bin/env bash
# Run a command up to N times; stop at the first failure and keep its output.
# Usage: rerun_until_fail.sh N command [args...]
set -u
n="$1"; shift
log="$(mktemp -t rerun.XXXXXX.log)"
for i in $(seq 1 "$n"); do
  if ! "$@" >"$log" 2>&1; then
    echo "failed on run $i of $n; output in $log"
    tail -n 40 "$log"
    exit 1
  fi
  printf '.'
  if (( i % 50 == 0 )); then printf ' %d\n' "$i"; fi
done
echo
echo "passed $n runs"
rm -f "$log"
