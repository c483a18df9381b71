#!/usr/bin/env bash
# Tokenizer speed: normgrow's C tokenizer (`normgrow data --tokenizer`, the whole
# corpus pipeline: read, tokenize, split, write) against the Hugging Face
# `tokenizers` package (encode, one document at a time, and encode_batch) on the
# same corpus in the same run, on 1 thread and on all threads, in MB/s of text.
#   tools/bench_tokenizer.sh --tokenizer DIR_OR_JSON [--repeat R] [--corpus DIR] [--bin BIN]
# The corpus is /usr/share/common-licenses and the fortunes (if installed), or the
# plain-text files of DIR, each file one document, the whole repeated R times
# (default 1). Both tokenizers cache words, so repeats measure mostly cache hits.
# Also prints how long the study's 3.11B-token shard (about 12 GB of text) would take.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tok="" repeat=1 bin="$root/build/normgrow" corpus=""
while [ $# -gt 0 ]; do
  case $1 in
    --tokenizer) tok=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    *) echo "usage: $0 --tokenizer DIR_OR_JSON [--repeat R] [--corpus DIR] [--bin BIN]" >&2; exit 2 ;;
  esac
done
[ -n "$tok" ] || { echo "bench_tokenizer: --tokenizer is required" >&2; exit 2; }
py=$("$root/tools/tokenizer_venv.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/corpus"
sources=(/usr/share/common-licenses/* /usr/share/games/fortunes/*)
[ -n "$corpus" ] && sources=("$corpus"/*)
for r in $(seq 1 "$repeat"); do
  i=0
  for f in "${sources[@]}"; do
    i=$((i + 1))
    # A first line of its own makes every document tell apart (the comparison
    # finds each, in order, in the train or the val shard).
    [ -f "$f" ] && [ "${f%.dat}" = "$f" ] &&
      { echo "document $i.$r"; cat "$f"; } >"$tmp/corpus/$i.$(basename "$f").$r"
  done
done
mb=$(du -cb "$tmp/corpus" | tail -1 | awk '{printf "%.2f", $1 / 1e6}')
cores=$(nproc)
echo "corpus: $(ls "$tmp/corpus" | wc -l) documents, $mb MB; $cores cores"

# normgrow: the MB/s of its summary line (tokenizer loading excluded).
c_speed() {
  rm -rf "$tmp/out"
  "$bin" data "$tmp/corpus" --tokenizer "$tok" --out "$tmp/out" --val-fraction 0.3 \
    --threads "$1" | sed -nE 's/.*: ([0-9.]+) MB\/s, .*/\1/p'
}
c1=$(c_speed 1)
cn=$(c_speed "$cores")
ntok=$("$bin" data "$tmp/corpus" --tokenizer "$tok" --out "$tmp/out" --val-fraction 0.3 |
  sed -nE 's/.* ([0-9]+) tokens \(train.*/\1/p')

read -r p1 pn same < <("$py" "$root/tools/tokenizer_compare.py" --tokenizer "$tok" \
  --corpus "$tmp/corpus" --shards "$tmp/out")
echo "ids: $ntok tokens, $same"
printf '%-34s %10s %10s\n' "MB/s of text" "1 thread" "$cores threads"
printf '%-34s %10s %10s\n' "normgrow data --tokenizer" "$c1" "$cn"
printf '%-34s %10s %10s\n' "tokenizers encode / encode_batch" "$p1" "$pn"
awk -v c1="$c1" -v p1="$p1" 'BEGIN { printf "normgrow / tokenizers, 1 thread: %.2fx\n", c1 / p1 }'
# 12 GB of text at the 1-thread rate times the cores: tokenizing alone (it scales
# with documents; reading and writing, on one thread, cost about 1/30 of it).
awk -v c1="$c1" 'BEGIN { for (k = 0; k < 2; k++) { n = k ? 32 : 2;
  printf "3.11B tokens (12 GB of text) on %2d cores: %.1f min at %.0f MB/s\n", n, 12e3 / (c1 * n) / 60, c1 * n } }'
