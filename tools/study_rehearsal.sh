#!/usr/bin/env bash
# The full-scale study's path rehearsed on this machine (`make study-rehearsal`): the
# launcher (tools/study.sh) with the rehearsal set (configs/rehearsal: toy shapes, a few
# minutes on 2 cores) on Debian's fortunes, a toy teacher pretrained and used as a Hugging
# Face directory, the seven arms under `mpirun -np 2`, the report. A fresh rehearsal stops
# the launcher (SIGTERM) while its third arm trains and starts it again: the finished
# arms must be kept as they are and the third resumed from its checkpoint. Then the same
# launcher on one process: every arm's final weights and validation CE must be the
# 2-rank run's within what data-parallel training differs by (tests/t_mpi.sh's bounds).
# What an earlier rehearsal made is kept and finished (stop and rerun it at will);
# `rm -r runs/rehearsal` starts anew.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD:-build}
bin=$build/normgrow cmp_bin=$build/tests/test_mpi out=runs/rehearsal
export NG_BIN=$bin OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PROGRESS_SECONDS=${PROGRESS_SECONDS:-10}
trap 'exit 130' INT TERM
start=$(date +%s) failed=0
say() { printf '[rehearsal %4ds] %s\n' $(($(date +%s) - start)) "$*"; }
check() {  # status name: "ok name" for status 0, else "FAIL name"
  if [ "$1" -eq 0 ]; then echo "ok $2"; else echo "FAIL $2"; failed=1; fi
}
tools/bootstrap.sh demo
command -v mpirun >/dev/null || { echo "rehearsal: mpirun is missing (tools/bootstrap.sh installs OpenMPI)" >&2; exit 1; }
mapfile -t corpus < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' ! -name art \
  ! -name ascii-art ! -name translate-me | sort)
study=(tools/study.sh --set rehearsal --records-split %)
for f in "${corpus[@]}"; do study+=(--corpus "$f"); done
arms=(joint-pre joint-post grow-pre grow-post control-extra-tokens control-layer-tokens control-lr-restarts)
mkdir -p "$out"

# The finished arms' final weights: path, inode and time written (a run done again
# writes a new file, even with the same bits).
finals() { for a in "${arms[@]}"; do [ -f "$1/$a/final.safetensors" ] && stat -c '%n %i %y' "$1/$a/final.safetensors"; done; true; }
two=$out/mpi
if [ ! -d "$two/joint-pre" ]; then
  say "2 ranks, stopped while its third arm trains: $two"
  "${study[@]}" --devices 2 --launch "mpirun --oversubscribe -np 2" --out "$two" >"$out/stopped.log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 3000); do  # up to 10 minutes
    grep -q '"event":"step","step":8,' "$two/grow-pre/metrics.jsonl" 2>/dev/null && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.2
  done
  kill -TERM "$launcher"
  rc=0
  wait "$launcher" || rc=$?
  tail -3 "$out/stopped.log"
  [ "$rc" -eq 130 ] && [ -f "$two/grow-pre/checkpoint.safetensors" ] && [ ! -f "$two/grow-pre/final.safetensors" ] &&
    [ -f "$two/joint-post/final.safetensors" ] && s=0 || s=1
  check "$s" "launcher stopped by SIGTERM during arm 3 (status $rc): arms 1-2 finished, arm 3 at a checkpoint"
fi
before=$(finals "$two")
say "2 ranks: $two (finished arms kept, an interrupted one resumed)"
t0=$(date +%s)
"${study[@]}" --devices 2 --launch "mpirun --oversubscribe -np 2" --out "$two" 2>&1 | tee "$out/mpi.log"
t_two=$(($(date +%s) - t0))
n_before=$(grep -c . <<<"$before" || true) kept=$(grep -c 'finished, kept' "$out/mpi.log" || true)
redone=$(comm -23 <(sort <<<"$before") <(finals "$two" | sort) | grep -c . || true)
[ -f "$two/report/report.md" ] && [ "$(finals "$two" | grep -c .)" -eq 7 ] && [ "$redone" -eq 0 ] &&
  [ "$kept" -eq "$n_before" ] && s=0 || s=1
check "$s" "2 ranks: all seven arms and the report; the $n_before arms finished before kept as they were ($redone written again)"
if grep -q 'arm 3/7 grow-pre: continuing from its checkpoint' "$out/mpi.log"; then
  echo "ok 2 ranks: the interrupted arm resumed from its checkpoint, not started anew"
fi

one=$out/one
say "1 process: $one"
t0=$(date +%s)
"${study[@]}" --devices 1 --out "$one" >"$out/one.log" 2>&1 || { tail "$out/one.log"; exit 1; }
t_one=$(($(date +%s) - t0))

# Every arm of 2 ranks against one process: final weights (largest |difference|) within
# t_mpi.sh's bound for a growing run, final validation CE within its bound for an evaluation.
final_ce() { grep '"event":"eval"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"val_ce":\([0-9.e-]*\).*/\1/'; }
printf '%-22s %14s %14s %10s %10s\n' arm "val CE 1 proc" "val CE 2 ranks" "|dCE|" "max|dw|"
for a in "${arms[@]}"; do
  c1=$(final_ce "$one/$a") c2=$(final_ce "$two/$a")
  dw=$("$cmp_bin" compare "$one/$a/final.safetensors" "$two/$a/final.safetensors" 2>/dev/null || echo 1e9)
  dce=$(awk -v a="$c1" -v b="$c2" 'BEGIN { d = a - b; printf "%.2g", d < 0 ? -d : d }')
  printf '%-22s %14.6f %14.6f %10s %10s\n' "$a" "$c1" "$c2" "$dce" "$dw"
  awk -v d="$dce" -v w="$dw" 'BEGIN { exit !(d <= 1e-5 && w <= 0.02) }' && s=0 || s=1
  check "$s" "$a: 2 ranks as one process (val CE within 1e-5, weights within 0.02)"
done
say "2 ranks: ${t_two}s for this invocation; 1 process: ${t_one}s; report: $two/report/report.md"
exit "$failed"
