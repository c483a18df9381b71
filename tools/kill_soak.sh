#!/usr/bin/env bash
# Kill soak: a growing distillation run is killed with SIGKILL at N random
# moments (every third one while a checkpoint is being written), and resumed
# after each kill it must end with final weights and logs byte-identical to the
# same run left alone. Slow (a few minutes on 2 cores): `make soak`, not `make test`.
#
#   tools/kill_soak.sh [--kills N] [--seed S] [--bin build/normgrow]
#
# After each kill a copy of the run is resumed to its end and compared; the
# original is started again and killed at the next moment. Prints one line per
# kill and a summary "soak: K of N kills ... identical" (exit 0 when K = N).
set -u
kills=20 seed=1 bin=build/normgrow
while [ $# -gt 0 ]; do
  case $1 in
    --kills) kills=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) echo "kill_soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
RANDOM=$seed

"$bin" data /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 --records-split "" \
  --val-fraction 0.1 --out "$tmp/data" >/dev/null || { echo "kill_soak: data failed" >&2; exit 1; }
model() {  # layers placement
  echo "{\"vocab_size\": 257, \"hidden_size\": 48, \"intermediate_size\": 96, \"num_hidden_layers\": $1,
   \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 12, \"rope_theta\": 10000,
   \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false, \"norm_placement\": \"$2\", \"final_norm\": true}"
}
common="\"data\": {\"train\": \"$tmp/data/train.bin\", \"val\": \"$tmp/data/val.bin\", \"batch\": 8, \"seq\": 48},
 \"optim\": {\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"weight_decay\": 0.1, \"grad_clip\": 1.0},
 \"lr\": {\"peak\": 0.006, \"floor\": 0.0006, \"warmup_tokens\": 4096, \"shape\": \"cosine\"},
 \"eval\": {\"every_steps\": 40, \"batches\": 2}, \"checkpoint_every_steps\": 5"
cat >"$tmp/teacher.json" <<JSON
{"name": "teacher", "seed": 1, "run_dir": "$tmp/teacher", "mode": "pretrain", $common,
 "model": $(model 2 pre), "stages": [{"depth": 2, "tokens": 15360}]}
JSON
arm() {  # name
  cat <<JSON
{"name": "soak", "seed": 5, "run_dir": "$tmp/$1", "mode": "distill", $common, "model": $(model 3 post),
 "teacher": "$tmp/teacher/final.safetensors", "loss": {"kd_weight": 0.5, "temperature": 2.0},
 "growth": {"position": "top", "init": "gate", "gate_steps": 10},
 "stages": [{"depth": 1, "tokens": 61440}, {"depth": 2, "tokens": 61440}, {"depth": 3, "tokens": 61440}]}
JSON
}
"$bin" train "$tmp/teacher.json" 2>/dev/null || { echo "kill_soak: teacher failed" >&2; exit 1; }
arm whole >"$tmp/whole.json"
arm killed >"$tmp/killed.json"
t0=$(date +%s.%N)
"$bin" train "$tmp/whole.json" 2>/dev/null || { echo "kill_soak: uninterrupted run failed" >&2; exit 1; }
run_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "soak: the uninterrupted run takes ${run_s}s"

start() {  # the killed run: resume when it has a checkpoint, else start it anew
  if [ -f "$tmp/killed/checkpoint.safetensors" ]; then
    "$bin" train --resume "$tmp/killed" 2>/dev/null &
  else
    rm -rf "$tmp/killed"
    "$bin" train "$tmp/killed.json" 2>/dev/null &
  fi
  pid=$!
}

# Logs compared without their wall-clock fields.
strip() { sed -E 's/"(time|unix_time|elapsed_s|wall_s|tokens_per_s)":[^,}]*,?//g' "$1"; }
# Exact: a resumed run repeats the same ops in the same order (same shapes,
# threads and BLAS), so its weights and logs are the same bytes.
differs() {  # run dir: what differs from the uninterrupted run
  local d=$1 bad=""
  cmp -s "$tmp/whole/final.safetensors" "$d/final.safetensors" || bad="$bad final.safetensors"
  for f in metrics.jsonl diag.jsonl diag_final.json; do
    [ "$(strip "$tmp/whole/$f")" = "$(strip "$d/$f")" ] || bad="$bad $f"
  done
  echo "$bad"
}
finish() {  # dir: resume a copy of the killed run to its end, as a user would
  rm -rf "$1"
  if [ -f "$tmp/killed/checkpoint.safetensors" ]; then
    cp -a "$tmp/killed" "$1"
    "$bin" train --resume "$1" 2>/dev/null
  else  # killed before its first checkpoint: nothing to keep, start again
    sed "s|$tmp/killed|$1|" "$tmp/killed.json" >"$1.json"
    "$bin" train "$1.json" 2>/dev/null
  fi
}

during_write=0 same=0
for k in $(seq 1 "$kills"); do
  start
  if [ $((k % 3)) -eq 0 ]; then  # wait for a checkpoint's temp file, then kill
    for _ in $(seq 1 20000); do
      compgen -G "$tmp/killed/checkpoint.safetensors.tmp.*" >/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
    done
    compgen -G "$tmp/killed/checkpoint.safetensors.tmp.*" >/dev/null && during_write=$((during_write + 1))
  else
    sleep "$(awk -v r=$((RANDOM % 1000)) -v t="$run_s" -v n="$kills" 'BEGIN { printf "%.3f", r / 1000 * t / n * 1.5 }')"
  fi
  { kill -KILL "$pid" && wait "$pid"; } 2>/dev/null
  step=$(grep -c '"event":"step"' "$tmp/killed/metrics.jsonl" 2>/dev/null)
  if [ -f "$tmp/killed/final.safetensors" ]; then
    echo "soak: the run finished before kill $k; $((k - 1)) kills made"
    kills=$((k - 1))
    break
  fi
  finish "$tmp/trial" || { echo "soak: kill $k at step ${step:-0}: the resume failed"; continue; }
  bad=$(differs "$tmp/trial")
  if [ -z "$bad" ]; then
    same=$((same + 1))
    echo "soak: kill $k at step ${step:-0}, resumed to the end: identical"
  else
    echo "soak: kill $k at step ${step:-0}, resumed to the end: differs in$bad"
  fi
done

echo "soak: $same of $kills kills ($during_write while a checkpoint was being written) resumed to final weights and logs identical to the uninterrupted run"
[ "$same" -eq "$kills" ]
