#!/usr/bin/env bash
# The whole toy study on a laptop: fortune-cookie English, a byte-level
# teacher (pretrained once, reused), the seven student arms, diagnostics and
# the report. Usage: tools/demo.sh [--seeds N] [--backend NAME] [--precision P] [--study S]
#   (make demo [SEEDS=N] [BACKEND=onednn] [PRECISION=bf16] [STUDY=S]; the teacher and every arm run there)
# --study interventions: grow-pre with each intervention on the stream's scale
# (docs/design.md) beside the grow-pre and grow-post baselines, into
# runs/demo-interventions with its own report (data and teacher: runs/demo's).
# What an earlier demo made is reused: the data, the teacher, and each arm (a
# finished one kept, an interrupted one resumed); `rm -r runs/demo` starts anew.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seeds=1 where=() study=main
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --backend | --precision) where+=("$1" "$2"); shift 2 ;;
    --study) study=$2; shift 2 ;;
    *) echo "usage: tools/demo.sh [--seeds N] [--backend NAME] [--precision fp32|bf16] [--study main|interventions]" >&2; exit 2 ;;
  esac
done
[[ $seeds =~ ^[1-9][0-9]*$ ]] || { echo "demo: --seeds: expected a count >= 1" >&2; exit 2; }

bin=build/normgrow out=runs/demo start=$(date +%s)
arms=(joint-pre joint-post grow-pre grow-post control-extra-tokens control-layer-tokens control-lr-restarts)
shared=$out  # the data and the teacher, which the toy configs name
case $study in
  main) ;;
  interventions)
    out=runs/demo-interventions
    arms=(grow-pre grow-post grow-pre-rescale-stream grow-pre-depth-scaled-init grow-pre-layer-scale) ;;
  *) echo "demo: --study: \"$study\" is not one of main, interventions" >&2; exit 2 ;;
esac
say() { printf '[demo %4ds] %s\n' $(($(date +%s) - start)) "$*"; }

tools/bootstrap.sh demo
mkdir -p "$out"
if [ ! -f "$shared/data/val.bin" ]; then
  fortunes=/usr/share/games/fortunes
  # Every English text collection of the Debian fortunes (one fortune per document);
  # the pictures (art, ascii-art) and the non-English one are left out.
  files=$(find "$fortunes" -maxdepth 1 -type f ! -name '*.*' ! -name art ! -name ascii-art ! -name translate-me | sort)
  say "data: $(echo "$files" | wc -l) fortune collections -> $shared/data"
  # shellcheck disable=SC2086
  "$bin" data $files --records-split % --out "$shared/data"
fi
if [ -f "$shared/teacher/checkpoint.safetensors" ] && [ ! -f "$shared/teacher/final.safetensors" ]; then
  say "teacher: continuing the interrupted pretraining in $shared/teacher"
  "$bin" train --resume "$shared/teacher" "${where[@]}"
elif [ ! -f "$shared/teacher/final.safetensors" ]; then
  say "teacher: pretraining (once; later demos reuse it)"
  "$bin" train configs/toy/teacher.json --run-dir "$shared/teacher" --force "${where[@]}"
else
  say "teacher: reusing $shared/teacher/final.safetensors"
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
