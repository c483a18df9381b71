#!/usr/bin/env bash
# tools/calibrate.sh from the outside, on a tiny distilling set (a tiny teacher; two
# seconds a run): two placements, a grid of two peak learning rates (one too large for
# Post-Norm), one seed; each placement's calibrated rate is the grid's best, its grown arm
# trains at that rate, the report pairs the four arms in its interaction table; a call for one of the
# placements with --hybrid trains none of the finished runs again, keeps the other's rate and
# arms in calibration.json and the report and grows each hybrid at its prefix's rate, the
# other placement's from calibration.json; with --warmups, each placement's warmup is the best at
# its peak and its grown arm trains at it; with --divergences and --interventions, the other
# divergences and the interventions train at their placement's rate and the README's blocks
# read them; a grid rate at which the run diverges is marked, and the calibration made from
# the others. Bad options are refused in one line.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export NG_BIN=$bin

"$bin" data /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 --records-split "" \
  --val-fraction 0.1 --out data >/dev/null || { echo "FAIL data: could not build shards"; exit 0; }
mkdir set
# a distilling set: joint depth 2 for 320 steps of 256 tokens; grown depth 1 then 2, 160
# steps each; its teacher of depth 2 pretrained for 320 steps
tiny() {  # name stages [teacher]: pretraining, or distilling from the teacher
  local mode='"mode": "pretrain"'
  [ -z "${3:-}" ] || mode="\"mode\": \"distill\", \"teacher\": \"$3\", \"loss\": {\"kd_weight\": 0.5, \"temperature\": 2.0}"
  cat <<JSON
{"name": "$1", "seed": 1, "run_dir": "runs/$1", $mode,
 "data": {"train": "$tmp/data/train.bin", "val": "$tmp/data/val.bin", "batch": 8, "seq": 32},
 "model": {"vocab_size": 257, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rope_theta": 10000,
   "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "norm_placement": "pre", "final_norm": true},
 "optim": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0},
 "lr": {"peak": 0.01, "floor": 1e-7, "warmup_tokens": 2048, "shape": "cosine"},
 "growth": {"position": "top", "init": "gate", "gate_steps": 8},
 "eval": {"every_steps": 80, "batches": 2}, "checkpoint_every_steps": 160,
 "stages": $2}
JSON
}
tiny teacher '[{"depth": 2, "tokens": 81920}]' >teacher.json
"$bin" train teacher.json --run-dir teacher --threads 1 >teacher.log 2>&1 || echo "FAIL calibrate: the tiny teacher did not train"
tiny joint-pre '[{"depth": 2, "tokens": 81920}]' "$tmp/teacher/final.safetensors" >set/joint-pre.json
tiny grow-pre '[{"depth": 1, "tokens": 40960}, {"depth": 2, "tokens": 40960}]' "$tmp/teacher/final.safetensors" \
  >set/grow-pre.json

cal=("$root/tools/calibrate.sh" --configs set --depth 2 --placements pre,post --lrs 3e-3,3e-2
     --seeds 1 --jobs 2 --out cal)
"${cal[@]}" >cal1.log 2>&1
rc=$?
if [ "$rc" -eq 0 ] && python3 - <<'EOF'; then
import json, sys
c = json.load(open("cal/calibration.json"))
sys.exit(not (set(c) == {"pre", "post"} and c["pre"]["lr.peak"] == "3e-2" and c["post"]["lr.peak"] == "3e-3"
              and all(v["seeds"] == 1 for v in c.values())))
EOF
  echo "ok calibrate: each placement calibrated: Pre-Norm to 3e-2, Post-Norm (on the plateau at 3e-2) to 3e-3"
else
  echo "FAIL calibrate: status $rc; $(tail -3 cal1.log | tr '\n' ' ') $(cat cal/calibration.json 2>/dev/null)"
fi
# A rate at which a run diverges is a result of the grid: the set with a weight decay of 1,
# whose rate 10 flips and grows the weights nine-fold a step until the CE passes its bound;
# the calibration is made from the other rate, the diverged run marked in the sweep's table.
mkdir set-wd1
for f in set/*.json; do sed 's/"weight_decay": 0.1/"weight_decay": 1.0/' "$f" >"set-wd1/${f#set/}"; done
"$root/tools/calibrate.sh" --configs set-wd1 --depth 2 --placements pre --lrs 3e-3,10 --seeds 1 --jobs 2 \
  --out calwd >calwd.log 2>&1
rc=$?
if [ "$rc" -eq 0 ] && tail -1 "calwd/joint-pre/model.norm_placement=pre,lr.peak=10/seed1/metrics.jsonl" 2>/dev/null |
     grep -q '^{"event":"diverged",' &&
   grep -q '^- model.norm_placement=pre,lr.peak=10, seed 1 (.*): diverged at step ' calwd/joint-pre/sweep.md &&
   python3 -c 'import json, sys; sys.exit(json.load(open("calwd/calibration.json"))["pre"]["lr.peak"] != "3e-3")' &&
   [ -f calwd/grow-pre/*/seed1/final.safetensors ]; then
  echo "ok calibrate over a rate at which the run diverges: marked in the sweep, the other rate calibrated, its grown arm trained"
else
  echo "FAIL calibrate over a rate at which the run diverges: status $rc; $(tail -2 calwd.log | tr '\n' ' ')"
fi
# every grown run at its placement's rate, in its placement
ok=1
for pl in pre:0.03 post:0.003; do
  p=${pl%:*}
  for s in 1; do
    f=$(ls cal/grow-$p/*/seed$s/config.json 2>/dev/null | head -1)
    python3 -c "import json, sys; c = json.load(open('$f'))
sys.exit(not (c['lr']['peak'] == ${pl#*:} and c['model']['norm_placement'] == '$p' and c['seed'] == $s
              and [st['depth'] for st in c['stages']] == [1, 2]))" 2>/dev/null || ok=0
  done
done
[ "$ok" = 1 ] && echo "ok calibrate: each grown arm trained at its placement's calibrated rate" ||
  echo "FAIL calibrate: a grown run is missing or not at its placement's calibrated rate"
# the report over the calibrated arms: one interaction row (grown post, grown pre, joint post,
# joint pre), the two placements at their own rates
if grep -A12 "^## Interaction of placement and growth" cal/report/report.md | grep -q "^| Post-Norm | .* | 1 |" &&
   grep -A12 "^## Interaction of placement and growth" cal/report/report.md | grep -q "lr.peak 0.003.*lr.peak 0.03"; then
  echo "ok calibrate: the report pairs the four calibrated arms in its interaction table, each placement at its rate"
else
  echo "FAIL calibrate: no interaction row at both rates in cal/report/report.md"
fi
# a call for one placement of the two, with --hybrid (and --divergences --interventions,
# checked below): calibration.json and the report keep the other's, the six runs stay as they
# are (Post-Norm's sweeps run again and keep theirs: the final weights are the same files),
# the hybrids train, its twelve sweeps on the --threads given (not the cores shared out: 2
# threads for one job on 2 cores)
before=$(stat -c '%n %i %Y' cal/*/*/seed*/final.safetensors | sort)
"$root/tools/calibrate.sh" --configs set --depth 2 --placements post --lrs 3e-3,3e-2 --seeds 1 \
  --jobs 1 --threads 1 --out cal --hybrid --divergences --interventions >cal3.log 2>&1
rc=$?
after=$(stat -c '%n %i %Y' cal/{joint,grow}-*/*/seed*/final.safetensors | sort)
if [ "$rc" -eq 0 ] && [ "$before" = "$after" ] && [ "$(grep -c . <<<"$before")" -eq 6 ] &&
   [ "$(grep -c ' 1 at a time on 1 thread each' cal/calibrate.log)" -eq 12 ] &&
   python3 -c 'import json, sys
c = json.load(open("cal/calibration.json"))
sys.exit(not (set(c) == {"pre", "post"} and c["pre"]["lr.peak"] == "3e-2"))' &&
   grep -A12 "^## Interaction of placement and growth" cal/report/report.md | grep -q "^| Post-Norm | .* | 1 |"; then
  echo "ok calibrate --placements post --hybrid after pre,post: the 6 finished runs kept as they are, Pre-Norm's rate and arms kept in calibration.json and the report"
else
  echo "FAIL calibrate --placements post --hybrid after pre,post: status $rc; $(cat cal/calibration.json 2>/dev/null | tr -d '\n')"
fi
# --hybrid: the other placement's blocks grown on each prefix, at the prefix's rate (Pre-Norm's
# from calibration.json)
ok=1
for h in pre-post:0.03 post-pre:0.003; do
  for s in 1; do
    f=$(ls cal/hybrid-${h%:*}/*/seed$s/config.json 2>/dev/null | head -1)
    python3 -c "import json, sys; c = json.load(open('$f')); prefix, new = '${h%:*}'.split('-')
sys.exit(not (c['lr']['peak'] == ${h#*:} and c['model']['norm_placement'] == prefix
              and c['growth']['new_block_placement'] == new and c['seed'] == $s))" 2>/dev/null || ok=0
  done
done
[ "$ok" = 1 ] && echo "ok calibrate --hybrid: post blocks on a pre prefix at 3e-2, pre blocks on a post prefix at 3e-3" ||
  echo "FAIL calibrate --hybrid: a hybrid run is missing or not at its prefix's rate"
# --warmups: each placement's joint arm at its calibrated peak over the warmups but the set's
# (2048: the peak sweep's run, not run again); calibration.json's warmup is the best of the
# three by the sweep's rule, worked out here from the two sweeps' files; the grown arm and the
# report's joint arm at that warmup
"$root/tools/calibrate.sh" --configs set --depth 2 --placements pre,post --lrs 3e-3 --warmups 256,2048,16384 \
  --seeds 1 --jobs 2 --out calw >calw.log 2>&1
rc=$?
if [ "$rc" -eq 0 ] && /usr/bin/python3 - <<'EOF'; then
import glob, json, sys
cal = json.load(open("calw/calibration.json"))
for p in ("pre", "post"):
    joint = [s for s in json.load(open(f"calw/joint-{p}/sweep.json"))["settings"] if s["best"]][0]
    warm = json.load(open(f"calw/warmup-{p}/sweep.json"))["settings"]
    if sorted(int(s["setting"]["lr.warmup_tokens"]) for s in warm) != [256, 16384]:
        sys.exit(f"{p}: warmup sweep {[s['setting'] for s in warm]}")
    means = [(joint["mean_ce"], 2048)] + [(s["mean_ce"], int(s["setting"]["lr.warmup_tokens"])) for s in warm
                                          if s["trained"] == s["runs"]]
    w = min(means, key=lambda m: m[0])[1]  # the first of equal means: the set's
    grown = [json.load(open(f)) for f in glob.glob(f"calw/grow-{p}/*/seed1/config.json")]
    report = open("calw/report/report.md").read()
    if not (cal[p]["lr.warmup_tokens"] == w and cal[p]["lr.peak"] == "3e-3" and len(grown) == 1
            and grown[0]["lr"]["warmup_tokens"] == w and (w == 2048) == (cal[p]["sweep"] == f"calw/joint-{p}")
            and (w == 2048 or f"joint-pre@model.norm_placement={p},lr.peak=3e-3,lr.warmup_tokens={w}" in report)):
        sys.exit(f"{p}: expected warmup {w} of {means}; calibration {cal[p]}, grown {[g['lr'] for g in grown]}")
EOF
  echo "ok calibrate --warmups: each placement's best warmup of 256, 2048 (the set's, not run again) and 16384 at its peak; grown arm and report at it ($(python3 -c 'import json; c = json.load(open("calw/calibration.json")); print(", ".join("%s %s" % (p, v["lr.warmup_tokens"]) for p, v in c.items()))'))"
else
  echo "FAIL calibrate --warmups: status $rc; $(tail -3 calw.log | tr '\n' ' ')"
fi
# --divergences --interventions (with the --hybrid call above): the grown arm of each
# placement under reverse KL and under JSD (beta 0.5) at its placement's calibrated rate, the
# grown Pre-Norm arm with each intervention, and the joint one with LayerScale, at Pre-Norm's;
# the README's blocks made from the directory as calibrate.sh leaves it
if [ "$rc" -eq 0 ] && python3 - <<'EOF'; then
import glob, json, sys
rate = {p: float(c["lr.peak"]) for p, c in json.load(open("cal/calibration.json")).items()}
if rate["pre"] == rate["post"]:  # then the check below could not tell the placements' rates apart
    sys.exit(f"both placements calibrated to {rate['pre']}")
def one(group):
    runs = [json.load(open(f)) for f in glob.glob(f"cal/{group}/*/seed1/config.json")]
    if len(runs) != 1:
        sys.exit(f"{group}: {len(runs)} runs")
    return runs[0]
for p in ("pre", "post"):
    for g, loss in ((f"divergence-{p}-reverse-kl", {"divergence": "reverse_kl"}),
                    (f"divergence-{p}-jsd", {"divergence": "jsd", "beta": 0.5})):
        c = one(g)
        if not (c["model"]["norm_placement"] == p and c["lr"]["peak"] == rate[p] and c["loss"] == {
                "kd_weight": 0.5, "temperature": 2.0, **loss} and [s["depth"] for s in c["stages"]] == [1, 2]):
            sys.exit(f"{g}: {c['model']['norm_placement']} {c['lr']} {c['loss']}")
for g, section, key, value, depths in (("intervention-rescale-stream", "growth", "rescale_stream", True, [1, 2]),
                                       ("intervention-depth-scaled-init", "growth", "depth_scaled_init", True, [1, 2]),
                                       ("intervention-layer-scale", "model", "layer_scale_init", 0.1, [1, 2]),
                                       ("intervention-joint-layer-scale", "model", "layer_scale_init", 0.1, [2])):
    c = one(g)
    if not (c[section].get(key) == value and c["model"]["norm_placement"] == "pre" and c["lr"]["peak"] == rate["pre"]
            and [s["depth"] for s in c["stages"]] == depths):
        sys.exit(f"{g}: {c[section]}")
EOF
  echo "ok calibrate --divergences --interventions: reverse KL and JSD (beta 0.5) grown at each placement's rate, the three interventions on grown Pre-Norm, LayerScale on joint Pre-Norm"
else
  echo "FAIL calibrate --divergences --interventions: status $rc; $(tail -3 cal3.log | tr '\n' ' ')"
fi
printf '<!-- numbers divergences d -->\n<!-- /numbers -->\n<!-- numbers interventions d -->\n<!-- /numbers -->\n' >blocks.md
if PYTHONPATH=$root/tools /usr/bin/python3 -m report.readme blocks.md --runs d=cal --out blocks2.md 2>readme.err &&
   [ "$(grep -c '^| \(Pre\|Post\)-Norm | \(forward KL\|reverse KL\|JSD\) |' blocks2.md)" -eq 6 ] && grep -q '^| LayerScale, 0.1 | ' blocks2.md &&
   grep -q '^| grown − joint (interaction) | | | ' blocks2.md &&
   [ "$(grep -c '^| \(forward KL\|reverse KL\|JSD\) | 1 |' blocks2.md)" -eq 3 ]; then
  echo "ok calibrate --divergences --interventions: the README's divergences and interventions blocks made from its directory"
else
  echo "FAIL calibrate --divergences --interventions: the README's blocks: $(cat readme.err) $(cat blocks2.md 2>/dev/null)"
fi
# bad options: one line, a non-zero exit, nothing made
for bad in "--placements pre,postnorm|unknown placement postnorm" "--set huge|--set huge: expected toy or toy-large" \
           "--configs set|--configs needs --depth L" "--placements pre --hybrid|--hybrid needs pre and post" \
           "--set toy --warmups 1e3|--warmups: 1e3 is not a number of tokens" \
           "--placements pre --divergences|--divergences needs pre and post" \
           "--placements post --interventions|--interventions needs pre among"; do
  # shellcheck disable=SC2086
  "$root/tools/calibrate.sh" ${bad%%|*} --lrs 1e-3 --out bad >/dev/null 2>bad.err
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$(wc -l <bad.err)" -eq 1 ] && grep -qF -- "${bad#*|}" bad.err && [ ! -e bad ]; then
    echo "ok calibrate ${bad%%|*}: refused ($(cat bad.err))"
  else
    echo "FAIL calibrate ${bad%%|*}: status $rc, stderr: $(cat bad.err)"
  fi
done
