#!/usr/bin/env bash
# A run directory has one writer: a second `train` (new with --force, or
# --resume) on a directory a live trainer holds is refused with one line naming
# it and the holder's pid; after the holder is killed (SIGKILL) the run
# resumes. diag asked for more memory than the machine has: one line naming
# its options. A full disk (a tmpfs mounted for the test: needs root) under a
# resumed run, an export, a data build, a teacher cache and a report: one line
# naming the file and the error, the previous files intact, no temporary file
# left; once space is free again the run resumes.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
small=$tmp/small
mounted=0
cleanup() {
  [ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null
  [ "$mounted" -eq 1 ] && umount "$small"
  rm -rf "$tmp"
}
trap cleanup EXIT

"$bin" data /usr/share/common-licenses/GPL-3 --records-split "" --val-fraction 0.1 \
  --out "$tmp/data" >/dev/null || { echo "FAIL data: could not build shards"; exit 0; }
config() {  # run_dir tokens
  cat <<JSON
{"name": "rel", "seed": 4, "run_dir": "$1", "mode": "pretrain",
 "data": {"train": "$tmp/data/train.bin", "val": "$tmp/data/val.bin", "batch": 4, "seq": 16},
 "model": {"vocab_size": 257, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "rope_theta": 10000,
   "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "norm_placement": "pre", "final_norm": true},
 "optim": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0},
 "lr": {"peak": 0.003, "floor": 0.0003, "warmup_tokens": 640, "shape": "cosine"},
 "stages": [{"depth": 2, "tokens": $2}], "eval": {"every_steps": 10, "batches": 2},
 "checkpoint_every_steps": 10}
JSON
}

# ---------------------------------------------------------------- one writer
config "$tmp/busy" 6400000 >"$tmp/busy.json"  # 100,000 steps: it lives until killed
"$bin" train "$tmp/busy.json" 2>/dev/null &
pid=$!
for _ in $(seq 1 3000); do  # up to a minute on a slow machine
  [ -f "$tmp/busy/checkpoint.safetensors" ] && [ -s "$tmp/busy/train.lock" ] && break
  sleep 0.02
done
# (--stop-after bounds them should the lock fail: a new run stops after step 1, a resume at once)
timeout 120 "$bin" train --resume "$tmp/busy" --stop-after 1 2>"$tmp/err1"
rc1=$?
timeout 120 "$bin" train "$tmp/busy.json" --force --stop-after 1 2>"$tmp/err2"
rc2=$?
one_line() { [ "$(wc -l <"$1")" -eq 1 ] && grep -q "$tmp/busy: in use by process $pid" "$1"; }
if [ "$rc1" -ne 0 ] && [ "$rc2" -ne 0 ] && one_line "$tmp/err1" && one_line "$tmp/err2" &&
   kill -0 "$pid" 2>/dev/null; then
  echo "ok a second train --resume and train --force on a live run refused: $(cat "$tmp/err1")"
else
  echo "FAIL second trainer on a live run: status $rc1 / $rc2: $(cat "$tmp/err1" "$tmp/err2")"
fi
{ kill -KILL "$pid" && wait "$pid"; } 2>/dev/null
pid=
ckpt=$(grep -o '"event":"step","step":[0-9]*' "$tmp/busy/metrics.jsonl" | tail -1 | grep -o '[0-9]*$')
"$bin" train --resume "$tmp/busy" --stop-after $((ckpt + 15)) 2>"$tmp/err3"
rc3=$?
if [ "$rc3" -eq 0 ] && grep -q "\"step\":$((ckpt + 15))," "$tmp/busy/metrics.jsonl"; then
  echo "ok the lock of a killed trainer does not block: resumed and trained on"
else
  echo "FAIL resume after SIGKILL of the holder: status $rc3: $(tail -1 "$tmp/err3")"
fi

# ---------------------------------------------------------------- hostile sizes
# diag's batches would need ~TiB (2^30 tokens): refused with one line naming the
# options, before allocating by them (under a 2 GiB address-space limit; under
# AddressSanitizer, whose shadow memory reserves terabytes of address space, its
# allocator's limit of 2 GiB per allocation stands in for it).
if grep -qa __asan_init "$bin"; then
  limited() { ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=2048 "$@"; }
else
  limited() { (ulimit -v $((2 << 20)); "$@"); }
fi
limited "$bin" diag "$tmp/busy/checkpoint.safetensors" --data "$tmp/data/val.bin" \
  --batches 1 --batch 1048576 --seq 1024 >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
   grep -q "diag: --batches 1 x --batch 1048576 x --seq 1024 with a model (hidden_size 16.*needs .* GiB, more than" "$tmp/err"; then
  echo "ok diag whose batches exceed the machine's memory is refused: $(cat "$tmp/err")"
else
  echo "FAIL diag beyond the machine's memory: status $rc: $(cat "$tmp/err")"
fi

# ---------------------------------------------------------------- full disk
mkdir -p "$small"
if [ "$(id -u)" -ne 0 ]; then
  echo "skip full disk: not root (a tmpfs is mounted for it)"; exit 0
fi
if ! mount -t tmpfs -o size=512k tmpfs "$small" 2>"$tmp/merr"; then
  echo "skip full disk: cannot mount a tmpfs: $(cat "$tmp/merr")"; exit 0
fi
mounted=1
# fill: leave about $1 KiB free on the tmpfs
fill() {
  rm -f "$small/fill"
  dd if=/dev/zero of="$small/fill" bs=1k 2>/dev/null
  local size; size=$(stat -c %s "$small/fill")
  truncate -s $((size > $1 * 1024 ? size - $1 * 1024 : 0)) "$small/fill"
}
no_temps() { [ -z "$(find "$small" -name '*.tmp.*')" ]; }

config "$small/run" 64000 >"$tmp/run.json"
"$bin" train "$tmp/run.json" --stop-after 10 2>/dev/null || echo "FAIL full disk: the first 10 steps failed"
cp -a "$small/run" "$tmp/run-10"
named=""
for free in 0 2 4 6 8 12 16 32 64; do
  rm -rf "$small/run" && cp -a "$tmp/run-10" "$small/run"
  fill "$free"
  "$bin" train --resume "$small/run" --stop-after 20 2>"$tmp/err"
  rc=$?
  last=$(tail -1 "$tmp/err")
  file=$(echo "$last" | grep -o "$small/run/[a-z_.]*" | head -1)
  # cmp: the failed resume must leave the checkpoint's bytes untouched
  if [ "$rc" -ne 0 ] && [ -n "$file" ] && echo "$last" | grep -q 'No space left on device' &&
     cmp -s "$small/run/checkpoint.safetensors" "$tmp/run-10/checkpoint.safetensors" &&
     cmp -s "$small/run/config.json" "$tmp/run-10/config.json" && no_temps; then
    named="$named ${free}KiB:$(basename "$file")($(echo "$last" | grep -o "cannot [a-z]*"))"
  else
    echo "FAIL full disk with ${free} KiB free: status $rc: $last"
  fi
done
echo "ok full disk under a resumed run: one line naming the file, checkpoint intact, no temp file ($named)"
rm -f "$small/fill"
"$bin" train --resume "$small/run" --stop-after 20 2>/dev/null
rc=$?
steps=$(grep -o '"event":"step","step":[0-9]*' "$small/run/metrics.jsonl" | grep -o '[0-9]*$' | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ "$steps" = "$(seq -s ' ' 1 20) " ]; then
  echo "ok space freed: the run resumes, its log holds steps 1 to 20 once each"
else
  echo "FAIL resume after freeing space: steps $steps"
fi

# An export and a data build into the full disk; a data build over existing shards.
rm -rf "$small/run"
"$bin" data /usr/share/common-licenses/GPL-2 --records-split "" --val-fraction 0.1 \
  --out "$small/data" >/dev/null 2>&1 || echo "FAIL full disk: data build with space failed"
cp -a "$small/data" "$tmp/data-before"
fill 0
"$bin" data /usr/share/common-licenses/GPL-3 --records-split "" --val-fraction 0.1 \
  --out "$small/data" --force >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$small/data/.*No space left on device" "$tmp/err" &&
   diff -r "$small/data" "$tmp/data-before" >/dev/null && no_temps; then
  echo "ok data --force on a full disk: $(cat "$tmp/err"); old shards intact"
else
  echo "FAIL data on a full disk: status $rc: $(cat "$tmp/err")"
fi
"$bin" export "$tmp/run-10/checkpoint.safetensors" "$small/hf" --dtype f32 >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$small/hf/.*No space left on device" "$tmp/err" &&
   no_temps; then
  echo "ok export on a full disk: $(cat "$tmp/err")"
else
  echo "FAIL export on a full disk: status $rc: $(cat "$tmp/err")"
fi
# A teacher cache replaced (--force) on a full disk: the old one intact. A report into it.
rm -rf "$small/fill" "$small/data" "$small/hf"
"$bin" teacher-cache "$tmp/run-10/checkpoint.safetensors" "$tmp/data/val.bin" "$small/val.topk" \
  --k 8 --seq 16 2>/dev/null || echo "FAIL full disk: teacher-cache with space failed"
cp "$small/val.topk" "$tmp/val.topk"
fill 0
"$bin" teacher-cache "$tmp/run-10/checkpoint.safetensors" "$tmp/data/val.bin" "$small/val.topk" \
  --k 8 --seq 16 --force 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$small/val.topk.*No space left on device" "$tmp/err" &&
   cmp -s "$small/val.topk" "$tmp/val.topk" && no_temps; then
  echo "ok teacher-cache --force on a full disk: $(cat "$tmp/err"); old cache intact"
else
  echo "FAIL teacher-cache on a full disk: status $rc: $(cat "$tmp/err")"
fi
"$bin" report "$tmp/run-10" --out "$small/report" >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$small/report/.*No space left on device" "$tmp/err" &&
   no_temps; then
  echo "ok report on a full disk: $(cat "$tmp/err")"
else
  echo "FAIL report on a full disk: status $rc: $(cat "$tmp/err")"
fi
