#!/usr/bin/env bash
# How much does distilling from a top-k cache change the outcome? Trains one toy
# arm (configs/toy/grow-post.json) with the exact teacher and with top-k caches
# of that teacher, each over the seeds (`normgrow sweep`: runs/topk-study/exact
# and runs/topk-study/kK, each holding config/seedS), and prints the final
# validation CE of each, mean ± std over the seeds. The arm draws its batches by
# epoch (the shard's windows in a seeded order) and a cache holds those same
# windows, so a cache run of a seed trains on the exact teacher's run's batches
# from the same initialisation: the README's block (`make readme-numbers
# RUNS="topk=runs/topk-study"`) pairs them by seed and gives the difference's 95%
# interval, the cache's cost alone. Run again, it keeps every finished run
# and cache. Needs the demo's data and teacher (make demo, or its first steps).
#   tools/topk_study.sh [--seeds S1,S2,...] [--jobs J] [--threads N] [--backend NAME]
#                       [--precision fp32|bf16] [K...]      (defaults: seeds 1,2,3; K 8 32)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=build/normgrow out=runs/topk-study demo=runs/demo
usage="usage: tools/topk_study.sh [--seeds S1,S2,...] [--jobs J] [--threads N] [--backend NAME] [--precision P] [K...]"
seeds=1,2,3 sweep=() ks=()
while [ $# -gt 0 ]; do
  case $1 in
    --seeds | --jobs | --threads | --backend | --precision)
      [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
      [ "$1" = --seeds ] && seeds=$2 || sweep+=("$1" "$2")
      shift 2 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) [[ $1 =~ ^[1-9][0-9]*$ ]] || { echo "topk-study: K $1: expected a positive integer" >&2; exit 2; }
       ks+=("$1"); shift ;;
  esac
done
[ ${#ks[@]} -gt 0 ] || ks=(8 32)
[ -f "$demo/teacher/final.safetensors" ] || { echo "topk-study: run make demo first (needs $demo/teacher)" >&2; exit 2; }
mkdir -p "$out"
arm=configs/toy/grow-post.json
tau=$(grep -o '"temperature": [0-9.]*' "$arm" | grep -o '[0-9.]*$')
seq=$(grep -o '"seq": [0-9]*' "$arm" | head -n 1 | grep -o '[0-9]*$')
# the arm's sweep into OUT/NAME over the seeds; its line of the table
train() {  # config name label
  "$bin" sweep "$1" --out "$out/$2" --seeds "$seeds" "${sweep[@]}" >>"$out/topk-study.log" 2>&1 ||
    { echo "topk-study: the sweep into $out/$2 failed ($out/topk-study.log)" >&2; exit 1; }
  python3 - "$out/$2/sweep.json" "$3" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["settings"][0]
ce = "did not train" if not s["trained"] else "%.4f ± %.4f" % (s["mean_ce"], s["std_ce"] or 0.0)
print("%-14s %s (%d of %d seeds trained)" % (sys.argv[2], ce, s["trained"], s["runs"]))
EOF
}
printf '%-14s %s\n' "teacher" "final val CE, mean ± std over the seeds"
train "$arm" exact exact
for k in "${ks[@]}"; do
  for split in train val; do
    [ -f "$out/$split-k$k.topk" ] || "$bin" teacher-cache "$demo/teacher/final.safetensors" "$demo/data/$split.bin" \
      "$out/$split-k$k.topk" --k "$k" --temperature "$tau" --seq "$seq" >/dev/null
  done
  sed "s|\"teacher\": \"[^\"]*\",|\"teacher_cache\": {\"train\": \"$out/train-k$k.topk\", \"val\": \"$out/val-k$k.topk\"},|" \
    "$arm" >"$out/grow-post-k$k.json"
  train "$out/grow-post-k$k.json" "k$k" "top-$k cache"
done
echo "paired by seed, with intervals: make readme-numbers RUNS=\"topk=$out\""
