#!/usr/bin/env bash
# shellcheck disable=SC2317  # the steps' functions run through bash -c
# normgrow gpu_check: what the CUDA backend must show on one GPU, in at most 6 minutes,
# every step under its own time limit (docs/cuda.md, "The GPU window").
#
#   tools/gpu_check.sh [OUTDIR]
#       on a GPU machine with normgrow's Debian packages: make gpu-bundle (not timed),
#       then the steps on build/gpu-bundle
#   tools/gpu_check.sh --prebuilt BUNDLE [OUTDIR]
#       on a bare CUDA machine, with a bundle of make gpu-bundle carried there: no make,
#       no installs
#   tools/gpu_check.sh --rehearse [--prebuilt BUNDLE] [OUTDIR]
#       the same script on a machine without a GPU: the steps that need one are skipped,
#       saying what they would have run; the toy arm's comparison runs on the CPU's
#       metrics against themselves
#   --relink: the relink step runs even where every binary loads (nvcc needed)
#
# Steps, in order of value (limit in seconds; the limits add up to at most 360):
#   libs      15  the bundle unpacked and its checksums; every binary's libraries as the
#                 loader resolves them; cuBLAS and NCCL found; nvidia-smi. Anything
#                 missing stops the check here, unless relink mends it
#   relink    60  only where a binary does not load (or --relink): the bundle's .cu sources
#                 compiled with this machine's nvcc, the binaries linked anew (gpu_bundle.sh)
#   op_test   25  test_cuda, fp32 and bf16: CUDA's own first-run checks (cuBLAS's
#                 rounding, bf16 attention against the CPU's bf16 kernel, the top-k
#                 kernel's order, the kernels named, NG_CUDA_SYNC; NG_REQUIRE_GPU: a
#                 skip is a failure)
#   sanitize  60  compute-sanitizer memcheck, then racecheck, on test_backends' small set
#                 on cuda alone (attention at every shape of the list, the loss, AdamW,
#                 the elementwise ops, in both precisions); says whether the tool ran at all
#   op_table  50  test_backends: every op against the CPU over every backend at the shared
#                 shapes (CUDA's tile-cutting ones among them), cuda included
#   golden    40  golden-check --backend cuda on every case, fp32 then bf16
#   bench     50  bench_cuda paper: the paper's block (hidden 4096, 32/8 heads of 128, FFN
#                 12288, T 2048) in bf16 and fp32, a cuBLAS bf16 GEMM 4096 x 12288 x 4096
#                 as the ceiling, MFU
#   toy       50  the toy distillation arm of the bundle on cuda fp32 twice (identical
#                 checkpoints) and cuda bf16, against the CPU's metrics carried in the bundle
#   nccl      10  NCCL on one GPU: mpirun -np 1 test_mpi ranks 1 cuda where mpirun and
#                 build/tests/test_mpi are there, else test_cuda's single-process smoke
#
# OUTDIR (default $OUT, else gpu-check-out) receives two files: gpu_check.tgz (every step's
# log, compute-sanitizer's output, the toy runs' metrics, every FAIL line in fails.txt,
# the bundle's MANIFEST; no checkpoints, no data) and summary.txt (a line per step: "ok",
# "FAIL (why)", "skipped (why)"; then the logs' first 30 FAIL lines). The summary is
# printed last. Exits non-zero when a step failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: tools/gpu_check.sh [--rehearse] [--prebuilt BUNDLE] [--relink] [OUTDIR]"
rehearse=0 force_relink=0 bundle='' outdir=''
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) rehearse=1; shift ;;
    --relink) force_relink=1; shift ;;
    --prebuilt) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; bundle=$2; shift 2 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) [ -z "$outdir" ] || { echo "$usage" >&2; exit 2; }; outdir=$1; shift ;;
  esac
done
outdir=${outdir:-${OUT:-gpu-check-out}}
mkdir -p "$outdir" || exit 2
out=$(cd "$outdir" && pwd)
budget=360
steps=(libs relink op_test sanitize op_table golden bench toy nccl)
declare -A limit=([libs]=15 [relink]=60 [op_test]=25 [sanitize]=60 [op_table]=50 [golden]=40
  [bench]=50 [toy]=50 [nccl]=10)
sum=0
for s in "${steps[@]}"; do sum=$((sum + limit[$s])); done
[ $sum -le $budget ] || { echo "gpu_check: the step limits add up to ${sum}s, over ${budget}s" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
logs=$work/gpu_check dir=$work/bundle
mkdir -p "$logs"
summary=$logs/summary.txt failed=0
# A step's line, into the summary (printed whole at the end) and, as it happens, to stderr.
say() {
  printf '%-9s %s\n' "$1" "$2" >>"$summary"
  echo "gpu_check: $1: $2" >&2
}

if [ -z "$bundle" ]; then
  if [ $rehearse -eq 1 ]; then
    bundle=$root/build/gpu-bundle
  else  # an ordinary GPU machine: build here first (outside the 6 minutes)
    t0=$(date +%s)
    if ! make -C "$root" -j"$(nproc)" gpu-bundle build/tests/test_mpi >"$logs/build.log" 2>&1; then
      say build "FAIL (make gpu-bundle; see build.log)"
      failed=1
    else
      say build "ok ($(($(date +%s) - t0))s, not counted)"
    fi
    bundle=$root/build/gpu-bundle
  fi
fi
bundle=$(cd "$bundle" 2>/dev/null && pwd) || { echo "gpu_check: no bundle at ${bundle}" >&2; exit 2; }
{
  echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)$([ $rehearse -eq 1 ] && echo ": REHEARSAL (no GPU steps)")"
  echo "bundle: $bundle, $(sed -n 's/^commit: //p' "$bundle/MANIFEST" 2>/dev/null); tree at $(git -C "$root" describe --always --dirty 2>/dev/null || echo "(no git)")"
  echo "step limits: ${sum}s in all (at most ${budget}s)"
} >>"$summary"

start=$(date +%s) deadline=$(($(date +%s) + budget)) stop=
export LD_LIBRARY_PATH='' NG_REQUIRE_GPU=1

# step NAME gpu|host FUNC: runs FUNC under the smaller of NAME's limit and the time
# left, logging to NAME.log; a non-zero status or a FAIL line fails it. A gpu step in
# a rehearsal, or any step after the check stopped, is skipped saying why.
step() {
  local name=$1 kind=$2 fn=$3 lim=${limit[$1]} left rc t0
  if [ -n "$stop" ]; then say "$name" "skipped ($stop)"; return 0; fi
  if [ "$kind" = gpu ] && [ $rehearse -eq 1 ]; then
    say "$name" "skipped (rehearsal: needs a GPU; would run: $(rehearse_"$fn"))"
    return 0
  fi
  left=$((deadline - $(date +%s)))
  if [ $left -lt 3 ]; then say "$name" "FAIL (not run: the ${budget}s are spent)"; failed=1; return 1; fi
  [ "$lim" -gt "$left" ] && lim=$left
  echo "gpu_check: $name (at most ${lim}s) ..." >&2
  t0=$(date +%s)
  timeout -k 5 "$lim" bash -c "$fn" >"$logs/$name.log" 2>&1
  rc=$?
  local took=$(($(date +%s) - t0))
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    say "$name" "FAIL (timed out after ${lim}s; see $name.log)"
  elif [ $rc -eq 3 ]; then
    say "$name" "skipped ($(tail -1 "$logs/$name.log"))"; return 0
  elif [ $rc -ne 0 ] || grep -q '^FAIL' "$logs/$name.log"; then
    say "$name" "FAIL (status $rc, ${took}s; see $name.log)"
  else
    say "$name" "ok (${took}s)"; return 0
  fi
  failed=1
  return 1
}

# Each step's function runs in bash -c: it sees what is exported. Status 3 with a last
# line "why" means skipped (why).
export dir bundle root logs rehearse

libs() {
  set -e
  tools/gpu_bundle.sh unpack "$bundle" "$dir"
  echo "ok unpacked $bundle into $dir: checksums match"
  sed 's/^/  /' "$bundle/MANIFEST"
  local b bad=0
  for b in "$dir"/bin/*; do
    if LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH=$(tools/gpu_bundle.sh cuda-libs "$dir" 2>/dev/null) \
      "$b" 2>&1 | grep -E 'not found|error'; then
      echo "FAIL $(basename "$b"): a library is missing"; bad=1
    fi
  done
  [ "$bad" -eq 0 ] && echo "ok every binary's libraries resolve"
  tools/gpu_bundle.sh cuda-libs "$dir" >"$dir/cuda-path" && echo "ok CUDA's libraries: $(cat "$dir/cuda-path")"
  if [ "$rehearse" -eq 1 ]; then
    echo "rehearsal: nvidia-smi not asked"
  elif ! command -v nvidia-smi >/dev/null; then
    echo "FAIL nvidia-smi: not on this machine (no GPU driver)"; exit 1
  elif ! nvidia-smi; then
    echo "FAIL nvidia-smi: no GPU answers"; exit 1
  else
    echo "ok device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
  fi
}
relink() {
  tools/gpu_bundle.sh relink "$bundle" "$dir" && libs_again
}
libs_again() {
  local b
  for b in "$dir"/bin/*; do
    if LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH=$(cat "$dir/cuda-path" 2>/dev/null) "$b" 2>&1 | grep -E 'not found|error'; then
      echo "FAIL $(basename "$b") still does not load"
    fi
  done
}
export -f libs relink libs_again

# The binaries with CUDA's libraries found.
run_bin() { LD_LIBRARY_PATH=$(cat "$dir/cuda-path") "$@"; }
op_test() { run_bin "$dir/bin/test_cuda"; }
rehearse_op_test() { echo "test_cuda"; }
sanitize() {
  local cs tool rc ran=0 raw
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [ -n "$cs" ] || { echo "compute-sanitizer: not on this machine"; exit 3; }
  "$cs" --version | tail -1
  for tool in memcheck racecheck; do  # each under half the step's limit; output in sanitize-TOOL.txt
    raw=$logs/sanitize-$tool.txt
    run_bin timeout -k 3 27 "$cs" --tool "$tool" --error-exitcode 9 --print-limit 20 \
      "$dir/bin/test_backends" cuda attention loss adamw elementwise >"$raw" 2>&1
    rc=$?
    if grep -q 'ERROR SUMMARY' "$raw"; then
      ran=$((ran + 1))
      echo "$tool ran: $(grep -c '^ok' "$raw") checks ok; $(grep 'ERROR SUMMARY' "$raw" | tail -1)"
      grep '^FAIL' "$raw"
      [ "$rc" -eq 0 ] || echo "FAIL $tool: status $rc (see sanitize-$tool.txt)"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "$tool did not finish in 27s ($(grep -c '^ok' "$raw") checks ok by then)"
    else
      echo "$tool did not run (status $rc): $(grep -m1 -iE 'error|not supported' "$raw")"
    fi
  done
  [ "$ran" -gt 0 ] || { echo "compute-sanitizer did not run to its end here (see sanitize.log)"; exit 3; }
}
rehearse_sanitize() { echo "compute-sanitizer --tool memcheck|racecheck test_backends cuda attention loss adamw elementwise"; }
op_table() { run_bin "$dir/bin/test_backends"; }
rehearse_op_table() { echo "test_backends"; }
golden() {
  run_bin "$dir/bin/normgrow" golden-check --backend cuda golden/*.safetensors &&
    run_bin "$dir/bin/normgrow" golden-check --backend cuda --precision bf16 golden/*.safetensors
}
rehearse_golden() {
  local cases=(golden/*.safetensors)
  echo "normgrow golden-check --backend cuda [--precision bf16] on ${#cases[@]} cases"
}
bench() { run_bin "$dir/bin/bench_cuda" paper --reps 5; }
rehearse_bench() { echo "bench_cuda paper --reps 5"; }
toy() {
  cd "$dir/toy" || exit 1
  local nb=$dir/bin/normgrow
  run_bin "$nb" train arm.json --run-dir cuda --backend cuda &&
    run_bin "$nb" train arm.json --run-dir cuda2 --backend cuda &&
    run_bin "$nb" train arm.json --run-dir bf16 --backend cuda --precision bf16 || exit 1
  if cmp -s cuda/final.safetensors cuda2/final.safetensors; then
    echo "ok toy: two cuda fp32 runs write identical checkpoints"
  else
    echo "FAIL toy: two cuda fp32 runs write different checkpoints"
  fi
  mkdir -p "$logs/toy"
  for r in cuda cuda2 bf16; do
    for f in metrics.jsonl backend.jsonl; do cp "$r/$f" "$logs/toy/$r-$f"; done
  done
  python3 "$root/tools/gpu_toy/compare.py" cpu.jsonl cuda/metrics.jsonl bf16/metrics.jsonl
}
rehearse_toy() { echo "normgrow train toy/arm.json on cuda twice and cuda bf16"; }
nccl() {
  if command -v mpirun >/dev/null && [ -x "$root/build/tests/test_mpi" ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 run_bin mpirun -np 1 "$root/build/tests/test_mpi" ranks 1 cuda
  else
    echo "no mpirun (or no build/tests/test_mpi): the single-process NCCL smoke of test_cuda;" \
      "NCCL over several ranks waits for a machine of several GPUs"
    run_bin "$dir/bin/test_cuda" nccl
  fi
}
rehearse_nccl() { echo "mpirun -np 1 test_mpi ranks 1 cuda, or test_cuda nccl"; }
export -f run_bin op_test sanitize op_table golden bench toy nccl

cd "$root" || exit 2
step libs host libs || stop="libs failed: $(grep -m1 '^FAIL' "$logs/libs.log" || tail -1 "$logs/libs.log")"
if { [ -n "$stop" ] && grep -q 'a library is missing' "$logs/libs.log"; } || { [ -z "$stop" ] && [ $force_relink -eq 1 ]; }; then
  stop=''
  step relink host relink || stop="the bundle does not run here, relinked or not"
else
  say relink "skipped (${stop:-every binary loads})"
fi
[ $rehearse -eq 0 ] && [ -z "$stop" ] && ! grep -q '^ok device' "$logs/libs.log" && stop="no GPU (nvidia-smi)"
step op_test gpu op_test
step sanitize gpu sanitize
step op_table gpu op_table
step golden gpu golden
step bench gpu bench
if [ $rehearse -eq 1 ] && [ -z "$stop" ]; then  # the comparison, on the CPU's metrics alone
  if python3 tools/gpu_toy/compare.py "$dir/toy/cpu.jsonl" "$dir/toy/cpu.jsonl" "$dir/toy/cpu.jsonl" >"$logs/toy.log" 2>&1 &&
    ! grep -q '^FAIL' "$logs/toy.log"; then
    say toy "skipped (rehearsal: needs a GPU; the comparison ran on the CPU's metrics against themselves: ok)"
  else
    say toy "FAIL (the comparison failed on the CPU's metrics against themselves; see toy.log)"; failed=1
  fi
else
  step toy gpu toy
fi
step nccl gpu nccl

say total "$(($(date +%s) - start))s of ${budget}s"
# Every FAIL line of the logs into fails.txt; the first 30 (240 characters each) into
# the summary, so that it stays within what a terminal's tail shows.
grep -h '^FAIL' "$logs"/*.log >"$logs/fails.txt" 2>/dev/null
nfail=$(wc -l <"$logs/fails.txt")
if [ "$nfail" -gt 0 ]; then
  echo "FAIL lines of the logs ($nfail; all in fails.txt):"
  head -30 "$logs/fails.txt" | cut -c1-240
fi >>"$summary"
cp "$bundle/MANIFEST" "$logs/" 2>/dev/null
tar czf "$out/gpu_check.tgz" -C "$work" gpu_check
cp "$summary" "$out/summary.txt"
echo
cat "$summary"
exit $failed
