#!/usr/bin/env bash
# A Python venv with the Hugging Face `tokenizers` package, for the optional
# tokenizer tools (tools/tokenizer_vectors.py, tools/bench_tokenizer.sh).
# Prints the venv's python. Usage: tools/tokenizer_venv.sh [DIR] (default build/venv-tokenizers)
set -euo pipefail
dir=${1:-build/venv-tokenizers}
if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c 'import tokenizers' 2>/dev/null; then
  python3 -m venv "$dir" >&2
  "$dir/bin/pip" install -q tokenizers >&2
fi
echo "$dir/bin/python"
