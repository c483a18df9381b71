#!/usr/bin/env bash
# Cross-checks `normgrow golden-eval` against tools/crosscheck_torch.py, an
# independent float64 PyTorch implementation of the golden contract (docs/golden-contract.md), on random cases.
# Skipped when Debian's python3-torch is not installed.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
py=/usr/bin/python3
tool=$root/tools/crosscheck_torch.py
cases=12 seed=1

if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "skip crosscheck: python3-torch not installed"
  exit 0
fi

# run NAME ARGS...: runs the tool, indents its output, prints one ok/FAIL line.
run() {
  local name=$1 out rc
  shift
  out=$("$py" "$tool" "$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | sed 's/^/  /'
  if [ "$rc" -eq 0 ]; then
    echo "ok crosscheck $name"
  else
    echo "FAIL crosscheck: $name: $(printf '%s\n' "$out" | tail -n 1)"
  fi
}

run "self-test" --self-test --seed "$seed"
run "$cases random cases" --cases "$cases" --seed "$seed" --bin "$bin"
run "$cases random cases, loss in chunks of 1 token, blocks recomputed" --cases "$cases" \
  --seed "$seed" --bin "$bin" --eval-args "--loss-chunk 1 --recompute on"
