#!/usr/bin/env bash
# The train command from the outside: a run killed with SIGKILL while it trains
# and resumed from its last checkpoint ends with final weights identical to an
# uninterrupted run, and so does one stopped after its last checkpoint before its
# end's files; a bad config gives one line on stderr and a non-zero exit.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bin" data /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 --records-split "" \
  --val-fraction 0.1 --out "$tmp/data" >/dev/null || { echo "FAIL data: could not build shards"; exit 0; }
model() {  # layers placement
  echo "{\"vocab_size\": 257, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": $1,
   \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, \"rope_theta\": 10000,
   \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, \"norm_placement\": \"$2\", \"final_norm\": true}"
}
common="\"data\": {\"train\": \"$tmp/data/train.bin\", \"val\": \"$tmp/data/val.bin\", \"batch\": 8, \"seq\": 32},
 \"optim\": {\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"weight_decay\": 0.1, \"grad_clip\": 1.0},
 \"lr\": {\"peak\": 0.01, \"floor\": 0.001, \"warmup_tokens\": 2048, \"shape\": \"cosine\"},
 \"eval\": {\"every_steps\": 50, \"batches\": 2}, \"checkpoint_every_steps\": 7"
cat >"$tmp/teacher.json" <<JSON
{"name": "teacher", "seed": 1, "run_dir": "$tmp/teacher", "mode": "pretrain", $common,
 "model": $(model 2 pre), "stages": [{"depth": 2, "tokens": 10240}]}
JSON
arm() {  # name
  cat <<JSON
{"name": "$1", "seed": 3, "run_dir": "$tmp/$1", "mode": "distill", $common, "model": $(model 3 pre),
 "teacher": "$tmp/teacher/final.safetensors", "loss": {"kd_weight": 0.5, "temperature": 2.0},
 "growth": {"position": "interleave", "init": "copy_below"},
 "stages": [{"depth": 1, "tokens": 30720}, {"depth": 2, "tokens": 30720}, {"depth": 3, "tokens": 30720}]}
JSON
}
"$bin" train "$tmp/teacher.json" 2>/dev/null || { echo "FAIL train: teacher run failed"; exit 0; }
arm whole >"$tmp/whole.json"
arm killed >"$tmp/killed.json"
"$bin" train "$tmp/whole.json" 2>/dev/null || echo "FAIL train: uninterrupted run failed"

# Kill the second run with SIGKILL once it has written a checkpoint, mid-training.
"$bin" train "$tmp/killed.json" 2>/dev/null &
pid=$!
for _ in $(seq 1 3000); do  # up to a minute on a slow machine
  [ -f "$tmp/killed/checkpoint.safetensors" ] && grep -q '"step":40,' "$tmp/killed/metrics.jsonl" 2>/dev/null && break
  sleep 0.02
done
{ kill -KILL "$pid" && wait "$pid"; } 2>/dev/null  # (bash reports the kill on stderr)
killed_at=$(grep -c '"event":"step"' "$tmp/killed/metrics.jsonl")
"$bin" train --resume "$tmp/killed" 2>/dev/null || echo "FAIL train: resume failed"
# exact: the resumed run repeats the same ops in the same order (same shapes, threads, BLAS)
if [ -f "$tmp/whole/final.safetensors" ] && cmp -s "$tmp/whole/final.safetensors" "$tmp/killed/final.safetensors"; then
  echo "ok SIGKILL after $killed_at of 360 steps, resumed: final weights bit-identical"
else
  echo "FAIL SIGKILL after $killed_at of 360 steps, resumed: final weights differ"
fi
# The logs hold each record once, in order: the same events and steps as the uninterrupted run.
events() { grep -o '"event":"[a-z]*","step":[0-9]*' "$1"; }
if [ "$(events "$tmp/whole/metrics.jsonl")" = "$(events "$tmp/killed/metrics.jsonl")" ] &&
   [ "$(grep -o '"step":[0-9]*' "$tmp/whole/diag.jsonl")" = "$(grep -o '"step":[0-9]*' "$tmp/killed/diag.jsonl")" ]; then
  echo "ok resumed metrics and diagnostics logs hold each record once ($(wc -l <"$tmp/killed/metrics.jsonl") records)"
else
  echo "FAIL resumed logs differ from the uninterrupted run's"
fi
# Stopped after its last checkpoint but before diag_final.json and final.safetensors (removed
# here): resumed, the run writes them, the same bits, and logs no record twice.
cp -r "$tmp/whole" "$tmp/ended"
rm -f "$tmp/ended/final.safetensors" "$tmp/ended/diag_final.json"
"$bin" train --resume "$tmp/ended" 2>"$tmp/ended.err"
rc=$?
if [ "$rc" -eq 0 ] && cmp -s "$tmp/whole/final.safetensors" "$tmp/ended/final.safetensors" &&
   cmp -s "$tmp/whole/diag_final.json" "$tmp/ended/diag_final.json" &&
   [ "$(events "$tmp/whole/metrics.jsonl")" = "$(events "$tmp/ended/metrics.jsonl")" ]; then
  echo "ok stopped between its last checkpoint and its end's files, resumed: both written, bit-identical, no record twice"
else
  echo "FAIL resumed at its last checkpoint without its end's files: status $rc: $(tail -1 "$tmp/ended.err")"
fi

# diag.jsonl holds one record per growth (the grown model's, naming its new
# blocks) at the steps and depths of metrics.jsonl's growth records.
if python3 - "$tmp/whole" <<'PY'; then
import json, sys
def records(name):
    with open(f"{sys.argv[1]}/{name}") as f:
        return [json.loads(line) for line in f if '"event":"growth"' in line]
got = [(r["step"], r["depth"], len(r["new_blocks"])) for r in records("diag.jsonl")]
want = [(r["step"], r["depth"], r["depth"] - r["depth_before"]) for r in records("metrics.jsonl")]
sys.exit(0 if got == want and len(want) == 2 else 1)
PY
  echo "ok diag.jsonl has a record of each growth with its new blocks"
else
  echo "FAIL diag.jsonl's growth records do not match metrics.jsonl's growths"
fi

# A checkpoint taken inside a growth ramp (gated growth at step 8, a 32-step
# ramp, stopped at step 16: block 2's gate at 0.25) is read with its gates by
# every reader. diag's intact CE is the run's own evaluation at step 16 to the
# bit: the same fixed validation batches, teacher and loss, one micro-batch per
# batch and the default loss chunk, on the same backend and threads, so the
# same operations in the same order. export refuses in one line (a Hugging Face
# model has no gate). The resumed run logs its growth at step 16 from the same
# model (val_ce_before = that evaluation) and ends as the uninterrupted run.
for r in ramp ramp-whole; do
  sed "s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$tmp/$r\"|; s|\"init\": \"copy_below\"}|\"init\": \"gate\", \"gate_steps\": 32}|;
       s|\"every_steps\": 50|\"every_steps\": 8|; s|\"checkpoint_every_steps\": 7|\"checkpoint_every_steps\": 8|;
       s|\"tokens\": 30720}, {\"depth\": 2, \"tokens\": 30720}, {\"depth\": 3, \"tokens\": 30720}|\"tokens\": 2048}, {\"depth\": 2, \"tokens\": 2048}, {\"depth\": 3, \"tokens\": 10240}|" \
    "$tmp/whole.json" >"$tmp/$r.json"
done
"$bin" train "$tmp/ramp-whole.json" 2>/dev/null && "$bin" train "$tmp/ramp.json" --stop-after 16 2>/dev/null
rc=$?
"$bin" diag "$tmp/ramp/checkpoint.safetensors" --out "$tmp/ramp-diag.json" 2>/dev/null
"$bin" export "$tmp/ramp/checkpoint.safetensors" "$tmp/ramp-hf" 2>"$tmp/ramp-export.err"
export_rc=$?
cp "$tmp/ramp/metrics.jsonl" "$tmp/ramp-stopped.jsonl"
"$bin" train --resume "$tmp/ramp" 2>/dev/null || rc=$?
if [ "$rc" -eq 0 ] && python3 - "$tmp" <<'PY'; then
import json, sys
tmp = sys.argv[1]
def records(path, event):
    return [r for r in map(json.loads, open(path)) if r["event"] == event]
own = [r["val_ce"] for r in records(f"{tmp}/ramp-stopped.jsonl", "eval") if r["step"] == 16]
diag = json.load(open(f"{tmp}/ramp-diag.json"))["ablation"]["intact"]["ce"]
grew = [r for r in records(f"{tmp}/ramp/metrics.jsonl", "growth") if r["step"] == 16]
whole = [r for r in records(f"{tmp}/ramp-whole/metrics.jsonl", "growth") if r["step"] == 16]
print("# step 16: own eval", own, "diag", diag, "resumed growth", [g["val_ce_before"] for g in grew],
      "uninterrupted growth", [g["val_ce_before"] for g in whole])
sys.exit(0 if len(own) == 1 and diag == own[0] and len(grew) == 1 and
         grew[0]["val_ce_before"] == own[0] and grew[0] == {**whole[0], "time": grew[0]["time"]} else 1)
PY
  echo "ok a checkpoint inside a growth ramp: diag and the resumed growth read its evaluation's model"
else
  echo "FAIL a checkpoint inside a growth ramp: diag or the resumed run read another model than the run evaluated"
fi
if [ "$export_rc" -ne 0 ] && [ "$export_rc" -lt 128 ] && [ "$(wc -l <"$tmp/ramp-export.err")" -eq 1 ] &&
   grep -q "step 16 is inside a growth ramp (gate 0.25 of block 2).*step 40" "$tmp/ramp-export.err" &&
   [ ! -e "$tmp/ramp-hf/config.json" ]; then
  echo "ok export of a checkpoint inside a growth ramp refused: $(cat "$tmp/ramp-export.err")"
else
  echo "FAIL export of a checkpoint inside a growth ramp: exit $export_rc, stderr: $(cat "$tmp/ramp-export.err")"
fi
if cmp -s "$tmp/ramp-whole/final.safetensors" "$tmp/ramp/final.safetensors"; then
  echo "ok a run stopped inside a growth ramp and resumed ends bit-identical"
else
  echo "FAIL a run stopped inside a growth ramp and resumed: final weights differ"
fi

# The interventions on the stream's scale in a run: a Pre-Norm arm grown with
# gated, depth-scaled blocks and its stream rescaled at each growth keeps its
# function across the growth (val CE before = after, up to the norms' eps) and
# logs the scale it applied.
sed 's|"run_dir": "[^"]*"|"run_dir": "'"$tmp"'/rescaled"|; s|"tokens": 30720|"tokens": 2560|g;
     s|"init": "copy_below"}|"init": "gate", "gate_steps": 4, "rescale_stream": true, "depth_scaled_init": true}|' \
  "$tmp/whole.json" >"$tmp/rescaled.json"
if "$bin" train "$tmp/rescaled.json" 2>/dev/null && python3 - "$tmp/rescaled/metrics.jsonl" <<'PY'; then
import json, sys
growths = [json.loads(l) for l in open(sys.argv[1]) if '"event":"growth"' in l]
ok = len(growths) == 2 and all(abs(g["val_ce_after"] - g["val_ce_before"]) < 1e-4 * g["val_ce_before"] and
                               0 < g["stream_scale"] != 1 for g in growths)
print("#", [(g["val_ce_before"], g["val_ce_after"], g["stream_scale"]) for g in growths])
sys.exit(0 if ok else 1)
PY
  echo "ok rescale_stream + depth_scaled_init + gate: growth keeps val CE, logs stream_scale"
else
  echo "FAIL rescale_stream run: failed, or its growths changed val CE or logged no stream_scale"
fi

# LayerScale in a run: with model.layer_scale_init 0, blocks copied below at
# each growth start with zero scales (the copies' trained scales are not
# taken), so each growth keeps val CE exactly; AdamW trains the scales off 0.
sed 's|"run_dir": "[^"]*"|"run_dir": "'"$tmp"'/layer-scale"|; s|"tokens": 30720|"tokens": 2560|g;
     s|"final_norm": true}|"final_norm": true, "layer_scale_init": 0}|' \
  "$tmp/whole.json" >"$tmp/layer-scale.json"
if "$bin" train "$tmp/layer-scale.json" 2>/dev/null && python3 - "$tmp/layer-scale" <<'PY'; then
import json, struct, sys
growths = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"event":"growth"' in l]
with open(sys.argv[1] + "/final.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header, data = json.loads(f.read(n)), f.read()
def tensor(name):
    a, b = header[name]["data_offsets"]
    return struct.unpack("<%df" % ((b - a) // 4), data[a:b])
scales = [tensor("model.layers.%d.%s.layer_scale" % (l, s)) for l in range(3) for s in ("self_attn", "mlp")]
print("#", [(g["val_ce_before"], g["val_ce_after"]) for g in growths],
      "mean |scale| per tensor", [round(sum(map(abs, v)) / len(v), 4) for v in scales])
# exact: a new block's branches are scaled by 0 (x + 0 = x); the other blocks and
# the head run the same calls at the same shapes and threads
ok = len(growths) == 2 and all(g["val_ce_after"] == g["val_ce_before"] for g in growths)
sys.exit(0 if ok and all(any(x != 0 for x in v) for v in scales) else 1)
PY
  echo "ok layer_scale_init 0 + copy_below: growth keeps val CE exactly, the scales train off 0"
else
  echo "FAIL layer_scale run: failed, or its growths changed val CE, or a scale stayed 0"
fi

# The teacher exported as a Hugging Face directory (F32: exact) teaches the same:
# a run distilled from it ends with the same weights as one from the checkpoint.
"$bin" export "$tmp/teacher/final.safetensors" "$tmp/teacher-hf" --dtype f32 >/dev/null
short() {  # name teacher
  sed "s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$tmp/$1\"|; s|\"teacher\": \"[^\"]*\"|\"teacher\": \"$2\"|;
       s|\"tokens\": 30720|\"tokens\": 2560|g" "$tmp/whole.json" >"$tmp/$1.json"
  "$bin" train "$tmp/$1.json" 2>/dev/null
}
short from-ckpt "$tmp/teacher/final.safetensors" && short from-hf "$tmp/teacher-hf"
# exact: the F32 export holds the checkpoint's bits, so both runs do the same ops
if [ -f "$tmp/teacher-hf/config.json" ] && cmp -s "$tmp/from-ckpt/final.safetensors" "$tmp/from-hf/final.safetensors"; then
  echo "ok export to a Hugging Face directory, then distil from it: identical weights"
else
  echo "FAIL export / Hugging Face teacher: weights differ"
fi

# The kd term's divergence is the run's choice (loss.divergence): the same short
# run under reverse_kl and jsd trains to a finite, different validation KD than
# under forward_kl, records the key in its config, and a jsd without beta is
# refused naming loss.beta.
div_run() {  # name loss-json
  sed "s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$tmp/$1\"|; s|\"tokens\": 30720|\"tokens\": 2560|g;
       s|\"loss\": {[^}]*}|\"loss\": $2|" "$tmp/whole.json" >"$tmp/$1.json"
  "$bin" train "$tmp/$1.json" 2>"$tmp/$1.err"
}
last_kd() { grep -o '"val_kd":[-0-9.e+]*' "$tmp/$1/metrics.jsonl" | tail -n 1 | cut -d: -f2; }
for div in reverse_kl jsd; do
  case $div in jsd) loss='{"kd_weight": 0.5, "temperature": 2.0, "divergence": "jsd", "beta": 0.3}' ;;
               *) loss='{"kd_weight": 0.5, "temperature": 2.0, "divergence": "reverse_kl"}' ;; esac
  div_run "div-$div" "$loss"
  fwd=$(last_kd from-ckpt) got=$(last_kd "div-$div")
  if [ -n "$got" ] && [ "$got" != "$fwd" ] && grep -q "\"divergence\":[[:space:]]*\"$div\"" "$tmp/div-$div/config.json" &&
     awk -v k="$got" 'BEGIN { exit !(k + 0 == k && k > 0 && k < 100) }'; then
    echo "ok distillation under $div: val kd $got (forward_kl $fwd), recorded in config.json"
  else
    echo "FAIL distillation under $div: val kd '$got' (forward_kl '$fwd'): $(cat "$tmp/div-$div.err")"
  fi
done
div_run div-nobeta '{"kd_weight": 0.5, "temperature": 2.0, "divergence": "jsd"}'
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <"$tmp/div-nobeta.err")" -eq 1 ] && grep -q 'loss.beta' "$tmp/div-nobeta.err"; then
  echo "ok jsd without beta: $(cat "$tmp/div-nobeta.err")"
else
  echo "FAIL jsd without beta: status $rc, stderr: $(cat "$tmp/div-nobeta.err")"
fi

# A bad config: one line on stderr naming the field, non-zero exit.
sed 's/"init": "copy_below"/"init": "clone"/' "$tmp/whole.json" >"$tmp/bad.json"
"$bin" train "$tmp/bad.json" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q 'growth.init' "$tmp/err"; then
  echo "ok bad config: $(cat "$tmp/err")"
else
  echo "FAIL bad config: status $rc, stderr: $(cat "$tmp/err")"
fi

# Backends: a run config names its backend and precision, the command line
# wins, backend.jsonl logs the choice at the start and at every resume, and a
# run resumes on another backend (checkpoints are the same format).
bes=$("$bin" --version | sed -n 's/^backends: //p')
case "$bes" in
*onednn*)
  # Where oneDNN runs bf16 here, the config says onednn fp32 and the command line bf16;
  # elsewhere (no AVX-512 BF16 or AMX) the config says cpu and the command line onednn.
  no_bf16=$("$bin" golden-check "$root/golden/$(ls "$root/golden" | grep -m 1 '\.safetensors$')" --backend onednn \
    --precision bf16 2>&1 >/dev/null | grep -m 1 'needs a CPU with')
  if [ -z "$no_bf16" ]; then
    in_config='"backend": "onednn", "precision": "fp32"' given=(--precision bf16) first=bf16
  else
    in_config='"backend": "cpu", "precision": "fp32"' given=(--backend onednn) first=fp32
  fi
  sed "s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$tmp/cross\"|; s|\"tokens\": 30720|\"tokens\": 2560|g;
       s|^{|{$in_config, |" "$tmp/whole.json" >"$tmp/cross.json"
  "$bin" train "$tmp/cross.json" "${given[@]}" --stop-after 11 2>/dev/null &&
    "$bin" train --resume "$tmp/cross" --backend cpu --precision fp32 2>/dev/null
  rc=$?
  log=$(sed -E 's/,"normgrow":"[^"]*","threads":[0-9]+,"blas_kernels":"[A-Za-z0-9]+","blas_kernels_origin":"[a-zA-Z_ ]+","time":[0-9.]+//' \
    "$tmp/cross/backend.jsonl" 2>/dev/null | tr -d ' \n')
  want='{"step":0,"backend":"onednn","precision":"'$first'"}{"step":7,"backend":"cpu","precision":"fp32"}'
  if [ "$rc" -eq 0 ] && [ "$log" = "$want" ] && [ -f "$tmp/cross/final.safetensors" ] &&
    grep -q '"backend":[[:space:]]*"onednn"' "$tmp/cross/config.json" &&
    grep -q '"precision":[[:space:]]*"'$first'"' "$tmp/cross/config.json"; then
    echo "ok run on onednn $first (command line ${given[*]} over the config), resumed on cpu fp32: $log"
  else
    echo "FAIL backend choice / resume on another backend: exit $rc, backend.jsonl: $log"
  fi
  # On onednn bf16 too, a run stopped and resumed ends bit-identical to an uninterrupted one.
  if [ -n "$no_bf16" ]; then
    echo "skip onednn bf16 resume: $no_bf16"
  else
    for r in bf16-whole bf16-stopped; do
      sed "s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$tmp/$r\"|" "$tmp/cross.json" >"$tmp/$r.json"
    done
    "$bin" train "$tmp/bf16-whole.json" --precision bf16 2>/dev/null &&
      "$bin" train "$tmp/bf16-stopped.json" --precision bf16 --stop-after 11 2>/dev/null &&
      "$bin" train --resume "$tmp/bf16-stopped" --backend onednn --precision bf16 2>/dev/null
    # exact: the resumed run repeats the same ops in the same order
    if [ $? -eq 0 ] && cmp -s "$tmp/bf16-whole/final.safetensors" "$tmp/bf16-stopped/final.safetensors"; then
      echo "ok onednn bf16: stopped after step 11 and resumed, final weights bit-identical"
    else
      echo "FAIL onednn bf16: the resumed run's final weights differ (or a run failed)"
    fi
  fi
  ;;
*) echo "skip backend resume: this build has only $bes" ;;
esac

# DeepNet's beta init is init.deepnorm_beta's (default true): a 2-block deepnorm run whose
# one step barely moves its weights (LR 1e-9) holds v_proj, o_proj and the MLP's matrices
# at beta = (8 x 2)^(-1/4) = 0.5 times those of the same run with deepnorm_beta false (the
# same draw), q_proj, k_proj and the embeddings as they are; another placement refuses the key.
deep=(--set model.norm_placement=deepnorm --set model.deepnorm_alpha=1.5 --set lr.peak=1e-9
      --set lr.floor=0 --set stages.0.tokens=256)
"$bin" train "$tmp/teacher.json" "${deep[@]}" --run-dir "$tmp/beta-on" 2>/dev/null &&
  "$bin" train "$tmp/teacher.json" "${deep[@]}" --set init.deepnorm_beta=false --run-dir "$tmp/beta-off" 2>/dev/null &&
  python3 - "$tmp/beta-on/final.safetensors" "$tmp/beta-off/final.safetensors" <<'PY'
import json, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header, data = json.loads(f.read(n)), f.read()
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}
on, off = load(sys.argv[1]), load(sys.argv[2])
scaled = ("v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
def far(name):  # largest |on - f off| over the tensor; one step of LR 1e-9 moves a weight by ~1e-9
    f = 0.5 if ".layers." in name and any(s in name for s in scaled) else 1.0
    return max(abs(a - f * b) for a, b in zip(on[name], off[name]))
names = [k for k in on if k.endswith("_proj.weight") or "embed" in k]
n_scaled = sum(1 for k in names if any(s in k for s in scaled))
sys.exit(not (n_scaled == 10 and len(names) == 15 and all(far(k) < 1e-7 for k in names)))
PY
if [ $? -eq 0 ]; then
  echo "ok init.deepnorm_beta: true scales the five matrices of each block by 0.5 = (8 x 2)^(-1/4), false leaves them"
else
  echo "FAIL init.deepnorm_beta: the two runs' weights are not in the ratio of DeepNet's beta (or a run failed)"
fi
"$bin" train "$tmp/teacher.json" --set init.deepnorm_beta=false --check >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q 'init.deepnorm_beta: only a deepnorm model' "$tmp/err"; then
  echo "ok init.deepnorm_beta on a Pre-Norm model: refused ($(cat "$tmp/err"))"
else
  echo "FAIL init.deepnorm_beta on a Pre-Norm model: status $rc, stderr: $(cat "$tmp/err")"
fi
