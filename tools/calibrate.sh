#!/usr/bin/env bash
# Learning rates calibrated per norm placement (docs/assumptions.md, "The learning rates,
# calibrated per placement"), then the study's arms at each placement's calibrated rate:
#   1. for each placement in turn: the joint arm of the set (configs/SET/joint-pre.json in
#      that placement) over a grid of peak learning rates and seeds, `normgrow sweep` into
#      OUT/joint-<placement>; the placement's calibrated peak, the sweep's best setting (the
#      lowest mean final validation CE among the settings all of whose seeds trained),
#      added to OUT/calibration.json; with --warmups, then the joint arm at that peak over
#      the warmups (OUT/warmup-<placement>; the set's own warmup is the peak sweep's run,
#      not run again), the placement's calibrated warmup the best of them by the same rule;
#      the grown arm (configs/SET/grow-pre.json in that placement) at that peak and warmup,
#      every seed: OUT/grow-<placement>;
#   2. with --controls, the set's three controls (Post-Norm students) at Post-Norm's
#      calibrated peak (and warmup): OUT/control-<name>; with --hybrid, the hybrid growths (growth.
#      new_block_placement): Post-Norm blocks grown on a Pre-Norm prefix at Pre-Norm's
#      calibrated peak (OUT/hybrid-pre-post) and Pre-Norm blocks on a Post-Norm prefix at
#      Post-Norm's (OUT/hybrid-post-pre); a rate these need is this call's or, for a
#      placement not among --placements, the one OUT/calibration.json holds from an
#      earlier call (so placements calibrated over different grids, one call each, get
#      their controls and hybrids in a last call); with --divergences, the grown arms of
#      Pre- and Post-Norm under the two other KD divergences, reverse KL and JSD (beta 0.5,
#      TRL's default), each at its placement's calibrated peak (and warmup):
#      OUT/divergence-<placement>-reverse-kl and -jsd; with --interventions, the grown
#      Pre-Norm arm with each intervention on the residual stream's scale (docs/design.md:
#      the stream rescaled at each growth, depth-scaled init of the new blocks, LayerScale
#      at 0.1) at Pre-Norm's calibrated peak (and warmup): OUT/intervention-<name>, and,
#      as LayerScale acts in every step and not only at a growth, the joint Pre-Norm arm
#      with it: OUT/intervention-joint-layer-scale;
#   3. the report over every arm OUT holds at calibrated settings:
#      OUT/report (paired differences, the interaction per placement; pairs of arms at
#      different calibrated rates are paired as the same config in another placement).
# The LR floor and every other setting are the set's own; so is the warmup without --warmups
# (one grid: peak LR; with it, a second grid over the warmup at the calibrated peak).
# Needs the set's data and teacher: `make demo` (toy) or `make demo STUDY=large`
# (toy-large) makes them. Run it again after an interruption: the sweeps keep every
# finished run and resume stopped ones; a grid grown by values or seeds is completed.
#
# usage: tools/calibrate.sh [--set toy|toy-large | --configs DIR --depth L] [--placements P1,P2,...]
#            [--lrs A,B,...] [--seeds S1,S2,...] [--jobs J] [--threads N] [--backend NAME]
#            [--precision fp32|bf16] [--out DIR] [--controls] [--hybrid] [--divergences]
#            [--interventions] [--warmups W1,W2,...]
#   --jobs J --threads N: J runs at a time on N threads each (`normgrow sweep`'s; N
#             defaults to the cores shared out; a run's bits depend on N)
#   --warmups: warmups in tokens (each stage's, lr.warmup_tokens) to calibrate at each
#             placement's calibrated peak; default none (the set's warmup kept)
#   --configs DIR --depth L: another set of configs (DIR/joint-pre.json, DIR/grow-pre.json and,
#             for --controls, DIR/control-*.json) whose final depth is L, with its own data
#   defaults: --set toy --placements pre,post,sandwich,lns,mixln,deepnorm
#             --lrs 0.0015,0.003,0.006,0.012 (toy) or 0.0005,0.001,0.002,0.004 (toy-large)
#             --seeds 1,2,3 --jobs 1 --out runs/calibrate-SET
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NG_BIN:-$root/build/normgrow}
usage="usage: tools/calibrate.sh [--set toy|toy-large | --configs DIR --depth L] [--placements P,...] [--lrs A,...] [--seeds S,...] [--jobs J] [--threads N] [--backend NAME] [--precision P] [--out DIR] [--controls] [--hybrid] [--divergences] [--interventions] [--warmups W,...]"
set_name=toy configs='' depth='' need=() placements=pre,post,sandwich,lns,mixln,deepnorm lrs='' warmups='' seeds=1,2,3 jobs=1 out='' controls=0 hybrid=0 divergences=0 interventions=0 where=()
while [ $# -gt 0 ]; do
  case $1 in
    --controls) controls=1; shift; continue ;;
    --hybrid) hybrid=1; shift; continue ;;
    --divergences) divergences=1; shift; continue ;;
    --interventions) interventions=1; shift; continue ;;
  esac
  [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
  case $1 in
    --set) set_name=$2 ;;
    --configs) configs=$2 ;;
    --depth) depth=$2 ;;
    --placements) placements=$2 ;;
    --lrs) lrs=$2 ;;
    --warmups) warmups=$2 ;;
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
# The set's own warmup (its joint arm's); the other --warmups are swept at the calibrated peak.
set_warmup=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["lr"]["warmup_tokens"])' \
  "$configs/joint-pre.json" 2>/dev/null) ||
  { echo "calibrate: $configs/joint-pre.json: no lr.warmup_tokens to calibrate around" >&2; exit 2; }
other_warmups=
IFS=, read -ra ws <<<"$warmups"
for w in "${ws[@]}"; do
  [[ $w =~ ^[0-9]+$ ]] || { echo "calibrate: --warmups: $w is not a number of tokens" >&2; exit 2; }
  [ $((10#$w)) = "$set_warmup" ] || other_warmups+=${other_warmups:+,}$((10#$w))
done
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
at() {  # sweep-dir LR WARMUP: the directories of the runs of the setting at peak LR and
        # warmup (the set's where the sweep does not set it; those started)
  python3 - "$1/sweep.json" "$2" "$3" "$set_warmup" <<'EOF'
import json, os, sys
path, peak, warmup, set_warmup = sys.argv[1:]
print("\n".join(r["dir"] for x in json.load(open(path))["settings"]
                if x["setting"]["lr.peak"] == peak and int(x["setting"].get("lr.warmup_tokens", set_warmup)) == int(warmup)
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
[ "$divergences" = 0 ] || { is_calibrated pre && is_calibrated post; } ||
  { echo "calibrate: --divergences needs pre and post among --placements or in $out/calibration.json" >&2; exit 2; }
[ "$interventions" = 0 ] || is_calibrated pre ||
  { echo "calibrate: --interventions needs pre among --placements or in $out/calibration.json" >&2; exit 2; }
for f in "${need[@]}"; do
  [ -f "$f" ] || { echo "calibrate: $f is missing: make the set's data and teacher first" \
    "(make demo$([ "$set_name" = toy-large ] && echo ' STUDY=large'))" >&2; exit 1; }
done
mkdir -p "$out"
# OUT/calibration.json: each placement calibrated so far in OUT (by this call or an earlier
# one), its rate, its warmup, the joint arm's CE there and the sweep that holds those runs.
# The warmup is the best, by the sweep's rule (report.stats.lowest_mean; a tie to the set's),
# of the set's (the peak sweep's best setting) and those OUT/warmup-P holds at that peak.
write_calibration() {  # placements
  # the report's Python, as `normgrow sweep` runs it (NG_PYTHON, else Debian's, where numpy is)
  local py=${NG_PYTHON:-/usr/bin/python3}
  [ -x "$py" ] || py=python3
  PYTHONPATH=$root/tools "$py" - "$out" "$set_warmup" "$@" <<'EOF'
import json, os, sys
from report.stats import lowest_mean
out, set_warmup, ps = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
path = os.path.join(out, "calibration.json")
cal = json.load(open(path)) if os.path.exists(path) else {}
for p in ps:
    joint = os.path.join(out, f"joint-{p}")
    b = next(s for s in json.load(open(os.path.join(joint, "sweep.json")))["settings"] if s["best"])
    peak = b["setting"]["lr.peak"]
    candidates = [(set_warmup, b, joint)]
    warm = os.path.join(out, f"warmup-{p}")
    if os.path.exists(os.path.join(warm, "sweep.json")):  # from this call or an earlier one
        candidates += [(int(s["setting"]["lr.warmup_tokens"]), s, warm)
                       for s in json.load(open(os.path.join(warm, "sweep.json")))["settings"]
                       if s["setting"]["lr.peak"] == peak]
    i = lowest_mean({i: [(r["val_ce"], None if r["trained"] else r["why_not"]) for r in s["seeds"]]
                     for i, (_, s, _) in enumerate(candidates)})
    w, s, sweep = candidates[i]
    cal[p] = {"lr.peak": peak, "lr.warmup_tokens": w, "mean_ce": s["mean_ce"], "std_ce": s["std_ce"],
              "seeds": s["trained"], "sweep": sweep}
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(cal, f, indent=1)
    f.write("\n")
os.replace(tmp, path)
EOF
}
# The placements OUT/calibration.json holds, in its order, each one's peak, warmup and the
# sweep that holds its joint runs there.
declare -A best warm from
read_calibration() {
  local p peak w sweep
  calibrated=()
  while read -r p peak w sweep; do
    calibrated+=("$p") best[$p]=$peak warm[$p]=$w from[$p]=$sweep
  done < <(python3 -c 'import json, sys
for p, c in json.load(open(sys.argv[1])).items():
    print(p, c["lr.peak"], c.get("lr.warmup_tokens", sys.argv[2]), c["sweep"])' "$out/calibration.json" "$set_warmup")
}
lr_sets() {  # placement: the --set options of its calibrated peak and, where not the set's, warmup
  echo "--set lr.peak=${best[$1]}"
  [ "${warm[$1]}" = "$set_warmup" ] || echo "--set lr.warmup_tokens=${warm[$1]}"
}
# One placement after the other: its joint arm's sweep over the peak, with --warmups the
# joint arm at that peak over the warmup, then its grown arm at the calibrated peak and warmup.
done=()
for p in "${ps[@]}"; do
  say "joint-$p: peak LR $lrs, seeds $seeds -> $out/joint-$p"
  # shellcheck disable=SC2046
  sweep "$configs/joint-pre.json" "$out/joint-$p" $(placement_sets "$p") --set "lr.peak=$lrs"
  peak=$(best "$out/joint-$p")
  if [ -n "$other_warmups" ]; then
    say "warmup-$p: at peak LR $peak, warmup tokens $other_warmups (the set's $set_warmup: joint-$p) -> $out/warmup-$p"
    # shellcheck disable=SC2046
    sweep "$configs/joint-pre.json" "$out/warmup-$p" $(placement_sets "$p") --set "lr.peak=$peak" \
      --set "lr.warmup_tokens=$other_warmups"
  fi
  done+=("$p")
  write_calibration "${done[@]}"
  read_calibration
  say "grow-$p at $p's calibrated peak LR ${best[$p]}, warmup ${warm[$p]} tokens -> $out/grow-$p"
  # shellcheck disable=SC2046
  sweep "$configs/grow-pre.json" "$out/grow-$p" $(placement_sets "$p") $(lr_sets "$p")
done
# Every placement calibrated in OUT so far, this call's and an earlier call's.
read_calibration
if [ "$controls" = 1 ]; then
  for c in control-extra-tokens control-layer-tokens control-lr-restarts; do
    say "$c at Post-Norm's peak LR ${best[post]}, warmup ${warm[post]} tokens -> $out/$c"
    # shellcheck disable=SC2046
    sweep "$configs/$c.json" "$out/$c" $(lr_sets post)
  done
fi
if [ "$hybrid" = 1 ]; then
  for h in pre-post post-pre; do
    prefix=${h%-*} new=${h#*-}
    say "hybrid-$h: $new blocks grown on a $prefix prefix at peak LR ${best[$prefix]}, warmup ${warm[$prefix]} tokens -> $out/hybrid-$h"
    # shellcheck disable=SC2046
    sweep "$configs/grow-pre.json" "$out/hybrid-$h" --set "model.norm_placement=$prefix" \
      --set "growth.new_block_placement=$new" $(lr_sets "$prefix")
  done
fi
# The other KD divergences (the set's is forward KL) and the interventions on the stream's
# scale, each by the group it trains into; a group's placement: its own or, for the
# interventions, Pre-Norm.
divergence_sets() {  # divergence-P-D: its --set options
  case $1 in
    *-reverse-kl) echo "--set loss.divergence=reverse_kl" ;;
    *-jsd) echo "--set loss.divergence=jsd --set loss.beta=0.5" ;;  # TRL's default beta
  esac
}
intervention_sets() {  # intervention-NAME: its --set options
  case ${1#intervention-} in
    rescale-stream) echo "--set growth.rescale_stream=true" ;;
    depth-scaled-init) echo "--set growth.depth_scaled_init=true" ;;
    layer-scale | joint-layer-scale) echo "--set model.layer_scale_init=0.1" ;;
  esac
}
divergence_placement() {  # divergence-P-D: P
  local p=${1#divergence-}
  echo "${p%%-*}"
}
divergence_groups=(divergence-pre-reverse-kl divergence-pre-jsd divergence-post-reverse-kl divergence-post-jsd)
intervention_groups=(intervention-rescale-stream intervention-depth-scaled-init intervention-layer-scale
                     intervention-joint-layer-scale)
if [ "$divergences" = 1 ]; then
  for g in "${divergence_groups[@]}"; do
    p=$(divergence_placement "$g")
    say "$g: grown $p at its peak LR ${best[$p]}, warmup ${warm[$p]} tokens -> $out/$g"
    # shellcheck disable=SC2046
    sweep "$configs/grow-pre.json" "$out/$g" $(placement_sets "$p") $(divergence_sets "$g") $(lr_sets "$p")
  done
fi
if [ "$interventions" = 1 ]; then
  for g in "${intervention_groups[@]}"; do
    arm=grow
    [[ $g != intervention-joint-* ]] || arm=joint
    say "$g: $arm pre at its peak LR ${best[pre]}, warmup ${warm[pre]} tokens -> $out/$g"
    # shellcheck disable=SC2046
    sweep "$configs/$arm-pre.json" "$out/$g" $(placement_sets pre) $(intervention_sets "$g") $(lr_sets pre)
  done
fi
# The report over every arm OUT holds at calibrated rates, this call's and an earlier
# call's: each calibrated placement's joint arm at its rate and warmup and its grown arm; the
# controls at Post-Norm's, the hybrids at their prefix's, the divergences at their
# placement's and the interventions at Pre-Norm's, where they were run.
dirs=()
add_runs() {  # sweep-dir placement: the runs of that placement's calibrated setting, where the sweep has finished
  [ -f "$1/sweep.json" ] && mapfile -t -O ${#dirs[@]} dirs < <(at "$1" "${best[$2]}" "${warm[$2]}")
  return 0
}
for p in "${calibrated[@]}"; do
  add_runs "${from[$p]}" "$p"
  add_runs "$out/grow-$p" "$p"
done
if [ -n "${best[post]:-}" ]; then
  for c in control-extra-tokens control-layer-tokens control-lr-restarts; do add_runs "$out/$c" post; done
fi
for h in pre-post post-pre; do
  [ -z "${best[${h%-*}]:-}" ] || add_runs "$out/hybrid-$h" "${h%-*}"
done
for g in "${divergence_groups[@]}"; do
  p=$(divergence_placement "$g")
  [ -z "${best[$p]:-}" ] || add_runs "$out/$g" "$p"
done
if [ -n "${best[pre]:-}" ]; then
  for g in "${intervention_groups[@]}"; do add_runs "$out/$g" pre; done
fi
"$bin" report "${dirs[@]}" --out "$out/report" --force >>"$out/calibrate.log" 2>&1 ||
  { echo "calibrate: the report failed ($out/calibrate.log)" >&2; exit 1; }
say "done: $out/calibration.json, $out/report/report.md"
