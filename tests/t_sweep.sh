#!/usr/bin/env bash
# train --set and --check, and normgrow sweep from the outside, on a tiny
# pretraining config (a second a run):
# a grid of 2 settings x 2 seeds stopped part-way, resumed, then kept; its table
# holds each run's final validation CE, the seeds' mean and std, and marks the
# setting that stays on the unigram plateau; a run equals `normgrow train` of its
# setting and seed bit for bit; a setting that diverges is marked and kept, the
# sweep's status 0; a bad --set stops the sweep before it trains, with one line
# and a non-zero exit.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

"$bin" data /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 --records-split "" \
  --val-fraction 0.1 --out data >/dev/null || { echo "FAIL data: could not build shards"; exit 0; }
# 320 steps of 256 tokens; evaluated and checkpointed every 80 steps
cat >tiny.json <<'JSON'
{"name": "tiny", "seed": 1, "run_dir": "runs/tiny", "mode": "pretrain",
 "data": {"train": "data/train.bin", "val": "data/val.bin", "batch": 8, "seq": 32},
 "model": {"vocab_size": 257, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rope_theta": 10000,
   "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "norm_placement": "pre", "final_norm": true},
 "optim": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0},
 "lr": {"peak": 0.01, "floor": 1e-7, "warmup_tokens": 2048, "shape": "cosine"},
 "eval": {"every_steps": 80, "batches": 2}, "checkpoint_every_steps": 80,
 "stages": [{"depth": 2, "tokens": 81920}]}
JSON
# 0. train --set, seen through --check: each key replaced (a number, an array index, a
# string as it is, a JSON array), the config resolved (defaults explicit); a bad key,
# value or path refused in one line naming the config as changed by --set.
"$bin" train tiny.json --set lr.peak=2e-3 --set stages.0.tokens=2560 --set model.norm_placement=post \
  --set 'structural_tokens=[10, 32]' --check >check.json 2>check.err
if [ $? -eq 0 ] && [ ! -s check.err ] && python3 -c "import json, sys; c = json.load(open('check.json'))
sys.exit(not (c['lr']['peak'] == 2e-3 and c['stages'][0]['tokens'] == 2560 and c['model']['norm_placement'] == 'post'
              and c['structural_tokens'] == [10, 32] and c['data']['micro_batch'] == 8 and c['seed'] == 1))"; then
  echo "ok train --set ... --check: the four keys replaced, the resolved config printed"
else
  echo "FAIL train --set ... --check: $(cat check.err) $(head -c 300 check.json)"
fi
for bad in 'lr.peek=1|lr: unknown key "peek"' 'lr.peak=fast|lr.peak: expected a number' \
           'stages.1.tokens=8|stages has 1 entry: "1" is not the index of one' \
           'lr.peak.x=1|lr.peak is a value, not an object' 'lr..peak=1|an empty part in the key' \
           'lr.peak|expected KEY=VALUE'; do
  "$bin" train tiny.json --set "${bad%%|*}" --check >/dev/null 2>check.err
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <check.err)" -eq 1 ] &&
     grep -qF "tiny.json (with --set): " check.err && grep -qF -- "${bad#*|}" check.err; then
    echo "ok train --set ${bad%%|*}: refused ($(cat check.err))"
  else
    echo "FAIL train --set ${bad%%|*}: status $rc, stderr: $(cat check.err)"
  fi
done

# lr.peak 1e-6 leaves the model near its initial CE (ln 257), above the unigram plateau
grid=(tiny.json --out sw --set lr.peak=1e-6,3e-2 --seeds 1,2 --jobs 2)
runs="sw/lr.peak=1e-6/seed1 sw/lr.peak=1e-6/seed2 sw/lr.peak=3e-2/seed1 sw/lr.peak=3e-2/seed2"
# python3 -c CODE: reads sw/sweep.json as t; its exit status
table() { python3 -c "import json, sys; t = json.load(open('sw/sweep.json')); $1"; }

# 1. Stopped at step 160 of 320 (as a kill after a checkpoint would): every run unfinished.
"$bin" --threads 1 sweep "${grid[@]}" --stop-after 160 >first.out 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c ': starting (' first.out)" -eq 4 ] &&
   table "sys.exit(not all(not r['trained'] and r['why_not'].startswith('unfinished') for s in t['settings'] for r in s['seeds']))"; then
  echo "ok sweep stopped at step 160: 4 runs started, each marked unfinished in sweep.json"
else
  echo "FAIL sweep stopped at step 160: status $rc: $(tail -3 first.out)"
fi

# 2. Run again: each stopped run resumes from its checkpoint and ends.
"$bin" --threads 1 sweep "${grid[@]}" >second.out 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c ': resuming from its checkpoint (' second.out)" -eq 4 ] &&
   ! grep -q ': starting (' second.out; then
  echo "ok sweep run again: the 4 stopped runs resumed, none started anew"
else
  echo "FAIL sweep run again: status $rc: $(tail -3 second.out)"
fi
named=0
for d in $runs; do  # each run named after its setting, with its seed
  python3 -c "import json, sys; c = json.load(open('$d/config.json'))
sys.exit(c['name'] != 'tiny@' + '$d'.split('/')[1] or 'seed%d' % c['seed'] != '$d'.split('/')[2])" &&
    named=$((named + 1))
done
[ "$named" -eq 4 ] && echo "ok each run's config.json: name tiny@<setting>, the seed of its directory" ||
  echo "FAIL only $named of 4 runs' config.json name their setting and seed"
# A sweep's run is `normgrow train` of its setting and seed; stopped and resumed, it ends
# bit-identical to one trained straight through (exact: the same ops in the same order, on
# one thread each: the sweep passes --threads on to its runs).
"$bin" --threads 1 train tiny.json --set lr.peak=3e-2 --seed 2 --run-dir straight >/dev/null 2>&1
if cmp -s straight/final.safetensors "sw/lr.peak=3e-2/seed2/final.safetensors"; then
  echo "ok lr.peak=3e-2 seed 2: stopped and resumed by the sweep, bit-identical to normgrow train --set lr.peak=3e-2 --seed 2"
else
  echo "FAIL lr.peak=3e-2 seed 2 of the sweep differs from normgrow train --set lr.peak=3e-2 --seed 2"
fi

# 3. The table against the runs' own metrics.jsonl (their last val_ce), computed here.
last_ce() { grep '"event":"eval"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"val_ce":\([-0-9.e+]*\).*/\1/'; }
a=$(last_ce "sw/lr.peak=3e-2/seed1") b=$(last_ce "sw/lr.peak=3e-2/seed2")
expect=$(python3 -c "import statistics as s; print('%.6f %.6f' % (s.mean([$a, $b]), s.stdev([$a, $b])))")
got=$(table "s = t['settings'][1]; print('%.6f %.6f' % (s['mean_ce'], s['std_ce']))")
if [ "$got" = "$expect" ] && table "
s0, s1 = t['settings']
ok = [s['setting'] for s in t['settings']] == [{'lr.peak': '1e-6'}, {'lr.peak': '3e-2'}]
ok &= s1['trained'] == 2 and s1['best'] and [r['val_ce'] for r in s1['seeds']] == [$a, $b]
ok &= s0['trained'] == 0 and s0['mean_ce'] is None and not s0['best']
ok &= all(r['why_not'].startswith('at the unigram plateau') for r in s0['seeds'])
sys.exit(not ok)"; then
  echo "ok sweep.json: lr.peak=3e-2 mean $got (seeds $a, $b) and best; lr.peak=1e-6 at the unigram plateau, no mean"
else
  echo "FAIL sweep.json: mean and std $got, expected $expect from the runs' metrics: $(cat sw/sweep.json | head -c 600)"
fi
if grep -q '^| `3e-2` | 2/2 | ' sw/sweep.md && grep -q '^| `1e-6` | 0/2 | — | ' sw/sweep.md &&
   [ "$(grep -c '^- lr.peak=1e-6, seed [12] (.*): at the unigram plateau' sw/sweep.md)" -eq 2 ]; then
  echo "ok sweep.md: a row per setting, the plateau runs marked with their reason"
else
  echo "FAIL sweep.md: $(cat sw/sweep.md)"
fi

# 4. Run a third time, the sweep's config where sweeps kept it before (DIR/config.json):
# everything finished is kept; nothing trains, the table is the same, the config moved.
cp sw/sweep.json before.json
mv sw/sweep-config.json sw/config.json
"$bin" --threads 1 sweep "${grid[@]}" >third.out 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c ': finished, kept (' third.out)" -eq 4 ] &&
   ! grep -q -e ': starting (' -e ': resuming' third.out && cmp -s before.json sw/sweep.json &&
   cmp -s tiny.json sw/sweep-config.json && [ ! -e sw/config.json ]; then
  echo "ok sweep run a third time: the 4 finished runs kept, none trained, the same table, DIR/config.json moved to sweep-config.json"
else
  echo "FAIL sweep run a third time: status $rc: $(tail -3 third.out); $(ls sw)"
fi
# `normgrow runs` over the sweep: its 4 runs, finished; the sweep's directory is none.
"$bin" runs sw >runs.out 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c '^lr.peak=[^ ]*/seed[12]  *finished ' runs.out)" -eq 4 ] &&
   [ "$(wc -l <runs.out)" -eq 5 ]; then
  echo "ok runs over the sweep: its 4 runs, each finished, and no other line"
else
  echo "FAIL runs over the sweep: status $rc: $(cat runs.out)"
fi

# 4b. The sweep's records alone, as tools/archive_runs.sh keeps them (no weights, no
# checkpoints), extracted elsewhere, one run's records cut before its last evaluation, and
# grown by a seed: the 3 runs whose records end at their last step are kept, records
# untouched; the cut one and the 2 of seed 3 train.
cut='x/sw/lr.peak=3e-2/seed2'
if "$root/tools/archive_runs.sh" sw.tar.xz sw >/dev/null 2>&1 && mkdir x && tar xJf sw.tar.xz -C x &&
   [ -z "$(find x -name '*.safetensors')" ] && tail -1 "$cut/metrics.jsonl" | grep -q '"event":"eval","step":320,'; then
  sed -i '$d' "$cut/metrics.jsonl"
  "$bin" --threads 1 sweep tiny.json --out x/sw --set lr.peak=1e-6,3e-2 --seeds 1,2,3 --jobs 2 >fourth.out 2>&1
  rc=$?
  kept=0
  for d in lr.peak=1e-6/seed1 lr.peak=1e-6/seed2 lr.peak=3e-2/seed1; do
    grep -q ": finished (its records only, as an archive keeps them), kept (x/sw/$d)" fourth.out &&
      cmp -s "sw/$d/metrics.jsonl" "x/sw/$d/metrics.jsonl" && [ ! -e "x/sw/$d/final.safetensors" ] && kept=$((kept + 1))
  done
  if [ "$rc" -eq 0 ] && [ "$kept" -eq 3 ] && [ "$(grep -c ': starting (' fourth.out)" -eq 3 ] &&
     grep -q ": starting ($cut)" fourth.out && cmp -s "$cut/final.safetensors" "sw/lr.peak=3e-2/seed2/final.safetensors" &&
     python3 -c "import json, sys; sys.exit(json.load(open('x/sw/sweep.json'))['settings'][1]['trained'] != 3)"; then
    echo "ok an archived sweep grown by a seed: 3 runs kept by their records alone, the cut one trained again (bit-identical), 2 of seed 3 trained"
  else
    echo "FAIL an archived sweep grown by a seed: status $rc, $kept of 3 kept: $(grep -e kept -e starting fourth.out | head -8)"
  fi
else
  echo "FAIL the sweep archived with tools/archive_runs.sh: no weights in it, its runs' records whole"
fi

# 4c. A setting that diverges (lr.peak 10 with a weight decay of 1: the weights flip and
# grow 9-fold a step until the CE passes its bound, before the first checkpoint) is a
# result: `normgrow train` exits 3, its metrics.jsonl ends with a "diverged" record, the
# sweep ends with status 0 and marks it; run again, the sweep keeps it, trains nothing.
dv=(tiny.json --out dv --set lr.peak=3e-2,10 --set optim.weight_decay=1 --seeds 1)
"$bin" --threads 1 sweep "${dv[@]}" >dv1.out 2>&1
rc=$?
log='dv/lr.peak=10,optim.weight_decay=1/seed1'
if [ "$rc" -eq 0 ] && grep -q "^\[sweep .*\] lr.peak=10,optim.weight_decay=1 seed 1: diverged (did not train): normgrow: tiny@lr.peak=10,optim.weight_decay=1: step [0-9]* (stage 1): training CE .* a weight has run away; .*; no checkpoint yet: lower lr in $log/config.json and .normgrow train $log/config.json --force." dv1.out &&
   tail -1 "$log/metrics.jsonl" | grep -q '^{"event":"diverged","step":[0-9]*,.*"why":"training CE ' &&
   python3 -c "import json, sys; s = json.load(open('dv/sweep.json'))['settings']
sys.exit(not (s[0]['trained'] == 1 and s[0]['best'] and s[1]['trained'] == 0 and
              s[1]['seeds'][0]['why_not'].startswith('diverged at step ')))" &&
   grep -q '^- lr.peak=10,optim.weight_decay=1, seed 1 (.*): diverged at step [0-9]* of 320: training CE ' dv/sweep.md; then
  echo "ok sweep over a setting that diverges: status 0, the run marked diverged with its step and why, the other best"
else
  echo "FAIL sweep over a setting that diverges: status $rc: $(tail -3 dv1.out); $(tail -1 "$log/metrics.jsonl")"
fi
cp dv/sweep.json dv-before.json
"$bin" --threads 1 sweep "${dv[@]}" >dv2.out 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q ": diverged (did not train), kept ($log)" dv2.out &&
   grep -q ": finished, kept (" dv2.out && ! grep -q -e ': starting (' -e ': resuming' dv2.out &&
   cmp -s dv-before.json dv/sweep.json; then
  echo "ok the sweep run again: the diverged run kept as it is, nothing trained, the same table"
else
  echo "FAIL the sweep run again over a diverged run: status $rc: $(tail -4 dv2.out)"
fi
"$bin" runs dv >runs.out 2>&1
if grep -q 'seed1  *diverged (step \([0-9]*\))  *\1/320  *-  ' runs.out; then
  echo "ok runs over it: the diverged run's state names its step"
else
  echo "FAIL runs over a diverged run: $(cat runs.out)"
fi

# 5. Bad input: one line on stderr, a non-zero exit, nothing trained.
bad() {  # what out ARGS...: the sweep of ARGS into out must refuse with one line matching what
  local what=$1 out=$2; shift 2
  "$bin" sweep tiny.json --out "$out" "$@" >bad.out 2>bad.err
  local rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <bad.err)" -eq 1 ] && grep -q -- "$what" bad.err &&
     [ ! -d "$out/lr.peak=1e-3" ] && ! grep -q -e ': starting' bad.out; then
    echo "ok sweep $*: refused ($(cat bad.err))"
  else
    echo "FAIL sweep $*: status $rc, stderr: $(cat bad.err)"
  fi
}
bad 'lr: unknown key "peek"' bad1 --set lr.peak=1e-3 --set lr.peek=1e-3,2e-3
bad 'lr.peak: expected a number' bad2 --set lr.peak=1e-3,fast
bad 'lr.peak: expected KEY=V1,V2' bad3 --set lr.peak
bad 'lr.peak=1e-3,: an empty value' bad4 --set lr.peak=1e-3,
bad 'seed is the sweep.s own' bad5 --set lr.peak=1e-3 --set seed=1,2
bad 'seeds x1: expected seeds' bad6 --set lr.peak=1e-3 --seeds x1
sed 's/"hidden_size": 32/"hidden_size": 16/' tiny.json >other.json
"$bin" sweep other.json --out sw --set lr.peak=1e-6,3e-2 --seeds 1,2 >bad.out 2>bad.err
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l <bad.err)" -eq 1 ] && grep -q 'holds a sweep of another config' bad.err; then
  echo "ok sweep of another config into the same --out: refused ($(cat bad.err))"
else
  echo "FAIL sweep of another config into the same --out: status $rc, stderr: $(cat bad.err)"
fi
