#!/usr/bin/env bash
# How much does distilling from a top-k cache change the outcome? Runs one toy
# arm (configs/toy/grow-post.json) with the exact teacher and with top-k caches
# of that teacher, and prints the final validation CE of each and the
# difference. A cache run draws its batches from the cache's aligned windows,
# so its data order differs from the exact run's: a second exact run with
# another seed shows how much of a difference that alone makes.
# Needs the demo's data and teacher (make demo, or its first steps).
#   tools/topk_study.sh [K...]      (default: 8 32)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=build/normgrow out=runs/topk-study demo=runs/demo
ks=("$@")
[ ${#ks[@]} -gt 0 ] || ks=(8 32)
[ -f "$demo/teacher/final.safetensors" ] || { echo "topk-study: run make demo first (needs $demo/teacher)" >&2; exit 2; }
mkdir -p "$out"
arm=configs/toy/grow-post.json
tau=$(grep -o '"temperature": [0-9.]*' "$arm" | grep -o '[0-9.]*$')
seq=$(grep -o '"seq": [0-9]*' "$arm" | head -n 1 | grep -o '[0-9]*$')
final_ce() { grep '"event":"eval"' "$1/metrics.jsonl" | tail -n 1 | grep -o '"val_ce":[-0-9.e]*' | cut -d: -f2; }

diff() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.4f", a - b }'; }
"$bin" train "$arm" --run-dir "$out/exact" 2>/dev/null
"$bin" train "$arm" --run-dir "$out/exact-seed2" --seed 2 2>/dev/null
exact=$(final_ce "$out/exact")
printf '%-14s %-12s %s\n' "teacher" "final val CE" "difference from exact"
printf '%-14s %-12.4f\n' exact "$exact"
printf '%-14s %-12.4f %s\n' "exact, seed 2" "$(final_ce "$out/exact-seed2")" "$(diff "$(final_ce "$out/exact-seed2")" "$exact")"
for k in "${ks[@]}"; do
  for split in train val; do
    [ -f "$out/$split-k$k.topk" ] || "$bin" teacher-cache "$demo/teacher/final.safetensors" "$demo/data/$split.bin" \
      "$out/$split-k$k.topk" --k "$k" --temperature "$tau" --seq "$seq" >/dev/null
  done
  sed "s|\"teacher\": \"[^\"]*\",|\"teacher_cache\": {\"train\": \"$out/train-k$k.topk\", \"val\": \"$out/val-k$k.topk\"},|" \
    "$arm" >"$out/grow-post-k$k.json"
  "$bin" train "$out/grow-post-k$k.json" --run-dir "$out/k$k" 2>/dev/null
  ce=$(final_ce "$out/k$k")
  printf '%-14s %-12.4f %s\n' "top-$k cache" "$ce" "$(diff "$ce" "$exact")"
done
