#!/usr/bin/env bash
# `make fuzz`: builds normgrow's readers with clang, libFuzzer, ASan and UBSan
# into build/fuzz, makes seed corpora from real files (tests/fuzz/seeds.sh),
# runs every target for SECONDS seconds, and prints executions and coverage per
# target (also in build/fuzz/summary.txt). One allocation of more than 128 MB
# is a finding: no reader allocates by what a file declares before checking it. Inputs that crash are left in
# build/fuzz/crashes; keep each, minimized, in tests/fuzz/regress/<target>/
# with its fix, and `make test` replays it (tests/test_fuzz_replay.c).
#   tests/fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors safetensors_sized hf model_config run_config shard manifest tokenizer tokenizer_hf topk checkpoint rundir)
out=build/fuzz
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
make -s -j2 build/normgrow
# (-Wno-pass-failed: at -O1 under the sanitizers clang may not vectorize an `omp simd` loop)
# The readers are the core's, with the CPU backend for the models they load: the
# targets link those two libraries and no registry, so no oneDNN and no CUDA,
# whatever ONEDNN and CUDA say (docs/design.md "Layers").
make -s -j2 BUILD=$out CC=clang OPT="-O1" SAN="$san -fsanitize=fuzzer-no-link -Wno-pass-failed" \
  $out/libnormgrow_cpu.a $out/libnormgrow.a
cflags="-Iinclude -I/usr/include/x86_64-linux-gnu/openblas-openmp -I/usr/include/cjson -O1 -g -std=c11
  -D_GNU_SOURCE -Wall -Wextra -Werror -fopenmp -DNG_FUZZ_LIBFUZZER $san -fsanitize=fuzzer"
libs="-L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lcjson -lm -lpcre2-8 -lutf8proc -lz"  # as the Makefile's LDLIBS, less oneDNN's
libs+=" $(pkg-config --libs ompi-c 2>/dev/null || echo -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi)"  # ref/comm_mpi.c
for t in "${targets[@]}"; do
  # shellcheck disable=SC2086
  clang $cflags "tests/fuzz/fuzz_$t.c" $out/libnormgrow_cpu.a $out/libnormgrow.a $libs -o "$out/fuzz_$t"
done
tests/fuzz/seeds.sh build/normgrow "$out/seeds"
mkdir -p "$out/crashes"
summary=$out/summary.txt
printf '%-18s %12s %10s %8s %8s %s\n' target executions exec/s cov ft result >"$summary"
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  log=$out/fuzz_$t.log
  rc=0
  mkdir -p "$out/scratch/$t"
  NG_FUZZ_DIR="$root/$out/scratch/$t" OMP_NUM_THREADS=1 "$out/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 -malloc_limit_mb=128 \
    -timeout=20 -dict=tests/fuzz/json.dict -artifact_prefix="$out/crashes/$t-" \
    "$out/corpus/$t" "$out/seeds/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  result=$([ "$rc" -eq 0 ] && echo clean || echo "FINDING (status $rc, see $log)")
  printf '%-18s %12s %10s %8s %8s %s\n' "$t" "${execs:-0}" "${rate:-0}" "${cov:-0}" "${ft:-0}" "$result" >>"$summary"
done
cat "$summary"
! grep -q FINDING "$summary"
