#!/usr/bin/env bash
# normgrow data: the summary line on success, and one-line errors (non-zero
# exit, nothing written) for bad option values.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for i in $(seq 1 40); do printf 'fortune %02d\nsecond line\n%%\n' "$i"; done >"$tmp/f"
printf 'a whole file\n' >"$tmp/g"

out=$("$bin" data "$tmp/f" --records-split % --val-fraction 0.25 --seed 3 --out "$tmp/o" 2>&1)
n='[0-9]+'
want="^data: 40 documents \(train $n, val $n\), $n tokens \(train $n, val $n\)"
want+=" -> $tmp/o/train.bin, $tmp/o/val.bin$"
if printf '%s\n' "$out" | grep -Eq "$want" &&
  [ -f "$tmp/o/train.bin" ] && [ -f "$tmp/o/val.bin" ]; then
  echo "ok data summary line"
else
  echo "FAIL data summary line: $out"
fi

# 40 records of 22 bytes ("fortune NN\nsecond line") + EOT = 920 tokens in all.
sum=$(printf '%s\n' "$out" | sed -nE 's/.*tokens \(train ([0-9]+), val ([0-9]+)\).*/\1 + \2/p')
if [ -n "$sum" ] && [ $(($sum)) -eq 920 ]; then
  echo "ok data token count"
else
  echo "FAIL data token count: $out"
fi

"$bin" data "$tmp/f" --records-split % --val-fraction 0.25 --seed 3 --out "$tmp/o2" >/dev/null
if cmp -s "$tmp/o/val.bin" "$tmp/o2/val.bin" && cmp -s "$tmp/o/train.bin" "$tmp/o2/train.bin"; then
  echo "ok data deterministic for a seed"
else
  echo "FAIL data deterministic for a seed: shards differ"
fi

# expect_error NAME WANT ARGS...: non-zero exit, one stderr line containing WANT, no output dir.
expect_error() {
  local name=$1 want=$2
  shift 2
  local err status
  err=$("$bin" data "$@" --out "$tmp/bad" 2>&1 >/dev/null)
  status=$?
  if [ "$status" -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] &&
    [[ "$err" == *"$want"* ]] && [ ! -e "$tmp/bad" ]; then
    echo "ok data rejects $name"
  else
    echo "FAIL data rejects $name: status $status, stderr: $err"
  fi
}
expect_error "val-fraction 0" '--val-fraction: "0" is not a number in (0, 1)' \
  "$tmp/f" --val-fraction 0
expect_error "val-fraction 1" '"1" is not a number in (0, 1)' "$tmp/f" --val-fraction 1
expect_error "val-fraction text" '"abc"' "$tmp/f" --val-fraction abc
expect_error "val-fraction nan" '"nan"' "$tmp/f" --val-fraction nan
expect_error "negative seed" '--seed: "-1" is not an unsigned 64-bit integer' "$tmp/f" --seed -1
expect_error "seed past 64 bits" '"18446744073709551616"' "$tmp/f" --seed 18446744073709551616
expect_error "unknown option" 'unknown option --val_fraction' "$tmp/f" --val_fraction 0.1
expect_error "missing input" "$tmp/nope" "$tmp/nope"
expect_error "a single document" "no documents in the" "$tmp/g"

err=$("$bin" data "$tmp/f" 2>&1 >/dev/null)
if [ $? -ne 0 ] && [[ "$err" == *"--out DIR is required"* ]]; then
  echo "ok data requires --out"
else
  echo "FAIL data requires --out: $err"
fi

# Corpora: JSONL, gzip, a tokenizer.json. Malformed inputs name the file and line.
printf '{"text": "one"}\n{"text": "two"}\n{"text": 3}\n' >"$tmp/bad.jsonl"
expect_error "a JSONL field that is not a string" "$tmp/bad.jsonl: line 3: no string field \"text\"" \
  "$tmp/bad.jsonl" --jsonl-field text
printf '{"text": "one"}\n{"text" "two"}\n' >"$tmp/bad2.jsonl"
expect_error "a JSONL line that is not JSON" "$tmp/bad2.jsonl: line 2: not valid JSON at column 9" \
  "$tmp/bad2.jsonl" --jsonl-field text
for i in $(seq 1 3000); do printf '{"text": "document %d"}\n' "$i"; done | gzip -c >"$tmp/c.jsonl.gz"
head -c 2000 "$tmp/c.jsonl.gz" >"$tmp/cut.jsonl.gz"
expect_error "a truncated gzip file" "$tmp/cut.jsonl.gz: line " "$tmp/cut.jsonl.gz" --jsonl-field text
printf '{\n  "model": {\n    "vocab": {"a": 0,\n' >"$tmp/tokenizer.json"
expect_error "a truncated tokenizer.json" "$tmp/tokenizer.json: line 3: not valid JSON" \
  "$tmp/f" --tokenizer "$tmp/tokenizer.json"
expect_error "both records and JSONL" "exclude each other" "$tmp/f" --records-split % --jsonl-field text

out=$("$bin" data "$tmp/c.jsonl.gz" --jsonl-field text --val-fraction 0.1 --out "$tmp/j" 2>&1)
if printf '%s\n' "$out" | grep -q "^data: 3000 documents" && [ -f "$tmp/j/train.bin" ]; then
  echo "ok data reads gzip'd JSONL"
else
  echo "FAIL data reads gzip'd JSONL: $out"
fi

# Shards made with a Hugging Face tokenizer carry its files (an export of a model
# trained on them then carries them too); existing shards are kept without --force.
qwen=$root/../shared/data/qwen3-tokenizer
if [ -f "$qwen/tokenizer.json" ]; then
  "$bin" data "$tmp/f" --records-split % --val-fraction 0.25 --tokenizer "$qwen" --out "$tmp/q" >/dev/null 2>&1
  if cmp -s "$qwen/tokenizer.json" "$tmp/q/tokenizer.json" && [ -f "$tmp/q/train.bin" ]; then
    echo "ok data --tokenizer copies the tokenizer's files beside the shards"
  else
    echo "FAIL data --tokenizer: no tokenizer.json beside the shards"
  fi
  before=$(cksum <"$tmp/q/train.bin")
  if ! "$bin" data "$tmp/g" --tokenizer "$qwen/tokenizer.json" --out "$tmp/q" 2>"$tmp/err" >/dev/null &&
    [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "--force" "$tmp/err" && [ "$(cksum <"$tmp/q/train.bin")" = "$before" ]; then
    echo "ok data keeps existing shards without --force: $(cat "$tmp/err")"
  else
    echo "FAIL data over existing shards: $(cat "$tmp/err")"
  fi
else
  echo "skip data --tokenizer copy: no Qwen3 tokenizer at $qwen"
fi

# --force replaces every layout data writes, not only the one it writes now: a
# single file by parts, parts by fewer parts and by a single file, a tokenizer's
# files by byte-level shards (export would copy them beside a model they do not
# fit). A rebuild that fails leaves the old outputs as they were.
L=$tmp/layout
layout() { (cd "$L" && ls | tr '\n' ' '); }
data_into() { "$bin" data "$tmp/f" --records-split % --val-fraction 0.25 --seed 3 --out "$L" "$@" >/dev/null 2>"$tmp/err"; }
check_layout() {  # NAME WANT: the names in $L after the last command
  if [ "$(layout)" = "$2" ]; then echo "ok data --force $1: $2"; else echo "FAIL data --force $1: $(layout) ($(cat "$tmp/err"))"; fi
}
data_into
data_into --file-tokens 300 --force
check_layout "replaces train.bin by parts" "train-00000.bin train-00001.bin train-00002.bin train.manifest.json val.bin "
data_into --file-tokens 100 --force
data_into --file-tokens 300 --force
check_layout "replaces 7 parts by 3" "train-00000.bin train-00001.bin train-00002.bin train.manifest.json val.bin "
data_into --force
check_layout "replaces parts and a manifest by train.bin" "train.bin val.bin "
printf '{"version": "1.0"}' >"$L/tokenizer.json"
printf '{"model_max_length": 32}' >"$L/tokenizer_config.json"
data_into --force
check_layout "removes a tokenizer's files for byte-level shards" "train.bin val.bin "
for stale in tokenizer.json train-00004.bin val.manifest.json; do
  rm -rf "$L" && mkdir "$L" && : >"$L/$stale"
  if ! data_into && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "$L/$stale already exists.*--force" "$tmp/err" &&
    [ "$(layout)" = "$stale " ]; then
    echo "ok data without --force keeps $stale"
  else
    echo "FAIL data without --force over $stale: $(layout) ($(cat "$tmp/err"))"
  fi
done
rm -rf "$L"
data_into --file-tokens 300
before=$(cat "$L"/* | cksum)
printf '{"text": "one"}\n{"text": 3}\n' >"$tmp/bad3.jsonl"
"$bin" data "$tmp/bad3.jsonl" --jsonl-field text --out "$L" --force >/dev/null 2>"$tmp/err"
if [ $? -ne 0 ] && [ "$(cat "$L"/* | cksum)" = "$before" ] &&
  [ "$(layout)" = "train-00000.bin train-00001.bin train-00002.bin train.manifest.json val.bin " ]; then
  echo "ok data --force that fails leaves the old shards as they were"
else
  echo "FAIL data --force that fails: $(layout) ($(cat "$tmp/err"))"
fi
