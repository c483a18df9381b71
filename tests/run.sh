#!/usr/bin/env bash
# Runs every test binary in BUILD/tests and every tests/t_*.sh; counts the
# "ok"/"FAIL" lines they print and ends with "N passed, N failed".
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
export NG_BIN="$root/$build/normgrow" NG_ROOT="$root"
# Spinning OpenMP threads make small parallel regions crawl when cores are shared.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0 fail=0 log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  local name=$1; shift
  echo "== $name"
  "$@" >"$log" 2>&1
  local rc=$?
  cat "$log"
  local p f
  p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with status $rc"; f=1
  fi
  pass=$((pass + p)); fail=$((fail + f))
}
for t in "$root/$build"/tests/test_*; do
  [ -x "$t" ] && [ "${t%.d}" = "$t" ] && [ "${t%.o}" = "$t" ] && run "$(basename "$t")" "$t"
done
for t in "$root"/tests/t_*.sh; do
  [ -f "$t" ] && run "$(basename "$t")" bash "$t"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
