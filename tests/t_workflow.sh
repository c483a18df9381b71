#!/usr/bin/env bash
# The researcher's workflow from the outside: nothing is overwritten without
# --force (data, train, export, report, teacher-cache), a run stopped by a real
# SIGINT or SIGTERM keeps its work and resumes bit for bit, a second signal
# quits at once, resume explains what it finds, --extend-tokens continues a
# finished run exactly as a longer run would have gone, `runs` lists runs, and
# a Post-Norm export loads in transformers as the same model (when python has
# transformers; NG_PYTHON chooses the interpreter).
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
py=${NG_PYTHON:-python3}
tmp=${NG_TMP:-$(mktemp -d)}
[ -n "${NG_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT

check() {  # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then echo "ok $what"; else echo "FAIL $what"; fi
}
# A refusal: non-zero exit below 128, one line on stderr holding every expected text.
refused() {  # description, stderr file, status, expected text...
  local what=$1 err=$2 rc=$3; shift 3
  local ok=1
  [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <"$err")" -eq 1 ] || ok=0
  for want in "$@"; do grep -qF -- "$want" "$err" || ok=0; done
  if [ $ok = 1 ]; then echo "ok $what: $(cat "$err")"; else echo "FAIL $what: status $rc, stderr: $(cat "$err")"; fi
}

data() { "$bin" data /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 --records-split "" \
  --val-fraction 0.1 --out "$tmp/data" "$@"; }
data >/dev/null || { echo "FAIL data: could not build shards"; exit 0; }
cp "$tmp/data/val.bin" "$tmp/val.before"
data --seed 5 >/dev/null 2>"$tmp/err"
refused "data refuses to replace shards" "$tmp/err" $? "$tmp/data/train.bin" "--force"
check "data left the shards as they were" cmp -s "$tmp/data/val.bin" "$tmp/val.before"
data --seed 5 --force >/dev/null 2>&1
check "data --force replaces them" bash -c '! cmp -s "$1" "$2"' _ "$tmp/data/val.bin" "$tmp/val.before"

config() {  # name run_dir tokens batch hidden checkpoint_every placement final_norm [more model keys [more growth keys]]
  cat <<JSON
{"name": "$1", "seed": 3, "run_dir": "$2", "mode": "pretrain",
 "data": {"train": "$tmp/data/train.bin", "val": "$tmp/data/val.bin", "batch": $4, "seq": 32},
 "optim": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0},
 "lr": {"peak": 0.01, "floor": 0.001, "warmup_tokens": 2048, "shape": "cosine"},
 "eval": {"every_steps": 25, "batches": 2}, "checkpoint_every_steps": $6,
 "model": {"vocab_size": 257, "hidden_size": $5, "intermediate_size": $((2 * $5)), "num_hidden_layers": 2,
   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rope_theta": 10000,
   "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "norm_placement": "$7", "final_norm": $8${9:-}},
 "stages": [{"depth": 1, "tokens": $(($3 / 2))}, {"depth": 2, "tokens": $(($3 / 2))}],
 "growth": {"init": "gate", "gate_steps": 5${10:-}}}
JSON
}
config arm "$tmp/whole" 204800 8 32 1000 post false >"$tmp/whole.json"
config arm "$tmp/sig" 204800 8 32 1000 post false >"$tmp/sig.json"
"$bin" train "$tmp/whole.json" 2>"$tmp/whole.err" || echo "FAIL train: uninterrupted run failed"
check "a finished run ends with a summary (final CE, tokens, files): $(tail -n 1 "$tmp/whole.err")" \
  grep -qE "finished: step 800, 204800 tokens, final val CE [0-9.]+.*final.safetensors" "$tmp/whole.err"
check "every evaluation shows its validation CE in the progress line" \
  test "$(grep -c 'val CE [0-9]' "$tmp/whole.err")" -ge "$(grep -c '"event":"eval"' "$tmp/whole/metrics.jsonl")"
check "every metrics record has a wall-clock time" \
  test "$(grep -c '"time":1[0-9]\{9\}' "$tmp/whole/metrics.jsonl")" -eq "$(wc -l <"$tmp/whole/metrics.jsonl")"

# A new run into a directory that holds one is refused; --force replaces it.
cp "$tmp/whole/metrics.jsonl" "$tmp/metrics.before"
"$bin" train "$tmp/whole.json" 2>"$tmp/err"
refused "train refuses a directory that holds a run" "$tmp/err" $? "--resume $tmp/whole" "--force"
# exact, here and below where a file is compared with its copy: it must be left untouched
check "the refused run left metrics.jsonl alone" cmp -s "$tmp/whole/metrics.jsonl" "$tmp/metrics.before"
"$bin" train --resume "$tmp/whole" 2>"$tmp/err"
rc=$?
check "resuming a finished run says so and changes nothing: $(cat "$tmp/err")" \
  bash -c '[ "$1" = 0 ] && grep -q "is finished (step 800 of 800).*--extend-tokens" "$2" && cmp -s "$3" "$4"' \
  _ "$rc" "$tmp/err" "$tmp/whole/metrics.jsonl" "$tmp/metrics.before"
mkdir -p "$tmp/notrun"
"$bin" train --resume "$tmp/notrun" 2>"$tmp/err"
refused "resume of a directory without a run" "$tmp/err" $? "no config.json" "normgrow train RUN.json --run-dir"
# --resume on a path that is no run says what it is and what would work, and
# writes nothing there.
"$bin" train --resume "$tmp/nothing" 2>"$tmp/err"
refused "resume of a path with nothing there" "$tmp/err" $? "$tmp/nothing: nothing there" "normgrow runs"
"$bin" train --resume "$tmp/data" 2>"$tmp/err"
refused "resume of a data directory" "$tmp/err" $? "$tmp/data: a data directory" "data.train"
"$bin" train --resume "$tmp/whole/final.safetensors" 2>"$tmp/err"
refused "resume of a run's checkpoint file" "$tmp/err" $? "a checkpoint file of the run in $tmp/whole" \
  "normgrow train --resume $tmp/whole\`"
"$bin" export "$tmp/whole/final.safetensors" "$tmp/hf-notrun" >/dev/null
"$bin" train --resume "$tmp/hf-notrun" 2>"$tmp/err"
refused "resume of a Hugging Face model directory" "$tmp/err" $? "a Hugging Face model's config, not a run config" "\"teacher\""
check "a refused resume left no train.lock in the data and Hugging Face directories" \
  bash -c '[ ! -e "$1/train.lock" ] && [ ! -e "$2/train.lock" ]' _ "$tmp/data" "$tmp/hf-notrun"

# SIGINT while training: the step finishes, a checkpoint is written (none was
# due: checkpoints every 1000 steps), exit 130 with how to resume; the resumed
# run ends bit-identical to the uninterrupted one.
"$bin" train "$tmp/sig.json" 2>"$tmp/sig.err" &
pid=$!
for _ in $(seq 1 3000); do
  grep -q '"step":60,' "$tmp/sig/metrics.jsonl" 2>/dev/null && break
  sleep 0.02
done
kill -INT "$pid"
wait "$pid"
rc=$?
last=$(tail -n 1 "$tmp/sig.err")
check "SIGINT: exit 130, checkpoint written, the last line says how to resume: $last" \
  bash -c '[ "$1" = 130 ] && [ -f "$2/checkpoint.safetensors" ] && [[ $3 == *"stopped by SIGINT after step"*"normgrow train --resume $2"* ]]' \
  _ "$rc" "$tmp/sig" "$last"
"$bin" train --resume "$tmp/sig" 2>"$tmp/resume.err" || echo "FAIL train: resume after SIGINT failed"
check "a resume says where it starts: $(head -n 1 "$tmp/resume.err")" \
  grep -q "^arm: resuming $tmp/sig from its checkpoint at step $(sed -n 's/.*after step \([0-9]*\).*/\1/p' <<<"$last") of 800 (stage [12] of 2)" "$tmp/resume.err"
# exact: the resumed run repeats the same ops in the same order
check "SIGINT at step $(sed -n 's/.*after step \([0-9]*\).*/\1/p' <<<"$last"), resumed: final weights bit-identical" \
  cmp -s "$tmp/whole/final.safetensors" "$tmp/sig/final.safetensors"

# A run whose data or teacher is missing is refused before its directory is
# made: nothing is left behind.
sed 's|"run_dir": "[^"]*"|"run_dir": "'"$tmp"'/nodata"|; s|/data/train.bin|/data/none.bin|' "$tmp/whole.json" >"$tmp/nodata.json"
sed 's|"run_dir": "[^"]*"|"run_dir": "'"$tmp"'/noteacher"|; s|"mode": "pretrain"|"mode": "distill", "teacher": "'"$tmp"'/none.safetensors", "loss": {"kd_weight": 0.5, "temperature": 2.0}|' \
  "$tmp/whole.json" >"$tmp/noteacher.json"
for r in nodata:none.bin noteacher:none.safetensors; do
  "$bin" train "$tmp/${r%%:*}.json" 2>"$tmp/err"
  refused "a run whose ${r%%:*} input is missing" "$tmp/err" $? "${r#*:}"
  check "  ... leaves no run directory behind" test ! -e "$tmp/${r%%:*}"
done

# --resume on a run stopped before its first checkpoint explains what to do.
config arm "$tmp/early" 204800 8 32 1000 post false >"$tmp/early.json"
"$bin" train "$tmp/early.json" --stop-after 3 2>/dev/null
"$bin" train --resume "$tmp/early" 2>"$tmp/err"
refused "resume without a checkpoint" "$tmp/err" $? "no checkpoint.safetensors" "--force"
cp "$tmp/early/config.json" "$tmp/config.before"
"$bin" train --resume "$tmp/early" --extend-tokens 2560 2>"$tmp/err"
refused "--extend-tokens without a checkpoint" "$tmp/err" $? "no checkpoint.safetensors"
check "a refused --extend-tokens leaves config.json as it was" cmp -s "$tmp/early/config.json" "$tmp/config.before"
"$bin" train "$tmp/early/config.json" --force 2>/dev/null
check "train --force replaces the run in its directory" grep -q '"step":800' "$tmp/early/metrics.jsonl"

# SIGTERM twice, 20 ms apart, inside a step of about a second: the second quits
# at once: status 143, no closing line, no checkpoint. (Should the step end
# between the two, the first one's stop is complete: tried again, 3 times.)
config slow "$tmp/slow" 16384000 256 256 1000 pre true >"$tmp/slow.json"
for attempt in 1 2 3; do
  "$bin" train "$tmp/slow.json" --force 2>"$tmp/slow.err" &
  pid=$!
  for _ in $(seq 1 3000); do
    grep -q '"step":1,' "$tmp/slow/metrics.jsonl" 2>/dev/null && break
    sleep 0.02
  done
  kill -TERM "$pid"; sleep 0.02; kill -TERM "$pid"
  wait "$pid"
  rc=$?
  grep -q "stopped by" "$tmp/slow.err" || break
done
check "a second SIGTERM quits at once: status $rc, no checkpoint, one line saying so: $(tail -n 1 "$tmp/slow.err")" \
  bash -c '[ "$1" = 143 ] && [ ! -f "$2/checkpoint.safetensors" ] && ! grep -q "stopped by" "$3" &&
    tail -n 1 "$3" | grep -q "quit at once by a second signal, before the run.s first checkpoint.*--force"' \
  _ "$rc" "$tmp/slow" "$tmp/slow.err"

# --extend-tokens: a finished run trained on equals a run configured that long.
config arm "$tmp/short" 102400 8 32 7 post false >"$tmp/short.json"
"$bin" train "$tmp/short.json" 2>/dev/null
"$bin" train --resume "$tmp/short" --extend-tokens 1000 2>"$tmp/err"
refused "--extend-tokens must be whole batches" "$tmp/err" $? "--extend-tokens" "256 tokens"
"$bin" train --resume "$tmp/short" --extend-tokens 25600 2>/dev/null || echo "FAIL --extend-tokens run failed"
"$bin" train "$tmp/short/config.json" --run-dir "$tmp/long" 2>/dev/null
# exact: both train the same config from step 0 by the same ops in the same order
check "--extend-tokens 25600 after 400 steps: weights bit-identical to a run of that config from the start" \
  bash -c 'cmp -s "$1" "$2" && grep -q "\"step\":500," "$3"' _ "$tmp/short/final.safetensors" "$tmp/long/final.safetensors" "$tmp/short/metrics.jsonl"

# runs: every run directory with its state, step, final CE and differences.
"$bin" runs "$tmp" --long >"$tmp/runs.out" 2>&1
check "runs lists the finished runs and the stopped one" \
  bash -c 'grep -q "^whole  *finished  *800/800  *[0-9.]" "$1" && grep -q "^slow  *stopped (no checkpoint)" "$1" &&
           grep -A30 "^long " "$1" | grep -q "^    stages = " && ! grep -q "^data " "$1" && ! grep -q "notrun" "$1"' _ "$tmp/runs.out"

# diag of a run: the run's own evaluation (validation shard, batches, batch,
# seq, structural ids, teacher, loss) and the checkpoint's step, so it
# reproduces diag_final.json exactly; a Hugging Face directory works too.
config kd "$tmp/kd" 5120 8 32 1000 post true |
  sed "s|\"mode\": \"pretrain\"|\"mode\": \"distill\", \"teacher\": \"$tmp/whole/final.safetensors\", \"loss\": {\"kd_weight\": 0.3, \"temperature\": 1.5}, \"structural_tokens\": [10, 32]|; s|\"batches\": 2|\"batches\": 3|" >"$tmp/kd.json"
"$bin" train "$tmp/kd.json" 2>/dev/null || echo "FAIL train: distilled run failed"
"$bin" diag "$tmp/kd" >"$tmp/diag.json" 2>"$tmp/diag.err"
# exact: the same weights, batches, loss chunk and threads: the same forward calls
check "diag RUN_DIR reproduces the run's diag_final.json (step 20, KD, structural ids) and names its settings" \
  bash -c 'cmp -s <(sed "/\"settings\"/,\$d" "$1" | sed "\$ s/,\$//") <(sed "\$d" "$2") &&
           grep -q "\"kd\":" "$2" && grep -q "\"step\":.20," "$2" && grep -q "\"batches\":.3," "$1" &&
           grep -q "step 20, 5120 tokens): 3 batches of 8 x 32" "$3"' _ "$tmp/diag.json" "$tmp/kd/diag_final.json" "$tmp/diag.err"
"$bin" diag "$tmp/kd/checkpoint.safetensors" --batches 1 2>"$tmp/diag.err" >/dev/null
check "diag of a checkpoint takes the run's settings, an option replaces one: $(cat "$tmp/diag.err")" \
  grep -q "(step 20, 5120 tokens): 1 batches of 8 x 32 from $tmp/data/val.bin, 2 structural ids, teacher $tmp/whole/final.safetensors" "$tmp/diag.err"
"$bin" export "$tmp/kd/final.safetensors" "$tmp/kd-hf" --dtype f32 >/dev/null
"$bin" diag "$tmp/kd-hf" --data "$tmp/data/val.bin" >"$tmp/diag.json" 2>/dev/null
check "diag reads a Hugging Face directory (step unknown: null)" grep -q '"step":.null' "$tmp/diag.json"
"$bin" diag "$tmp/kd-hf" 2>"$tmp/err" >/dev/null
refused "diag of a model outside a run needs --data" "$tmp/err" $? "--data SHARD is required"

# export: refused over an existing export; a Post-Norm model without a final
# norm loads in transformers as the same model.
"$bin" export "$tmp/whole/final.safetensors" "$tmp/hf" --dtype f32 >/dev/null
"$bin" export "$tmp/whole/final.safetensors" "$tmp/hf" 2>"$tmp/err"
refused "export refuses to replace an export" "$tmp/err" $? "$tmp/hf/config.json" "--force"
"$bin" export "$tmp/whole/final.safetensors" "$tmp/hf" --dtype f32 --force >/dev/null ||
  echo "FAIL export --force failed"
"$py" "$root/tests/hf_export_check.py" "$bin" "$tmp/hf" "$tmp" 2>"$tmp/py.err" || echo "FAIL hf_export_check.py: $(tail -n 3 "$tmp/py.err")"
# A Pre-Norm model with a final norm stays plain Qwen3 (transformers' own Qwen3, where it has one).
config pre "$tmp/pre" 5120 8 32 1000 pre true >"$tmp/pre.json"
"$bin" train "$tmp/pre.json" 2>/dev/null && "$bin" export "$tmp/pre/final.safetensors" "$tmp/hf-pre" --dtype f32 >/dev/null ||
  echo "FAIL train and export of a Pre-Norm run"
check "a Pre-Norm export is plain Qwen3: no auto_map, no modeling code" \
  bash -c 'grep -q "\"Qwen3ForCausalLM\"" "$1/config.json" && ! grep -q auto_map "$1/config.json" && [ ! -e "$1/modeling_normgrow.py" ]' _ "$tmp/hf-pre"
"$py" "$root/tests/hf_export_check.py" "$bin" "$tmp/hf-pre" "$tmp" 2>"$tmp/py.err" || echo "FAIL hf_export_check.py: $(tail -n 3 "$tmp/py.err")"
# An LNS (LayerNorm-Scaling) model exports as NormgrowForCausalLM and loads as the same model.
config lns "$tmp/lns" 5120 8 32 1000 lns true >"$tmp/lns.json"
"$bin" train "$tmp/lns.json" 2>/dev/null && "$bin" export "$tmp/lns/final.safetensors" "$tmp/hf-lns" --dtype f32 >/dev/null ||
  echo "FAIL train and export of an LNS run"
"$py" "$root/tests/hf_export_check.py" "$bin" "$tmp/hf-lns" "$tmp" 2>"$tmp/py.err" || echo "FAIL hf_export_check.py: $(tail -n 3 "$tmp/py.err")"
# So do sandwich, DeepNorm and Mix-LN models (config.json keeps their own keys).
for p in 'sandwich' 'deepnorm, "deepnorm_alpha": 1.25' 'mixln, "mixln_post_layers": 1'; do
  name=${p%%,*}
  config "$name" "$tmp/$name" 5120 8 32 1000 "$name" true "${p#"$name"}" >"$tmp/$name.json"
  "$bin" train "$tmp/$name.json" 2>/dev/null && "$bin" export "$tmp/$name/final.safetensors" "$tmp/hf-$name" --dtype f32 >/dev/null ||
    echo "FAIL train and export of a $name run"
  check "the $name export's config.json records its placement and keys" \
    bash -c 'grep -q "\"norm_placement\":[[:space:]]*\"$2\"" "$1/config.json" && { [ "$2" != deepnorm ] || grep -q "\"deepnorm_alpha\":[[:space:]]*1.25" "$1/config.json"; } &&
             { [ "$2" != mixln ] || grep -q "\"mixln_post_layers\":[[:space:]]*1" "$1/config.json"; }' _ "$tmp/hf-$name" "$name"
  "$py" "$root/tests/hf_export_check.py" "$bin" "$tmp/hf-$name" "$tmp" 2>"$tmp/py.err" || echo "FAIL hf_export_check.py: $(tail -n 3 "$tmp/py.err")"
done
# So does a hybrid model: a Post-Norm run growing a Pre-Norm block (config.json lists the
# layers' placements), and the growth of a post block with zero_out on a pre model says in
# one line that it changed the function.
config hybrid "$tmp/hybrid" 5120 8 32 1000 post true "" ', "new_block_placement": "pre"' >"$tmp/hybrid.json"
"$bin" train "$tmp/hybrid.json" 2>/dev/null && "$bin" export "$tmp/hybrid/final.safetensors" "$tmp/hf-hybrid" --dtype f32 >/dev/null ||
  echo "FAIL train and export of a hybrid run"
check "the hybrid export's config.json records its placement and each layer's" \
  bash -c 'tr -d " \t\n" <"$1/config.json" | grep -q "\"layer_placements\":\[\"post\",\"pre\"\].*\"norm_placement\":\"hybrid\""' _ "$tmp/hf-hybrid"
"$py" "$root/tests/hf_export_check.py" "$bin" "$tmp/hf-hybrid" "$tmp" 2>"$tmp/py.err" || echo "FAIL hf_export_check.py: $(tail -n 3 "$tmp/py.err")"
config zero "$tmp/zero" 5120 8 32 1000 pre true "" ', "new_block_placement": "post"' |
  sed 's/"init": "gate", "gate_steps": 5/"init": "zero_out"/' >"$tmp/zero.json"
"$bin" train "$tmp/zero.json" 2>"$tmp/err" >/dev/null || echo "FAIL a pre run growing a zero_out post block"
check "a growth whose new post blocks are not identities says so in one line" \
  grep -q "^zero: the growth to 2 blocks changed the function: new post blocks do not start as the identity" "$tmp/err"

# Tokenizer files beside the run's shards (shards made with a Hugging Face
# tokenizer) are copied into the export; byte-level shards have none.
check "no tokenizer files in the export of a byte-level run" test ! -e "$tmp/hf/tokenizer.json"
printf '{"version": "1.0"}' >"$tmp/data/tokenizer.json"
printf '{"model_max_length": 32}' >"$tmp/data/tokenizer_config.json"
"$bin" export "$tmp/whole/final.safetensors" "$tmp/hf-tok" >"$tmp/out" 2>&1
check "tokenizer files beside the run's shards are copied into the export" \
  bash -c 'cmp -s "$1/tokenizer.json" "$2/tokenizer.json" && cmp -s "$1/tokenizer_config.json" "$2/tokenizer_config.json" &&
           grep -q "tokenizer files from" "$3"' _ "$tmp/data" "$tmp/hf-tok" "$tmp/out"

"$bin" runs "$tmp" >"$tmp/runs.out" 2>&1
check "runs does not take a Hugging Face export for a run" \
  bash -c 'grep -q "^whole  *finished" "$1" && ! grep -q "^hf" "$1"' _ "$tmp/runs.out"

# teacher-cache and report refuse to replace their output too.
: >"$tmp/cache.topk"
"$bin" teacher-cache "$tmp/whole/final.safetensors" "$tmp/data/val.bin" "$tmp/cache.topk" --seq 32 2>"$tmp/err"
refused "teacher-cache refuses to replace a file" "$tmp/err" $? "$tmp/cache.topk" "--force"
"$bin" report "$tmp/whole" --out "$tmp/report" >/dev/null 2>&1
"$bin" report "$tmp/whole" --out "$tmp/report" 2>"$tmp/err" >/dev/null
refused "report refuses to replace a report" "$tmp/err" $? "report.md" "--force"
