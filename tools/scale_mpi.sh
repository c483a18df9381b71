#!/usr/bin/env bash
# Data-parallel step time on this machine's CPUs: the toy teacher's shape
# (8 blocks, d 128, a global batch of 16 x 128 tokens, pretraining), STEPS steps
# per run, in three layouts, each repeated REPS times, interleaved so that the
# load of a shared machine falls on all alike:
#   1x1   one process, one OpenMP thread
#   1x2   one process, two threads
#   m1x1  mpirun -np 1, one thread (the communicator's cost without a peer)
#   2x1   mpirun -np 2, one thread per rank (each rank half the batch)
# A run's step time is the median of the wall-clock gaps between its logged
# steps (the first 3 left out). Prints every run, each layout's median, and the
# ratios 1x1 / 2x1 (the speed-up of a second rank), 1x2 / 2x1 and 1x1 / m1x1.
# Usage: tools/scale_mpi.sh [--reps R] [--steps S] [--bin PATH]
set -euo pipefail
reps=3 steps=40 bin=build/normgrow
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) echo "usage: tools/scale_mpi.sh [--reps R] [--steps S] [--bin PATH]" >&2; exit 2 ;;
  esac
done
[[ $reps =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ && $steps -gt 5 ]] ||
  { echo "scale_mpi: --reps: a count >= 1; --steps: a count > 5" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}

"$bin" data /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 --records-split "" \
  --val-fraction 0.1 --out "$tmp/data" >/dev/null
python3 - "$root/configs/toy/teacher.json" "$tmp" "$steps" >"$tmp/run.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
tmp, steps = sys.argv[2], int(sys.argv[3])
c["data"]["train"], c["data"]["val"] = tmp + "/data/train.bin", tmp + "/data/val.bin"
tokens = steps * c["data"]["batch"] * c["data"]["seq"]
c["stages"] = [{"depth": c["model"]["num_hidden_layers"], "tokens": tokens}]
c["eval"] = {"every_steps": 10 * steps, "batches": 1}
c["checkpoint_every_steps"] = 10 * steps
print(json.dumps(c))
PY

# step_time DIR: the median gap between logged steps, in seconds.
step_time() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
t = [r["time"] for r in map(json.loads, open(sys.argv[1])) if r.get("event") == "step"]
print(f"{statistics.median(b - a for a, b in zip(t[3:], t[4:])):.4f}")
PY
}
layout() {  # NAME REP
  local d=$tmp/$1-$2
  case $1 in
    1x1) OMP_NUM_THREADS=1 "$bin" train "$tmp/run.json" --run-dir "$d" --threads 1 ;;
    1x2) OMP_NUM_THREADS=2 "$bin" train "$tmp/run.json" --run-dir "$d" --threads 2 ;;
    m1x1) OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 1 "$bin" train "$tmp/run.json" \
           --run-dir "$d" --threads 1 ;;
    2x1) OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 "$bin" train "$tmp/run.json" \
           --run-dir "$d" --threads 1 ;;
  esac >/dev/null 2>"$d.err" || { echo "scale_mpi: $1 failed: $(tail -1 "$d.err")" >&2; exit 1; }
  step_time "$d"
}
echo "toy teacher shape, $steps steps a run, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, $(nproc) cores," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
printf '%-6s %s\n' rep "step seconds: 1x1 1x2 m1x1 2x1"
for r in $(seq 1 "$reps"); do
  a=$(layout 1x1 "$r") b=$(layout 1x2 "$r") m=$(layout m1x1 "$r") c=$(layout 2x1 "$r")
  printf '%-6s %s %s %s %s\n' "$r" "$a" "$b" "$m" "$c" | tee -a "$tmp/times"
done
awk '{ a[NR] = $2; b[NR] = $3; m[NR] = $4; c[NR] = $5 }
  function median(x, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
    return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
  }
  END {
    ma = median(a, NR); mb = median(b, NR); mm = median(m, NR); mc = median(c, NR)
    printf "median %.4f %.4f %.4f %.4f\n", ma, mb, mm, mc
    printf "ratios: 1x1 / 2x1 = %.2f (a second rank; 2 is perfect), 1x2 / 2x1 = %.2f (ranks vs threads on the same 2 cores), 1x1 / m1x1 = %.2f (mpirun alone)\n", ma / mc, mb / mc, ma / mm
  }' "$tmp/times"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
