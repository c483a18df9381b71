#!/usr/bin/env bash
# The whole toy study on a laptop: fortune-cookie English, a byte-level
# teacher (pretrained once, reused), the seven student arms, diagnostics and
# the report. Usage: tools/demo.sh [--seeds N] [--jobs J] [--backend NAME] [--precision P] [--study S]
#   (make demo [SEEDS=N] [JOBS=J] [BACKEND=onednn] [PRECISION=bf16] [STUDY=S]; the teacher and
#   every arm run there; J arms at once, each on its share of the cores)
# --study placements: joint and grown students of every norm placement (pre, post,
#   lns, sandwich, deepnorm, mixln); --study divergences: grown pre and post
#   students under forward_kl, reverse_kl and jsd; --study interventions: grow-pre
#   with each intervention on the stream's scale (docs/design.md); --study hybrid:
#   grow-pre growing Post-Norm blocks and grow-post growing Pre-Norm blocks
#   (configs/toy/hybrid, growth.new_block_placement) beside grow-pre and grow-post. A study's new
#   arms are configs/toy/*.json or variants of them written into
#   runs/demo-<study>/configs, their runs and the study's report go to
#   runs/demo-<study>/; its arms that are the demo's own (joint-pre, joint-post,
#   grow-pre, grow-post: forward_kl is the default divergence) are the demo's runs
#   in runs/demo, run there when missing; data and teacher are the demo's.
# What an earlier demo made is reused: the data, the teacher, and each arm (a
# finished one kept, an interrupted one resumed); `rm -r runs/demo` starts anew.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seeds=1 jobs=1 where=() study=
usage="usage: tools/demo.sh [--seeds N] [--jobs J] [--backend NAME] [--precision fp32|bf16] [--study placements|divergences|interventions|hybrid|large]"
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --backend | --precision) where+=("$1" "$2"); shift 2 ;;
    --study) study=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[[ $seeds =~ ^[1-9][0-9]*$ ]] || { echo "demo: --seeds: expected a count >= 1" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "demo: --jobs: expected a count >= 1" >&2; exit 2; }
# J arms at once, each with its share of the cores (the teacher runs alone, on all).
[ "$jobs" -gt 1 ] && arm_threads=(--threads $(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 ))) || arm_threads=()

bin=build/normgrow demo=runs/demo out=runs/demo start=$(date +%s)
arms=(joint-pre joint-post grow-pre grow-post control-extra-tokens control-layer-tokens control-lr-restarts)
configs=configs/toy teacher_config=configs/toy/teacher.json corpus=fortunes
# variant BASE ARM EDIT...: configs/toy/BASE.json as arm ARM (name, run_dir) with
# each EDIT "text|replacement" made (the text must be there), into $configs/ARM.json.
variant() {
  local to=$configs/$2.json e
  sed "s|\"name\": \"[^\"]*\"|\"name\": \"$2\"|; s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$out/$2\"|" \
    "configs/toy/$1.json" >"$to.tmp"
  for e in "${@:3}"; do
    grep -qF "${e%%|*}" "$to.tmp" || { echo "demo: configs/toy/$1.json has no ${e%%|*}" >&2; exit 1; }
    sed -i "s|$e|" "$to.tmp"
  done
  mv "$to.tmp" "$to"
}
main_arms=" ${arms[*]} "  # the demo's arms: a study names them as they are
case $study in
  "") ;;
  placements)
    out=runs/demo-$study configs=runs/demo-$study/configs arms=()
    mkdir -p "$configs"
    for kind in joint grow; do
      for p in pre post lns sandwich deepnorm mixln; do
        # deepnorm: DeepNet's alpha (2 L_final)^(1/4) at the final depth 6, without DeepNet's
        # beta init (at this width it leaves DeepNorm on the unigram plateau: README);
        # mixln: Mix-LN's quarter of 6 blocks, rounded down
        y=()
        case $p in
          deepnorm) x=' "deepnorm_alpha": 1.8612097182041991,'
            y=('"freeze_embeddings": false|"freeze_embeddings": false, "deepnorm_beta": false') ;;
          mixln) x=' "mixln_post_layers": 1,' ;;
          pre | post) arms+=("$kind-$p"); continue ;;  # the demo's own
          *) x= ;;
        esac
        variant "$kind-pre" "$kind-$p" "\"norm_placement\": \"pre\",|\"norm_placement\": \"$p\",$x" "${y[@]}"
        arms+=("$kind-$p")
      done
    done ;;
  divergences)
    out=runs/demo-$study configs=runs/demo-$study/configs arms=()
    mkdir -p "$configs"
    for p in pre post; do
      arms+=("grow-$p")  # forward_kl
      for d in reverse_kl jsd; do
        x=; [ "$d" = jsd ] && x=', "beta": 0.5'  # TRL's default
        variant "grow-$p" "grow-$p-$d" "\"temperature\": 2.0|\"temperature\": 2.0, \"divergence\": \"$d\"$x"
        arms+=("grow-$p-$d")
      done
    done ;;
  interventions)
    out=runs/demo-$study
    arms=(grow-pre grow-post grow-pre-rescale-stream grow-pre-depth-scaled-init grow-pre-layer-scale) ;;
  hybrid)  # post blocks grown on a pre prefix, pre blocks on a post prefix
    out=runs/demo-$study configs=configs/toy/hybrid
    arms=(grow-pre grow-post grow-pre-post grow-post-pre) ;;
  large)  # its own data, teacher and arms: none is the demo's
    demo=runs/demo-$study out=runs/demo-$study configs=configs/toy-large main_arms=
    teacher_config=$configs/teacher.json corpus=gcide ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
say() { printf '[demo %4ds] %s\n' $(($(date +%s) - start)) "$*"; }

if [ "$corpus" = gcide ]; then tools/bootstrap.sh demo-large; else tools/bootstrap.sh demo; fi
mkdir -p "$out"
if [ ! -f "$demo/data/val.bin" ]; then
  case $corpus in
    gcide)  # GCIDE (1913 Webster and later additions), one entry per document
      say "data: GCIDE's 40 MB -> $demo/data"
      "$bin" data /usr/share/dictd/gcide.dict.dz --records-split "" --out "$demo/data" ;;
    fortunes)
      fortunes=/usr/share/games/fortunes
      # Every English text collection of the Debian fortunes (one fortune per document);
      # the pictures (art, ascii-art) and the non-English one are left out.
      files=$(find "$fortunes" -maxdepth 1 -type f ! -name '*.*' ! -name art ! -name ascii-art ! -name translate-me | sort)
      say "data: $(echo "$files" | wc -l) fortune collections -> $demo/data"
      # shellcheck disable=SC2086
      "$bin" data $files --records-split % --out "$demo/data" ;;
  esac
fi
if [ -f "$demo/teacher/checkpoint.safetensors" ] && [ ! -f "$demo/teacher/final.safetensors" ]; then
  say "teacher: continuing the interrupted pretraining in $demo/teacher"
  "$bin" train --resume "$demo/teacher" "${where[@]}"
elif [ ! -f "$demo/teacher/final.safetensors" ]; then
  say "teacher: pretraining (once; later demos reuse it)"
  "$bin" train "$teacher_config" --run-dir "$demo/teacher" --force "${where[@]}"
else
  say "teacher: reusing $demo/teacher/final.safetensors"
fi
# One arm: finish (or keep) an earlier run of it, else train it.
run_arm() {  # config seed dir
  if [ -f "$3/checkpoint.safetensors" ]; then  # from an earlier demo: finish it, or keep it
    say "arm $(basename "$3"): continuing $3 (a finished run is kept as it is)"
    "$bin" train --resume "$3" "${where[@]}" "${arm_threads[@]}"
  else
    say "arm $(basename "$3"), seed $2 -> $3"
    "$bin" train "$1" --seed "$2" --run-dir "$3" --force "${where[@]}" "${arm_threads[@]}"
  fi
}
# The run directory of an arm's seed, whatever the number of seeds (so that
# SEEDS=3 after a one-seed demo keeps its runs): ARM for seed 1, ARM-seedN for
# seed N > 1. Demos before this rule named seed 1 ARM-seed1 when they ran
# several seeds; such a run is taken where ARM holds none.
seed_dir() {  # where arm seed
  if [ "$3" -gt 1 ]; then
    echo "$1/$2-seed$3"
  elif [ ! -f "$1/$2/checkpoint.safetensors" ] && [ -f "$1/$2-seed1/checkpoint.safetensors" ]; then
    echo "$1/$2-seed1"
  else
    echo "$1/$2"
  fi
}
dirs=() running=0
for seed in $(seq 1 "$seeds"); do
  for arm in "${arms[@]}"; do
    where_to=$out config=$configs/$arm.json
    case $main_arms in *" $arm "*) where_to=$demo config=configs/toy/$arm.json ;; esac
    [ -f "$config" ] || config=configs/toy/$arm.json
    dir=$(seed_dir "$where_to" "$arm" "$seed")
    dirs+=("$dir")
    if [ "$jobs" -eq 1 ]; then
      run_arm "$config" "$seed" "$dir"
      continue
    fi
    if [ "$running" -eq "$jobs" ]; then
      wait -n || { echo "demo: an arm failed (above); stopping" >&2; exit 1; }
      running=$((running - 1))
    fi
    run_arm "$config" "$seed" "$dir" &
    running=$((running + 1))
  done
done
for _ in $(seq 1 "$running"); do wait -n || { echo "demo: an arm failed (above); stopping" >&2; exit 1; }; done
"$bin" report "${dirs[@]}" --out "$out/report" --force  # the demo's own report
say "done. The report: $root/$out/report/report.md"
