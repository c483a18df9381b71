#!/usr/bin/env bash
# Data-parallel training over MPI on the CPU (2 cores: oversubscribed). A growing
# distillation run on 2 and 3 ranks ends within fp32 summation-order tolerance of
# the single-process run, the ranks' weights compared bit for bit at every step
# (each step is a checkpoint here); a checkpoint of 2 ranks resumes on 1, 2 (bit-
# identical) and 3; evaluations, diagnostics and the ablation shared by 2 and 3 ranks
# equal one process's at the same weights; a teacher cache built by 3 ranks serves a run
# as one process's does; a rank killed mid-run ends the others; a run that diverges stops
# every rank at one process's step with one line and status 3; --backend cuda on a
# machine without a usable GPU is refused in one line. One "skip" line when
# mpirun cannot start.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
cmp_bin=$(dirname "$bin")/tests/test_mpi  # `test_mpi compare A B`: largest |difference|
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# Under `make asan`, LeakSanitizer would report OpenMPI's own allocations that
# it keeps until exit (hwloc, its plugins); the ranks' leak check is off.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
mpi() { mpirun --oversubscribe -np "$@"; }
if ! mpi 1 true >/dev/null 2>&1; then
  echo "skip mpi: mpirun cannot start here"
  exit 0
fi

"$bin" data /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 --records-split "" \
  --val-fraction 0.1 --out "$tmp/data" >/dev/null || { echo "FAIL data: could not build shards"; exit 0; }
model() {  # layers
  echo "{\"vocab_size\": 257, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": $1,
   \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, \"rope_theta\": 10000,
   \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, \"norm_placement\": \"pre\", \"final_norm\": true}"
}
common() {  # micro_batch
  echo "\"data\": {\"train\": \"$tmp/data/train.bin\", \"val\": \"$tmp/data/val.bin\", \"batch\": 8, \"seq\": 32, \"micro_batch\": $1},
 \"optim\": {\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"weight_decay\": 0.1, \"grad_clip\": 1.0},
 \"lr\": {\"peak\": 0.01, \"floor\": 0.001, \"warmup_tokens\": 2048, \"shape\": \"cosine\"},
 \"eval\": {\"every_steps\": 10, \"batches\": 2}, \"checkpoint_every_steps\": 1"
}
cat >"$tmp/teacher.json" <<JSON
{"name": "teacher", "seed": 1, "run_dir": "$tmp/teacher", "mode": "pretrain", $(common 8),
 "model": $(model 2), "stages": [{"depth": 2, "tokens": 5120}]}
JSON
arm() {  # micro_batch
  cat <<JSON
{"name": "arm", "seed": 3, "run_dir": "$tmp/arm", "mode": "distill", $(common "$1"), "model": $(model 3),
 "teacher": "$tmp/teacher/final.safetensors", "loss": {"kd_weight": 0.5, "temperature": 2.0},
 "growth": {"position": "interleave", "init": "copy_below"},
 "stages": [{"depth": 1, "tokens": 2560}, {"depth": 2, "tokens": 2560}, {"depth": 3, "tokens": 2560}]}
JSON
}
"$bin" train "$tmp/teacher.json" 2>/dev/null || { echo "FAIL mpi: teacher run failed"; exit 0; }
arm 2 >"$tmp/arm.json"
for mb in 1 4 8; do arm "$mb" >"$tmp/arm$mb.json"; done
diff_of() { "$cmp_bin" compare "$1" "$2" 2>/dev/null || echo "unreadable"; }
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "unreadable" && a + 0 <= b + 0) }'; }
# How far fp32 summation order alone moves one process's weights (the file at
# $1 in each run dir $2-mb1, -mb4, -mb8: micro-batches of 1, 4 and 8 rows
# against the run $3 of 2): the largest of the three differences. Ranks sum in
# yet another order; how large such a difference is depends on the BLAS kernel
# family and thread count, so the tolerances below are multiples of this
# spread measured here, never a constant from one machine.
spread_of() {
  local s=0 mb d
  for mb in 1 4 8; do
    d=$(diff_of "$3/$1" "$2-mb$mb/$1")
    [ "$d" = unreadable ] && { echo unreadable; return; }
    s=$(awk -v a="$s" -v b="$d" 'BEGIN { print (b > a ? b : a) }')
  done
  echo "$s"
}

# Before the first growth (10 steps) the runs differ only by fp32 summation order.
"$bin" train "$tmp/arm.json" --run-dir "$tmp/one10" --stop-after 10 2>/dev/null
for mb in 1 4 8; do
  "$bin" train "$tmp/arm$mb.json" --run-dir "$tmp/one10-mb$mb" --stop-after 10 2>/dev/null
done
spread10=$(spread_of checkpoint.safetensors "$tmp/one10" "$tmp/one10")
tol10=$(awk -v s="$spread10" 'BEGIN { print 3 * s + 1e-7 }')
for n in 2 3; do
  mpi "$n" "$bin" train "$tmp/arm.json" --run-dir "$tmp/dp$n-10" --stop-after 10 2>/dev/null
  d=$(diff_of "$tmp/one10/checkpoint.safetensors" "$tmp/dp$n-10/checkpoint.safetensors")
  if below "$d" "$tol10" && below "$d" 1e-5; then
    echo "ok mpi $n ranks, 10 steps: weights within $d of one process (order spread $spread10)"
  else echo "FAIL mpi $n ranks, 10 steps: weights differ from one process by $d (tolerance $tol10)"; fi
done

# data.sampling "epoch": every rank takes its micro-batches of the same windows as one process.
for mb in 1 2 4 8; do
  f=$tmp/arm$mb.json; [ "$mb" = 2 ] && f=$tmp/arm.json
  sed "s|\"micro_batch\": $mb}|\"micro_batch\": $mb, \"sampling\": \"epoch\"}|" "$f" >"$tmp/epoch$mb.json"
  [ "$mb" = 2 ] || "$bin" train "$tmp/epoch$mb.json" --run-dir "$tmp/epoch1-mb$mb" --stop-after 10 2>/dev/null
done
"$bin" train "$tmp/epoch2.json" --run-dir "$tmp/epoch1" --stop-after 10 2>/dev/null
mpi 2 "$bin" train "$tmp/epoch2.json" --run-dir "$tmp/epoch2" --stop-after 10 2>/dev/null
spread_e=$(spread_of checkpoint.safetensors "$tmp/epoch1" "$tmp/epoch1")
tol_e=$(awk -v s="$spread_e" 'BEGIN { print 3 * s + 1e-7 }')
d=$(diff_of "$tmp/epoch1/checkpoint.safetensors" "$tmp/epoch2/checkpoint.safetensors")
u=$(diff_of "$tmp/one10/checkpoint.safetensors" "$tmp/epoch1/checkpoint.safetensors")
if below "$d" "$tol_e" && below "$d" 1e-5 && ! below "$u" 0; then
  echo "ok mpi 2 ranks, epoch sampling, 10 steps: weights within $d of one process (order spread $spread_e; $u from uniform sampling)"
else echo "FAIL mpi 2 ranks, epoch sampling: weights differ from one process by $d (tolerance $tol_e; from uniform by $u)"; fi

# The whole growing run (1 -> 2 -> 3 blocks, 30 steps). Past a growth, fresh Adam
# moments amplify rounding: the tolerance is three times the spread that fp32 summation
# order alone gives one process.
"$bin" train "$tmp/arm.json" --run-dir "$tmp/one" 2>/dev/null
for mb in 1 4 8; do "$bin" train "$tmp/arm$mb.json" --run-dir "$tmp/one-mb$mb" 2>/dev/null; done
spread=$(spread_of final.safetensors "$tmp/one" "$tmp/one")
tol=$(awk -v s="$spread" 'BEGIN { print 3 * s + 1e-6 }')
for n in 2 3; do
  mpi "$n" "$bin" train "$tmp/arm.json" --run-dir "$tmp/dp$n" 2>"$tmp/err$n"
  rc=$?
  d=$(diff_of "$tmp/one/final.safetensors" "$tmp/dp$n/final.safetensors")
  if [ "$rc" -eq 0 ] && below "$d" "$tol" && below "$d" 0.02; then
    echo "ok mpi $n ranks, growing run of 30 steps: weights within $d of one process (order spread $spread), ranks bit-identical at every step"
  else
    echo "FAIL mpi $n ranks, growing run: status $rc, difference $d (tolerance $tol): $(tail -1 "$tmp/err$n")"
  fi
done
# Evaluation on every rank's share: the same numbers as one process, to training's differences.
evals() { grep -o '"event":"eval","step":10,.*"val_ce":[0-9.e-]*' "$1" | sed 's/.*"val_ce"://'; }
e1=$(evals "$tmp/one/metrics.jsonl") e2=$(evals "$tmp/dp2/metrics.jsonl")
if [ -n "$e1" ] && below "$(awk -v a="$e1" -v b="$e2" 'BEGIN { d = a - b; print d < 0 ? -d : d }')" 1e-5 &&
   [ ! -e "$tmp/dp2/metrics.jsonl.1" ] && [ "$(grep -c '"event":"step"' "$tmp/dp2/metrics.jsonl")" -eq 30 ]; then
  echo "ok mpi 2 ranks: val CE at step 10 $e2 (one process $e1), each step logged once"
else
  echo "FAIL mpi 2 ranks: val CE at step 10 $e2, one process $e1 (or steps logged twice)"
fi

# Evaluations shared by the ranks. At learning rate 0 every layout keeps the weights of the
# start, so each evaluation (metrics.jsonl, growths included), its diagnostics (diag.jsonl)
# and the final ablation (diag_final.json) of 2 and 3 ranks must be one process's: the
# residual points bit for bit, the means within the rounding of sums in another order.
# 5 validation batches of 2 micro-batches: 10 shares, split 5/5 (across a batch) and 3/3/4.
sed 's/"peak": 0.01, "floor": 0.001/"peak": 0, "floor": 0/; s/"batches": 2}/"batches": 5}/;
     s/"micro_batch": 2}/"micro_batch": 4}/; s/"norm_placement": "pre"/"norm_placement": "post"/' \
  "$tmp/arm.json" >"$tmp/frozen.json"
"$bin" train "$tmp/frozen.json" --run-dir "$tmp/frozen1" 2>/dev/null
for n in 2 3; do
  mpi "$n" "$bin" train "$tmp/frozen.json" --run-dir "$tmp/frozen$n" 2>/dev/null
  read -r worst points records < <("$cmp_bin" evals "$tmp/frozen1" "$tmp/frozen$n" 2>/dev/null || echo "unreadable 0 0")
  if [ "$points" = 1 ] && [ "$records" -ge 10 ] && below "$worst" 1e-9; then
    echo "ok mpi $n ranks share the evaluations: $records records (evaluations, growths, diagnostics, ablation) as one process's, residual points bit for bit, means within $worst"
  else
    echo "FAIL mpi $n ranks share the evaluations: differ by $worst from one process (points identical: $points, $records records)"
  fi
done

# The teacher cache built by 3 ranks (a manifest of their parts) holds one process's
# entries: a run that distils from it ends bit-identical to one from the single file.
ok_cache=1
for split in train val; do
  "$bin" teacher-cache "$tmp/teacher/final.safetensors" "$tmp/data/$split.bin" "$tmp/one-$split.topk" \
    --k 8 --temperature 2 --seq 32 --batch 1 >/dev/null 2>&1 || ok_cache=0
  mpi 3 "$bin" teacher-cache "$tmp/teacher/final.safetensors" "$tmp/data/$split.bin" "$tmp/many-$split.topk" \
    --k 8 --temperature 2 --seq 32 --batch 1 >/dev/null 2>&1 || ok_cache=0
done
for from in one many; do
  sed "s|\"loss\": {|\"teacher_cache\": {\"train\": \"$tmp/$from-train.topk\", \"val\": \"$tmp/$from-val.topk\"}, \"loss\": {|" \
    "$tmp/arm.json" >"$tmp/cached-$from.json"
  "$bin" train "$tmp/cached-$from.json" --run-dir "$tmp/cached-$from" 2>/dev/null || ok_cache=0
done
if [ "$ok_cache" = 1 ] && grep -q '"normgrow-topk-parts"' "$tmp/many-train.topk" && [ -f "$tmp/many-train.topk.part-3-of-3" ] &&
   cmp -s "$tmp/cached-one/final.safetensors" "$tmp/cached-many/final.safetensors"; then
  echo "ok mpi 3 ranks build the teacher cache into parts and a manifest: a run from it ends bit-identical to one from one process's cache"
else
  echo "FAIL mpi teacher cache of 3 ranks: not built, or a run from it differs from one from one process's cache"
fi
# The report reads an arm distilled from the 3 ranks' cache beside the exact teacher's arm:
# both in its tables with their own final validation CE (this 30-step arm ends at the
# unigram plateau, so in the table of runs that did not train), the cached arm's FLOPs
# without the teacher's forward, and the cache's validation part named among the settings
# the two were not evaluated alike in.
final_ce() { grep '"event":"eval"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"val_ce":\([0-9.e-]*\).*/\1/'; }
python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['name'] = 'arm-topk8'
json.dump(c, open(sys.argv[1], 'w'), indent=1)" "$tmp/cached-many/config.json"
"$bin" report "$tmp/one" "$tmp/cached-many" --out "$tmp/cache-report" >"$tmp/report.out" 2>&1
rc=$?
exact=$(printf '%.4f' "$(final_ce "$tmp/one")") cached=$(printf '%.4f' "$(final_ce "$tmp/cached-many")")
flops() { grep -m 1 "^| $1 | Pre-Norm |" "$tmp/cache-report/report.md" | awk -F'|' '{print $(NF-1)}' | tr -d ' '; }
if [ "$rc" -eq 0 ] && grep -q "^| \`$tmp/cached-many\` | arm-topk8 | 3 | .* | $cached |" "$tmp/cache-report/report.md" &&
   grep -q "^| \`$tmp/one\` | arm | 3 | .* | $exact |" "$tmp/cache-report/report.md" &&
   python3 -c "import sys; sys.exit(not float('$(flops arm-topk8)') < float('$(flops arm)'))" 2>/dev/null &&
   grep "not evaluated alike" "$tmp/cache-report/report.md" | grep -q "teacher_cache.val"; then
  echo "ok report over an arm distilled from the 3 ranks' top-8 cache ($cached, $(flops arm-topk8) FLOPs) and the exact teacher's ($exact, $(flops arm)), the cache named as an evaluation difference"
else
  echo "FAIL report over a teacher-cache arm: status $rc, $(head -c 300 "$tmp/report.out")"
fi

# A checkpoint of 2 ranks resumes on 2 (bit-identical), 1 and 3 (same format).
mpi 2 "$bin" train "$tmp/arm.json" --run-dir "$tmp/stop" --stop-after 15 2>/dev/null
for n in 1 2 3; do
  cp -r "$tmp/stop" "$tmp/resume$n"
  if [ "$n" -eq 1 ]; then "$bin" train --resume "$tmp/resume1" 2>/dev/null
  else mpi "$n" "$bin" train --resume "$tmp/resume$n" 2>/dev/null; fi
  rc=$?
  d=$(diff_of "$tmp/dp2/final.safetensors" "$tmp/resume$n/final.safetensors")
  if [ "$n" -eq 2 ]; then
    # exact on 2 ranks: the resumed run repeats the same ops in the same order
    if [ "$rc" -eq 0 ] && cmp -s "$tmp/dp2/final.safetensors" "$tmp/resume2/final.safetensors"; then
      echo "ok mpi checkpoint of 2 ranks at step 15 resumed on 2: final weights bit-identical"
    else echo "FAIL mpi checkpoint of 2 ranks resumed on 2: status $rc, differs by $d"; fi
  elif [ "$rc" -eq 0 ] && below "$d" "$tol"; then
    echo "ok mpi checkpoint of 2 ranks at step 15 resumed on $n: final weights within $d of the 2-rank run"
  else
    echo "FAIL mpi checkpoint of 2 ranks resumed on $n: status $rc, difference $d (tolerance $tol)"
  fi
done

# A rank killed mid-run: the others end with an error, not a hang.
sed 's/"tokens": 2560}]/"tokens": 2560000}]/' "$tmp/arm.json" >"$tmp/long.json"
mpirun --oversubscribe -np 3 "$bin" train "$tmp/long.json" --run-dir "$tmp/long" >/dev/null 2>&1 &
job=$!  # mpirun; the ranks are its children
for _ in $(seq 1 3000); do
  grep -q '"step":12,' "$tmp/long/metrics.jsonl" 2>/dev/null && break
  sleep 0.02
done
rank_pids=$(pgrep -P "$job")
victim=$(echo "$rank_pids" | tail -1)
[ -n "$victim" ] && kill -KILL "$victim"
for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then
  kill -TERM "$job"; wait "$job" 2>/dev/null
  echo "FAIL mpi: a killed rank left the others running after 60 s"
else
  wait "$job"
  rc=$?
  # The ranks still running (a zombie has ended) 10 s after mpirun has ended.
  for _ in $(seq 1 100); do
    left=""
    for p in $rank_pids; do
      state=$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)
      [ -n "$state" ] && [ "$state" != Z ] && left="$left $p"
    done
    [ -z "$left" ] && break
    sleep 0.1
  done
  if [ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$(echo "$rank_pids" | wc -w)" -eq 3 ] && [ -z "$left" ]; then
    echo "ok mpi: a rank (process $victim of 3) killed after step 12: the other two ended, mpirun status $rc"
  else echo "FAIL mpi: killed rank '$victim' of '${rank_pids//$'\n'/ }', run status $rc, still running:${left:- none}"; fi
fi

# A run that diverges (the teacher's config at lr.peak 10 with a weight decay of 1) on 2 ranks:
# both stop at the step one process stops at, mpirun exits 3, one line says so, and
# metrics.jsonl (rank 0's) ends with one "diverged" record of that step.
dv=(--set lr.peak=10 --set optim.weight_decay=1)
"$bin" train "$tmp/teacher.json" "${dv[@]}" --run-dir "$tmp/dv1" >/dev/null 2>&1
rc1=$?
mpi 2 "$bin" train "$tmp/teacher.json" "${dv[@]}" --run-dir "$tmp/dv2" >/dev/null 2>"$tmp/dv2.err"
rc2=$?
diverged_at() { tail -n 1 "$1/metrics.jsonl" 2>/dev/null | sed -n 's/^{"event":"diverged","step":\([0-9]*\),.*/\1/p'; }
step1=$(diverged_at "$tmp/dv1") step2=$(diverged_at "$tmp/dv2")
if [ "$rc1" -eq 3 ] && [ "$rc2" -eq 3 ] && [ -n "$step1" ] && [ "$step1" = "$step2" ] &&
   [ "$(grep -c '"event":"diverged"' "$tmp/dv2/metrics.jsonl")" -eq 1 ] &&
   [ "$(grep -c '^normgrow: teacher: step ' "$tmp/dv2.err")" -eq 1 ]; then
  echo "ok mpi: a run that diverges on 2 ranks: both stop at step $step2 as one process does, status 3, one line, one diverged record"
else
  echo "FAIL mpi: a run that diverges: status $rc1 alone, $rc2 on 2 ranks, stopped at step '$step1' / '$step2'; $(head -c 600 "$tmp/dv2.err")"
fi

# The cuda backend under mpirun carries its collectives with NCCL; on a machine
# with no usable GPU that is one line naming the backend and why, before any file.
if "$bin" --version | grep -Eq '^backends:.*\bcuda\b'; then
  mpi 1 "$bin" train "$tmp/arm.json" --run-dir "$tmp/cuda" --backend cuda --stop-after 1 >/dev/null 2>"$tmp/cuda.err"
  rc=$?
  lines=$(grep -c '^normgrow' "$tmp/cuda.err")
  if [ "$rc" -eq 0 ]; then
    echo "skip mpi cuda refusal: a GPU is usable here (tools/gpu_check.sh runs NCCL)"
  elif [ "$lines" -eq 1 ] && grep -q '^normgrow: backend "cuda": ' "$tmp/cuda.err" && [ ! -e "$tmp/cuda" ]; then
    echo "ok mpi: --backend cuda without a usable GPU: status $rc, one line: $(grep '^normgrow' "$tmp/cuda.err")"
  else
    echo "FAIL mpi: --backend cuda without a usable GPU: status $rc, $lines normgrow lines, run dir $(ls -d "$tmp/cuda" 2>/dev/null || echo absent)"
  fi
fi
