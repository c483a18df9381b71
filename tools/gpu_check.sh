#!/usr/bin/env bash
# normgrow gpu_check: what the CUDA backend must show on one GPU, from a fresh
# copy of the tree, in at most 8 minutes. Usage: tools/gpu_check.sh OUTDIR
#
# Steps (each logs to OUTDIR/STEP.log; OUTDIR/summary.txt gets one line per
# step: "ok", "FAIL (why)" or "skipped (why)"):
#   env          nvidia-smi, nvcc and driver versions
#   build        make with the CUDA backend (no network: tools/bootstrap.sh only
#                checks that the Debian packages are there)
#   op_test      build/tests/test_cuda: every op of the table on cuda fp32 and
#                bf16 against the CPU reference, at odd shapes (NG_REQUIRE_GPU:
#                a skip is a failure)
#   op_table     build/tests/test_backends: the generic op test over every
#                backend of the registry, cuda included (n_norm, widen_bf16)
#   version      `normgrow --version` lists cuda; kernels as cuda names them
#   golden_fp32  golden-check --backend cuda on every case (fp32 contract)
#   golden_bf16  the same with --precision bf16 (bf16 contract)
#   bench_block  build/bench_cuda: one block forward + backward at the toy-medium
#                and the paper shape, TFLOP/s, MFU and per-op times
#   bench_step   normgrow bench --backend cuda, fp32 and bf16
#   toy_arm      a short toy pretraining arm on cpu, cuda (twice) and cuda bf16:
#                fp32 step losses within 1e-3 nats of the CPU's at every step,
#                bf16's final loss within 0.01 nats, the two cuda runs' final
#                checkpoints identical
#   nccl         under mpirun -np 1 (one GPU): build/tests/test_mpi ranks 1 cuda
#                (the communicator bound to cuda is NCCL; every collective on
#                device and host buffers; the ZeRO-1 step through NCCL against
#                AdamW), then the toy arm trained by one NCCL rank: its run says
#                comm "nccl", its step losses within 1e-3 nats of the CPU's, its
#                final checkpoint identical to the plain cuda run's (one rank
#                takes no ZeRO step)
#   crosscheck   tools/crosscheck_torch.py with golden-eval --backend cuda
#                (skipped, saying so, when python3 has no torch)
# Exits non-zero when a step failed (skipped steps do not fail it).
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: tools/gpu_check.sh OUTDIR" >&2; exit 2; }
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
bin=build/normgrow
start=$(date +%s) deadline=$(($(date +%s) + 480)) failed=0
: >"$out/summary.txt"

note() { printf '%-12s %s\n' "$1" "$2" | tee -a "$out/summary.txt"; }

# run NAME LIMIT_S CMD...: runs CMD under the smaller of LIMIT_S and the time
# left, logging to OUTDIR/NAME.log; a non-zero status or a FAIL line fails it.
run() {
  local name=$1 limit=$2 left rc
  shift 2
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt 15 ]; then
    note "$name" "FAIL (not run: the 8-minute budget is spent)"; failed=1; return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0
  t0=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  local took=$(($(date +%s) - t0))
  if [ "$rc" -eq 124 ]; then
    note "$name" "FAIL (timed out after ${limit}s; see $name.log)"; failed=1; return 1
  elif [ "$rc" -ne 0 ] || grep -q '^FAIL ' "$out/$name.log"; then
    note "$name" "FAIL (status $rc, ${took}s; see $name.log)"; failed=1; return 1
  fi
  note "$name" "ok (${took}s)"
}

{ nvidia-smi; "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version; uname -a; nproc; } >"$out/env.log" 2>&1
note env "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found')"

run build 240 make -j"$(nproc)" CUDA=1 all build/tests/test_cuda build/tests/test_backends build/tests/test_mpi || {
  echo "gpu_check: the build failed; nothing else can run (see $out/build.log)" >&2; exit 1; }

run op_test 90 env NG_REQUIRE_GPU=1 build/tests/test_cuda
run op_table 90 env NG_REQUIRE_GPU=1 build/tests/test_backends

# shellcheck disable=SC2317  # run through `bash -c version_check`
version_check() {
  "$bin" --version || return 1
  if "$bin" --version | grep -Eq '^backends:.*\bcuda\b'; then echo "ok --version lists cuda"
  else echo "FAIL --version does not list cuda"; fi
}
export -f version_check
export out bin
run version 15 bash -c version_check

run golden_fp32 90 "$bin" golden-check --backend cuda golden/*.safetensors
run golden_bf16 90 "$bin" golden-check --backend cuda --precision bf16 golden/*.safetensors

run bench_block 100 build/bench_cuda --reps 5
# shellcheck disable=SC2317  # run through `bash -c bench_step`
bench_step() {
  "$bin" bench --backend cuda --steps 5 && "$bin" bench --backend cuda --precision bf16 --steps 5
}
export -f bench_step
run bench_step 90 bash -c bench_step

# shellcheck disable=SC2317  # run through `bash -c toy_arm`
# A short pretraining arm (the toy teacher's shape, 4 layers, 64 steps) on text
# from the tree.
toy_arm() {
  local d=$out/toy cfg=$out/toy/arm.json
  mkdir -p "$d"
  "$bin" data README.md docs/*.md ref/*.c include/normgrow/*.h --val-fraction 0.25 --out "$d/data" || return 1
  python3 - "$d" >"$cfg" <<'PY' || return 1
import json, sys
d = sys.argv[1]
c = json.load(open("configs/toy/teacher.json"))
c["data"]["train"], c["data"]["val"] = d + "/data/train.bin", d + "/data/val.bin"
c["stages"] = [{"depth": 4, "tokens": 131072}]
c["model"]["num_hidden_layers"] = 4
c["lr"]["warmup_tokens"] = 16384
c["eval"] = {"every_steps": 32, "batches": 4}
c["checkpoint_every_steps"] = 64
print(json.dumps(c, indent=1))
PY
  OMP_NUM_THREADS=$(nproc) "$bin" train "$cfg" --run-dir "$d/cpu" || return 1
  "$bin" train "$cfg" --run-dir "$d/cuda" --backend cuda || return 1
  "$bin" train "$cfg" --run-dir "$d/cuda2" --backend cuda || return 1
  if cmp -s "$d/cuda/final.safetensors" "$d/cuda2/final.safetensors"; then
    echo "ok two cuda runs write identical checkpoints"
  else
    echo "FAIL two cuda runs write different checkpoints"
  fi
  "$bin" train "$cfg" --run-dir "$d/bf16" --backend cuda --precision bf16 || return 1
  python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    return [r["loss"] for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if r.get("event") == "step"]
cpu, gpu, bf = losses("cpu"), losses("cuda"), losses("bf16")
ok = len(cpu) == len(gpu) == len(bf) and len(cpu) > 0
worst = max((abs(a - b) for a, b in zip(cpu, gpu)), default=float("inf"))
end = abs(bf[-1] - cpu[-1]) if ok else float("inf")
print(f"steps {len(cpu)}; fp32: max |loss cuda - cpu| {worst:.3g} nats (bound 1e-3); "
      f"bf16: final loss {bf[-1] if bf else float('nan'):.4f} vs cpu {cpu[-1] if cpu else float('nan'):.4f}, "
      f"difference {end:.3g} nats (bound 0.01)")
print("ok toy arm" if ok and worst <= 1e-3 and end <= 0.01 else "FAIL toy arm")
PY
}
export -f toy_arm
run toy_arm 200 bash -c toy_arm

# shellcheck disable=SC2317  # run through `bash -c nccl_check`
nccl_check() {
  local d=$out/toy
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpirun -np 1 build/tests/test_mpi ranks 1 cuda || return 1
  [ -f "$d/cuda/final.safetensors" ] || { echo "FAIL nccl: the toy arm's cuda run is missing"; return 1; }
  mpirun -np 1 "$bin" train "$d/arm.json" --run-dir "$d/nccl" --backend cuda || return 1
  if grep -q '"comm":"nccl"' "$d/nccl/backend.jsonl"; then echo "ok nccl: the run's communicator is nccl"
  else echo "FAIL nccl: backend.jsonl does not name nccl: $(head -1 "$d/nccl/backend.jsonl")"; fi
  if cmp -s "$d/cuda/final.safetensors" "$d/nccl/final.safetensors"; then
    echo "ok nccl: one NCCL rank writes the plain cuda run's final checkpoint"
  else
    echo "FAIL nccl: one NCCL rank and the plain cuda run end differently"
  fi
  python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    return [r["loss"] for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if r.get("event") == "step"]
cpu, nccl = losses("cpu"), losses("nccl")
worst = max((abs(a - b) for a, b in zip(cpu, nccl)), default=float("inf"))
print(f"steps {len(nccl)}; max |loss nccl - cpu| {worst:.3g} nats (bound 1e-3)")
print("ok nccl toy arm" if len(cpu) == len(nccl) > 0 and worst <= 1e-3 else "FAIL nccl toy arm")
PY
}
export -f nccl_check
run nccl 120 bash -c nccl_check

if ! python3 -c 'import torch' 2>/dev/null; then
  note crosscheck "skipped (python3 has no torch: install python3-torch to run it)"
else
  run crosscheck 120 python3 tools/crosscheck_torch.py --cases 20 --seed 1 --bin "$bin" \
    --eval-args "--backend cuda"
fi

note total "$(($(date +%s) - start))s; logs in $out"
exit "$failed"
