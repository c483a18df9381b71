#!/usr/bin/env bash
# Optional: normgrow's tokenizer against the Hugging Face `tokenizers` package
# itself (not only the committed vectors): the vectors and the differential fuzz
# inputs made anew must equal the committed ones, and the licence texts, every
# Unicode code point and every composition boundary of NFC (in a probe text
# each, tools/tokenizer_codepoints.py) must get the same ids, id for id. A few
# minutes.
# Needs the venv of tools/tokenizer_venv.sh and the Qwen3 tokenizer; skips without.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tok=${NG_TOKENIZER:-$root/../shared/data/qwen3-tokenizer}
py=$root/build/venv-tokenizers/bin/python
if [ ! -f "$tok/tokenizer.json" ] || ! "$py" -c 'import tokenizers' 2>/dev/null; then
  echo "# skip t_tokenizer_hf: needs $py with tokenizers (tools/tokenizer_venv.sh) and $tok"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" "$root/tools/tokenizer_vectors.py" --tokenizer "$tok" --out "$tmp/vectors.json" >/dev/null
if cmp -s "$tmp/vectors.json" "$root/tests/fixtures/tokenizer/vectors.json"; then
  echo "ok tokenizer vectors: the committed ones are what tokenizers gives"
else
  echo "FAIL tokenizer vectors: tools/tokenizer_vectors.py makes other vectors than the committed ones"
fi

"$py" "$root/tools/tokenizer_hf_cases.py" --out "$tmp/cases" >/dev/null
if diff -r "$tmp/cases" "$root/tests/fuzz/regress/tokenizer_hf" >/dev/null; then
  echo "ok tokenizer differential fuzz inputs: the committed ones are what tokenizers gives"
else
  echo "FAIL tokenizer differential fuzz inputs: tools/tokenizer_hf_cases.py makes other ones than tests/fuzz/regress/tokenizer_hf"
fi

mkdir "$tmp/corpus"
i=0
for f in /usr/share/common-licenses/*; do
  i=$((i + 1))
  { echo "document $i"; cat "$f"; } >"$tmp/corpus/$(basename "$f")"
done
"$bin" data "$tmp/corpus" --tokenizer "$tok" --val-fraction 0.3 --out "$tmp/out" >/dev/null
verdict=$("$py" "$root/tools/tokenizer_compare.py" --tokenizer "$tok" --corpus "$tmp/corpus" \
  --shards "$tmp/out" | cut -d' ' -f3-)
if [ "$verdict" = identical ]; then
  echo "ok tokenizer ids of $i licence texts identical to tokenizers"
else
  echo "FAIL tokenizer ids of the licence texts: $verdict"
fi

"$py" "$root/tools/tokenizer_codepoints.py" --tokenizer "$tok" --bin "$bin" >"$tmp/probe"
while read -r line; do  # code points, then composition sequences
  if [[ "$line" == *", 0 differ" ]]; then
    echo "ok tokenizer ids identical to tokenizers: $line"
  else
    echo "FAIL tokenizer ids against tokenizers: $line"
  fi
done <"$tmp/probe"
[ "$(wc -l <"$tmp/probe")" -eq 2 ] || echo "FAIL tokenizer probe: $(cat "$tmp/probe")"
