#!/usr/bin/env bash
# The build without oneDNN and CUDA (make ONEDNN=0 CUDA=0: the OpenMP + OpenBLAS
# reference alone) in its own directory, BUILD/matrix-onednn0: it builds normgrow
# and test_backends, links no oneDNN, has the cpu backend only and refuses
# onednn in one line, its op test passes, a golden case passes on it, and its
# libraries keep the layers (tools/layers.sh). The whole `make ONEDNN=0 CUDA=0
# test` is the same tests on that build.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
build=$(realpath --relative-to="$root" "$(dirname "$bin")")/matrix-onednn0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Its own make, not the one running the tests (whose variables MAKEFLAGS would carry).
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$root" -j2 ONEDNN=0 CUDA=0 BUILD="$build" \
  "$build/normgrow" "$build/tests/test_backends" >"$tmp/make.out" 2>&1; then
  echo "ok make ONEDNN=0 CUDA=0 builds normgrow and test_backends in $build"
else
  echo "FAIL make ONEDNN=0 CUDA=0: $(tail -n 5 "$tmp/make.out")"
  exit 1
fi
nb=$root/$build/normgrow

if ! ldd "$nb" | grep -q dnnl && ! ldd "$nb" | grep -q cuda; then
  echo "ok it links neither oneDNN nor CUDA"
else
  echo "FAIL it links $(ldd "$nb" | grep -E 'dnnl|cuda' | awk '{print $1}' | tr '\n' ' ')"
fi

backends=$("$nb" --version | sed -n 's/^backends: //p')
if [ "$backends" = cpu ]; then
  echo "ok --version lists its backends: $backends"
else
  echo "FAIL --version lists \"$backends\", not cpu alone"
fi

case_file=$root/golden/pre_gqa4_long.safetensors
"$nb" golden-eval "$case_file" "$tmp/o.safetensors" --backend onednn >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ ! -e "$tmp/o.safetensors" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
  grep -q 'backend "onednn" is not built into this binary (available: cpu)' "$tmp/err"; then
  echo "ok --backend onednn refused: $(cat "$tmp/err")"
else
  echo "FAIL --backend onednn: exit $rc, stderr: $(cat "$tmp/err")"
fi

if out=$("$nb" golden-check "$case_file" 2>&1); then
  echo "ok golden $(basename "$case_file" .safetensors) on this build: $(head -n 1 <<<"$out" | sed 's/^[^:]*: //')"
else
  echo "FAIL golden $(basename "$case_file" .safetensors) on this build: $out"
fi

# Its op test: cpu fp32 against itself, bf16 skipped, no other backend.
"$root/$build/tests/test_backends" >"$tmp/ops.out" 2>&1
rc=$?
n=$(grep -c '^ok cpu fp32' "$tmp/ops.out")
if [ "$rc" -eq 0 ] && [ "$n" -gt 0 ] && ! grep -q '^FAIL' "$tmp/ops.out" && ! grep -q '^ok onednn' "$tmp/ops.out"; then
  echo "ok its test_backends: $n checks of cpu fp32, $(grep '^skip' "$tmp/ops.out" | head -n 1)"
else
  echo "FAIL its test_backends: status $rc, $(grep -m 3 '^FAIL' "$tmp/ops.out")"
fi

out=$("$root/tools/layers.sh" --quiet "$root/$build/libnormgrow_train.a" "$root/$build/libnormgrow_registry.a" \
  "$root/$build/libnormgrow_cpu.a" "$root/$build/libnormgrow.a" 2>&1 | tail -n 1)
case $out in
  ok*) echo "$out" ;;
  *) echo "FAIL its libraries: $out" ;;
esac
