#!/usr/bin/env bash
# Seed corpora for the fuzz targets, made from real files: the golden cases,
# the repository's configs, and a tiny run made here with the normgrow binary
# (shards, single and in two files with a manifest, a trained checkpoint with
# its state, the run directory's config.json and metrics.jsonl, a top-k cache,
# a Hugging Face export, single and sharded), and the inputs kept in
# tests/fuzz/regress (the tokenizer's seed is kept there: the first 600 ids of
# Qwen3's tokenizer.json with their merges and added tokens). Multi-file
# inputs are joined with the separator line of tests/fuzz/fuzz.h.
#   tests/fuzz/seeds.sh NORMGROW_BIN OUT_DIR
set -euo pipefail
bin=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out"/{safetensors,safetensors_sized,hf,model_config,run_config,shard,manifest,tokenizer,tokenizer_hf,topk,checkpoint,rundir}
sep=$'\n--normgrow-fuzz-part--\n'
join() {  # OUT FILE...: the files joined by the separator
  local first=1 f
  for f in "${@:2}"; do
    [ $first -eq 1 ] || printf '%s' "$sep"
    cat "$f"
    first=0
  done >"$1"
}

# A tiny run: byte-level shards of a few sentences, a 2-block model trained 8 steps.
for i in 1 2 3 4 5 6; do
  printf 'record %d: normgrow grows a student in depth while a teacher distils into it.\n' "$i" >"$tmp/text$i.txt"
done
"$bin" data "$tmp"/text*.txt --out "$tmp/data" --val-fraction 0.34 >/dev/null
"$bin" data "$tmp"/text*.txt --out "$tmp/parts" --val-fraction 0.34 --file-tokens 200 >/dev/null
cat >"$tmp/run.json" <<JSON
{"name": "seed", "seed": 1, "run_dir": "$tmp/run", "mode": "pretrain",
 "data": {"train": "$tmp/data/train.bin", "val": "$tmp/data/val.bin", "batch": 2, "seq": 8},
 "model": {"vocab_size": 257, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2,
   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "rope_theta": 10000,
   "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "norm_placement": "post", "final_norm": true},
 "optim": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0},
 "lr": {"peak": 0.01, "floor": 0.001, "warmup_tokens": 16, "shape": "cosine"},
 "growth": {"position": "top", "init": "gate", "gate_steps": 3},
 "stages": [{"depth": 1, "tokens": 64}, {"depth": 2, "tokens": 64}],
 "eval": {"every_steps": 4, "batches": 1}, "checkpoint_every_steps": 4}
JSON
"$bin" train "$tmp/run.json" 2>/dev/null
"$bin" teacher-cache "$tmp/run/final.safetensors" "$tmp/data/val.bin" "$tmp/val.topk" --k 4 --seq 8 >/dev/null
"$bin" export "$tmp/run/checkpoint.safetensors" "$tmp/hf" --dtype bf16 >/dev/null

# Files as they are.
cp "$root"/golden/*.safetensors "$tmp/run/checkpoint.safetensors" "$tmp/run/final.safetensors" \
  "$tmp/hf/model.safetensors" "$out/safetensors/"
cp "$tmp/data/train.bin" "$tmp/data/val.bin" "$out/shard/"
for f in "$root"/configs/*/*.json; do cp "$f" "$out/run_config/$(basename "$(dirname "$f")")-$(basename "$f")"; done
cp "$tmp/run/config.json" "$out/run_config/resolved.json"
cp "$root"/configs/paper/qwen3-8b-base.json "$out/model_config/"
join "$out/topk/val" "$tmp/data/val.bin" "$tmp/val.topk"
join "$out/manifest/two-files" "$tmp/parts/train.manifest.json" "$tmp/parts/train-00000.bin" "$tmp/parts/train-00001.bin"
join "$out/rundir/trained" "$tmp/run/config.json" "$tmp/run/metrics.jsonl"
for d in "$root"/tests/fuzz/regress/*/; do cp "$d"* "$out/$(basename "$d")/"; done
join "$out/hf/single" "$tmp/hf/config.json" "$tmp/hf/model.safetensors"

# The rest is cut from the files with python3: headers, metadata, an index.
python3 - "$tmp" "$out" "$sep" <<'PY'
import json, struct, sys, glob, os
tmp, out, sep = sys.argv[1], sys.argv[2], sys.argv[3].encode()
def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8:8 + n], b[8 + n:]
for path in glob.glob(out + "/safetensors/*"):  # header text, NUL, data
    header, text, data = read_st(path)
    open(out + "/safetensors_sized/" + os.path.basename(path), "wb").write(text + b"\0" + data)
    meta = header.get("__metadata__", {})
    if "model" in meta:  # model config JSON, then state JSON
        open(out + "/model_config/" + os.path.basename(path) + ".json", "w").write(meta["model"])
        if "state" in meta:
            open(out + "/checkpoint/" + os.path.basename(path), "wb").write(
                meta["model"].encode() + sep + meta["state"].encode())
# The export split into two shards with an index, as transformers writes them.
header, text, data = read_st(tmp + "/hf/model.safetensors")
names = sorted(k for k in header if k != "__metadata__")
parts, weight_map = [], {}
for i, half in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
    file = "model-%05d-of-00002.safetensors" % (i + 1)
    h, blob = {"__metadata__": {"format": "pt"}}, b""
    for k in half:
        a, b = header[k]["data_offsets"]
        h[k] = dict(header[k], data_offsets=[len(blob), len(blob) + b - a])
        blob += data[a:b]
        weight_map[k] = file
    t = json.dumps(h, separators=(",", ":")).encode()
    t += b" " * (-len(t) % 8)
    parts.append(struct.pack("<Q", len(t)) + t + blob)
index = json.dumps({"metadata": {"total_size": len(data)}, "weight_map": weight_map}).encode()
config = open(tmp + "/hf/config.json", "rb").read()
open(out + "/hf/sharded", "wb").write(sep.join([config, index] + parts))
PY
for d in "$out"/*; do echo "seeds: $(basename "$d"): $(ls "$d" | wc -l) files, $(du -sk "$d" | cut -f1) KiB"; done
