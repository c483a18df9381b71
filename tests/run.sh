#!/usr/bin/env bash
# Runs every test binary in BUILD/tests and every tests/t_*.sh; counts the
# "ok"/"FAIL" lines they print, says how long each took, and ends with
# "N passed, N failed" and the slowest ones.
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
export NG_BIN="$root/$build/normgrow" NG_ROOT="$root"
# OpenMP threads wait as normgrow makes its own wait (tools/normgrow.c, prepare_runtime):
# passive after a short spin, unless a policy is given; the test binaries do not go through
# it. Threads that spin long (libgomp's default) crawl when cores are shared; threads that
# never spin pay a wake-up at every parallel region, which on a 2-core VM made test_gradcheck
# take 36 s instead of 3.9 s and test_train 42 s instead of 9.5 s.
if [ -z "${OMP_WAIT_POLICY:-}" ]; then
  export OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-20000}
fi
pass=0 fail=0 log=$(mktemp) times=$(mktemp)
trap 'rm -f "$log" "$times"' EXIT
run() {
  local name=$1; shift
  echo "== $name"
  local t0=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  cat "$log"
  echo "$((SECONDS - t0)) $name" >>"$times"
  echo "-- $name: $((SECONDS - t0)) s"
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

# The numerical binaries again under a second OpenBLAS kernel family with one
# thread, and under this machine's family with three, so that a comparison
# that holds only for one blocking of a BLAS fails here, not on the next
# machine (the golden cases run under every family in t_golden.sh). The
# environment's own OPENBLAS_CORETYPE, when preset, is this machine's family. The
# second is Haswell (AVX2 with FMA), or Sandybridge where Haswell is the machine's:
# Sandybridge's kernels return with the upper halves of the vector registers dirty,
# and on an AVX-512 Xeon every SSE instruction after them (libm's exp in attention's
# softmax) then runs many times slower (test_gradcheck 19 s instead of 1.4 s).
family=$("$NG_BIN" --version | sed -n 's/^BLAS: .*kernels \([A-Za-z0-9]*\).*/\1/p')
second=Haswell
[ "$family" = Haswell ] && second=Sandybridge
[ -n "$family" ] || { echo "FAIL $NG_BIN --version names no BLAS kernel family"; fail=$((fail + 1)); }
[ -n "$family" ] && for t in backends diag gradcheck grow hf mpi nonfinite topk train; do
  bin="$root/$build/tests/test_$t"
  [ -x "$bin" ] || continue
  run "test_$t [BLAS $second, 1 thread]" env OPENBLAS_CORETYPE=$second OMP_NUM_THREADS=1 "$bin"
  run "test_$t [BLAS $family, 3 threads]" env OPENBLAS_CORETYPE="$family" OMP_NUM_THREADS=3 "$bin"
done
echo "slowest (seconds): $(sort -rn "$times" | head -n 6 | awk '{n = $1; $1 = ""; printf "%s%s %d", (NR > 1 ? ";" : ""), $0, n}')"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
