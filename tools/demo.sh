#!/usr/bin/env bash
# The whole toy study on a laptop: fortune-cookie English, a byte-level
# teacher (pretrained once, reused), the seven student arms, diagnostics and
# the report. Usage: tools/demo.sh [--seeds N] [--backend NAME] [--precision P]
#   (make demo [SEEDS=N] [BACKEND=onednn] [PRECISION=bf16]; the teacher and every arm run there)
# What an earlier demo made is reused: the data, the teacher, and each arm (a
# finished one kept, an interrupted one resumed); `rm -r runs/demo` starts anew.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seeds=1 where=()
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --backend | --precision) where+=("$1" "$2"); shift 2 ;;
    *) echo "usage: tools/demo.sh [--seeds N] [--backend NAME] [--precision fp32|bf16]" >&2; exit 2 ;;
  esac
done
[[ $seeds =~ ^[1-9][0-9]*$ ]] || { echo "demo: --seeds: expected a count >= 1" >&2; exit 2; }

bin=build/normgrow out=runs/demo start=$(date +%s)
arms=(joint-pre joint-post grow-pre grow-post control-extra-tokens control-layer-tokens control-lr-restarts)
say() { printf '[demo %4ds] %s\n' $(($(date +%s) - start)) "$*"; }

tools/bootstrap.sh demo
mkdir -p "$out"
if [ ! -f "$out/data/val.bin" ]; then
  fortunes=/usr/share/games/fortunes
  # Every English text collection of the Debian fortunes (one fortune per document);
  # the pictures (art, ascii-art) and the non-English one are left out.
  files=$(find "$fortunes" -maxdepth 1 -type f ! -name '*.*' ! -name art ! -name ascii-art ! -name translate-me | sort)
  say "data: $(echo "$files" | wc -l) fortune collections -> $out/data"
  # shellcheck disable=SC2086
  "$bin" data $files --records-split % --out "$out/data"
fi
if [ -f "$out/teacher/checkpoint.safetensors" ] && [ ! -f "$out/teacher/final.safetensors" ]; then
  say "teacher: continuing the interrupted pretraining in $out/teacher"
  "$bin" train --resume "$out/teacher" "${where[@]}"
elif [ ! -f "$out/teacher/final.safetensors" ]; then
  say "teacher: pretraining (once; later demos reuse it)"
  "$bin" train configs/toy/teacher.json --run-dir "$out/teacher" --force "${where[@]}"
else
  say "teacher: reusing $out/teacher/final.safetensors"
fi
dirs=()
for seed in $(seq 1 "$seeds"); do
  for arm in "${arms[@]}"; do
    dir=$out/$arm
    [ "$seeds" -gt 1 ] && dir=$out/$arm-seed$seed
    if [ -f "$dir/checkpoint.safetensors" ]; then  # from an earlier demo: finish it, or keep it
      say "arm $arm, seed $seed: continuing $dir (a finished run is kept as it is)"
      "$bin" train --resume "$dir" "${where[@]}"
    else
      say "arm $arm, seed $seed -> $dir"
      "$bin" train "configs/toy/$arm.json" --seed "$seed" --run-dir "$dir" --force "${where[@]}"
    fi
    dirs+=("$dir")
  done
done
"$bin" report "${dirs[@]}" --out "$out/report" --force  # the demo's own report
say "done. The report: $root/$out/report/report.md"
