#!/usr/bin/env bash
# Learning rates calibrated per norm placement (docs/assumptions.md, "Learning-rate
# calibration"), then the study's arms at each placement's calibrated rate:
#   1. for each placement in turn: the joint arm of the set (configs/SET/joint-pre.json in
#      that placement) over a grid of peak learning rates and seeds, `normgrow sweep` into
#      OUT/joint-<placement>; the placement's calibrated peak, the sweep's best setting (the
#      lowest mean final validation CE among the settings all of whose seeds trained),
#      added to OUT/calibration.json; the grown arm (configs/SET/grow-pre.json in that
#      placement) at that peak, every seed: OUT/grow-<placement>;
#   2. with --controls, the set's three controls (Post-Norm students) at Post-Norm's
#      calibrated peak: OUT/control-<name>; with --hybrid, the hybrid growths (growth.
#      new_block_placement): Post-Norm blocks grown on a Pre-Norm prefix at Pre-Norm's
#      calibrated peak (OUT/hybrid-pre-post) and Pre-Norm blocks on a Post-Norm prefix at
#      Post-Norm's (OUT/hybrid-post-pre); a rate these need is this call's or, for a
#      placement not among --placements, the one OUT/calibration.json holds from an
#      earlier call (so placements calibrated over different grids, one call each, get
#      their controls and hybrids in a last call);
#   3. the report over the calibrated joint arms, the grown arms and the controls:
#      OUT/report (paired differences, the interaction per placement; pairs of arms at
#      different calibrated rates are paired as the same config in another placement).
# The warmup, the LR floor and every other setting are the set's own (one grid: peak LR).
# Needs the set's data and teacher: `make demo` (toy) or `make demo STUDY=large`
# (toy-large) makes them. Run it again after an interruption: the sweeps keep every
# finished run and resume stopped ones; a grid grown by values or seeds is completed.
#
# usage: tools/calibrate.sh [--set toy|toy-large | --configs DIR --depth L] [--placements P1,P2,...]
#            [--lrs A,B,...] [--seeds S1,S2,...] [--jobs J] [--threads N] [--backend NAME]
#            [--precision fp32|bf16] [--out DIR] [--controls] [--hybrid]
#   --jobs J --threads N: J runs at a time on N threads each (`normgrow sweep`'s; N
#             defaults to the cores shared out; a run's bits depend on N)
#   --configs DIR --depth L: another set of configs (DIR/joint-pre.json, DIR/grow-pre.json and,
#             for --controls, DIR/control-*.json) whose final depth is L, with its own data
#   defaults: --set toy --placements pre,post,sandwich,lns,mixln,deepnorm
#             --lrs 0.0015,0.003,0.006,0.012 (toy) or 0.0005,0.001,0.002,0.004 (toy-large)
#             --seeds 1,2,3 --jobs 1 --out runs/calibrate-SET
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NG_BIN:-$root/build/normgrow}
usage="usage: tools/calibrate.sh [--set toy|toy-large | --configs DIR --depth L] [--placements P,...] [--lrs A,...] [--seeds S,...] [--jobs J] [--threads N] [--backend NAME] [--precision P] [--out DIR] [--controls] [--hybrid]"
set_name=toy configs='' depth='' need=() placements=pre,post,sandwich,lns,mixln,deepnorm lrs='' seeds=1,2,3 jobs=1 out='' controls=0 hybrid=0 where=()
while [ $# -gt 0 ]; do
  case $1 in
    --controls) controls=1; shift; continue ;;
    --hybrid) hybrid=1; shift; continue ;;
  esac
  [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
  case $1 in
    --set) set_name=$2 ;;
    --configs) configs=$2 ;;
    --depth) depth=$2 ;;
    --placements) placements=$2 ;;
    --lrs) lrs=$2 ;;
    --seeds) seeds=$2 ;;
    --jobs) jobs=$2 ;;
    --threads | --backend | --precision) where+=("$1" "$2") ;;
    --out) out=$2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift 2
done
if [ -n "$configs" ]; then  # a set of its own: its configs name their data
  [[ $depth =~ ^[1-9][0-9]*$ ]] || { echo "calibrate: --configs needs --depth L (the final depth)" >&2; exit 2; }
  [ -n "$lrs" ] || { echo "calibrate: --configs needs --lrs" >&2; exit 2; }
  set_name=$(basename "$configs")
else  # the named sets' configs name their data and teacher from the repository's root
  [ -z "$out" ] || out=$(realpath -m "$out")
  cd "$root"
  case $set_name in
    toy) depth=6 data=runs/demo lrs=${lrs:-0.0015,0.003,0.006,0.012} ;;
    toy-large) depth=9 data=runs/demo-large lrs=${lrs:-0.0005,0.001,0.002,0.004} ;;
    *) echo "calibrate: --set $set_name: expected toy or toy-large" >&2; exit 2 ;;
  esac
  configs=configs/$set_name
  need=("$data/data/val.bin" "$data/teacher/final.safetensors")
fi
out=${out:-runs/calibrate-$set_name}
start=$(date +%s)
say() { printf '[calibrate %5ds] %s\n' $(($(date +%s) - start)) "$*"; }

# The --set options that make a config of the set the placement P (at the final depth).
placement_sets() {  # placement
  echo "--set model.norm_placement=$1"
  case $1 in
    pre | post | lns | sandwich) ;;
    # DeepNet's alpha (2 L)^(1/4) at the final depth, without its beta init (README)
    deepnorm) echo "--set model.deepnorm_alpha=$(python3 -c "print((2 * $depth) ** 0.25)") --set init.deepnorm_beta=false" ;;
    mixln) echo "--set model.mixln_post_layers=$((depth / 4))" ;;  # Mix-LN's quarter, rounded down
    *) echo "calibrate: --placements: unknown placement $1" >&2; return 1 ;;
  esac
}
sweep() {  # config out --set... : normgrow sweep with this script's seeds, jobs and backend
  local config=$1 to=$2
  shift 2
  "$bin" sweep "$config" --out "$to" "$@" --seeds "$seeds" --jobs "$jobs" "${where[@]}" >>"$out/calibrate.log" 2>&1 ||
    { echo "calibrate: the sweep into $to failed (its runs' train.log say why; $out/calibrate.log)" >&2; exit 1; }
}
best() {  # sweep-dir: the best setting's peak LR
  python3 - "$1/sweep.json" <<'EOF'
import json, sys
s = [x for x in json.load(open(sys.argv[1]))["settings"] if x["best"]]
if not s:
    sys.exit(f"calibrate: {sys.argv[1]}: no setting whose seeds all trained")
print(s[0]["setting"]["lr.peak"])
EOF
}
at() {  # sweep-dir LR: the directories of the runs of the setting at peak LR (those started)
  python3 - "$1/sweep.json" "$2" <<'EOF'
import json, os, sys
print("\n".join(r["dir"] for x in json.load(open(sys.argv[1]))["settings"] if x["setting"]["lr.peak"] == sys.argv[2]
                for r in x["seeds"] if os.path.exists(os.path.join(r["dir"], "config.json"))))
EOF
}

IFS=, read -ra ps <<<"$placements"
for p in "${ps[@]}"; do placement_sets "$p" >/dev/null || exit 2; done
# Whether placement P is calibrated by this call or by an earlier one into OUT.
is_calibrated() {  # placement
  [[ ,$placements, == *,$1,* ]] || python3 -c 'import json, sys
sys.exit(sys.argv[2] not in json.load(open(sys.argv[1])))' "$out/calibration.json" "$1" 2>/dev/null
}
[ "$controls" = 0 ] || is_calibrated post ||
  { echo "calibrate: --controls needs post among --placements or in $out/calibration.json" >&2; exit 2; }
[ "$hybrid" = 0 ] || { is_calibrated pre && is_calibrated post; } ||
  { echo "calibrate: --hybrid needs pre and post among --placements or in $out/calibration.json" >&2; exit 2; }
for f in "${need[@]}"; do
  [ -f "$f" ] || { echo "calibrate: $f is missing: make the set's data and teacher first" \
    "(make demo$([ "$set_name" = toy-large ] && echo ' STUDY=large'))" >&2; exit 1; }
done
mkdir -p "$out"
# OUT/calibration.json: each placement calibrated so far in OUT (by this call or an earlier
# one), its rate and the joint arm's CE there
write_calibration() {  # placements
  python3 - "$out" "$@" <<'EOF'
import json, os, sys
out, ps = sys.argv[1], sys.argv[2:]
path = os.path.join(out, "calibration.json")
cal = json.load(open(path)) if os.path.exists(path) else {}
for p in ps:
    sw = json.load(open(os.path.join(out, f"joint-{p}", "sweep.json")))
    b = next(s for s in sw["settings"] if s["best"])
    cal[p] = {"lr.peak": b["setting"]["lr.peak"], "mean_ce": b["mean_ce"], "std_ce": b["std_ce"],
              "seeds": b["trained"], "sweep": os.path.join(out, f"joint-{p}")}
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(cal, f, indent=1)
    f.write("\n")
os.replace(tmp, path)
EOF
}
# One placement after the other: its joint arm's sweep, its rate, its grown arm at that rate.
declare -A best
done=()
for p in "${ps[@]}"; do
  say "joint-$p: peak LR $lrs, seeds $seeds -> $out/joint-$p"
  # shellcheck disable=SC2046
  sweep "$configs/joint-pre.json" "$out/joint-$p" $(placement_sets "$p") --set "lr.peak=$lrs"
  best[$p]=$(best "$out/joint-$p")
  done+=("$p")
  write_calibration "${done[@]}"
  say "grow-$p at joint-$p's calibrated peak LR ${best[$p]} -> $out/grow-$p"
  # shellcheck disable=SC2046
  sweep "$configs/grow-pre.json" "$out/grow-$p" $(placement_sets "$p") --set "lr.peak=${best[$p]}"
done
# Every placement calibrated in OUT so far, this call's and an earlier call's, and its rate.
mapfile -t calibrated < <(python3 -c 'import json, sys
for p, c in json.load(open(sys.argv[1])).items(): print(p, c["lr.peak"])' "$out/calibration.json")
for pr in "${calibrated[@]}"; do best[${pr% *}]=${pr#* }; done
if [ "$controls" = 1 ]; then
  for c in control-extra-tokens control-layer-tokens control-lr-restarts; do
    say "$c at Post-Norm's peak LR ${best[post]} -> $out/$c"
    sweep "$configs/$c.json" "$out/$c" --set "lr.peak=${best[post]}"
  done
fi
if [ "$hybrid" = 1 ]; then
  for h in pre-post post-pre; do
    prefix=${h%-*} new=${h#*-}
    say "hybrid-$h: $new blocks grown on a $prefix prefix at peak LR ${best[$prefix]} -> $out/hybrid-$h"
    sweep "$configs/grow-pre.json" "$out/hybrid-$h" --set "model.norm_placement=$prefix" \
      --set "growth.new_block_placement=$new" --set "lr.peak=${best[$prefix]}"
  done
fi
# The report over every arm OUT holds at calibrated rates, this call's and an earlier
# call's: each calibrated placement's joint arm at its rate and its grown arm; the controls
# at Post-Norm's rate and the hybrids at their prefix's, where they were run.
dirs=()
add_runs() {  # sweep-dir LR: that setting's runs, where the sweep has finished
  [ -f "$1/sweep.json" ] && mapfile -t -O ${#dirs[@]} dirs < <(at "$1" "$2")
  return 0
}
for pr in "${calibrated[@]}"; do
  p=${pr% *}
  add_runs "$out/joint-$p" "${best[$p]}"
  add_runs "$out/grow-$p" "${best[$p]}"
done
if [ -n "${best[post]:-}" ]; then
  for c in control-extra-tokens control-layer-tokens control-lr-restarts; do add_runs "$out/$c" "${best[post]}"; done
fi
for h in pre-post post-pre; do
  [ -z "${best[${h%-*}]:-}" ] || add_runs "$out/hybrid-$h" "${best[${h%-*}]}"
done
"$bin" report "${dirs[@]}" --out "$out/report" --force >>"$out/calibrate.log" 2>&1 ||
  { echo "calibrate: the report failed ($out/calibrate.log)" >&2; exit 1; }
say "done: $out/calibration.json, $out/report/report.md"
