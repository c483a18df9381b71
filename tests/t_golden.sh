#!/usr/bin/env bash
# Golden regression: every case in golden/ recomputed and compared within
# the contract's tolerances (docs/golden-contract.md; worst error per tensor
# family printed); the cases pass under every OpenBLAS kernel family this CPU
# runs and 1, 2 and 3 threads (a case must hold on every machine, not only the
# one that wrote it); golden-eval's output is the same bytes on two runs with
# the same threads.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for case in "$root"/golden/*.safetensors; do
  name=$(basename "$case" .safetensors)
  if out=$("$bin" golden-check "$case" 2>&1); then
    echo "ok golden $name: $(printf '%s\n' "$out" | head -n 1 | sed 's/^[^:]*: //')"
  else
    echo "FAIL golden $name:"
    printf '%s\n' "$out" | sed 's/^/  /'
  fi
done
"$bin" golden-check "$root"/golden/*.safetensors | grep '^worst'

# The loss in chunks of one token, and recomputed blocks: still within the
# tolerances; recompute alone changes no bit of any output.
for opts in "--loss-chunk 1" "--loss-chunk 3 --recompute on"; do
  if out=$("$bin" golden-check "$root"/golden/*.safetensors $opts 2>&1); then
    echo "ok golden with $opts: $(printf '%s\n' "$out" | grep '^worst')"
  else
    echo "FAIL golden with $opts:"
    printf '%s\n' "$out" | grep -v PASS | sed 's/^/  /'
  fi
done

# Every other backend of the build, in each precision it runs on this machine
# (bf16 by the contract's reduced-precision rule), on every case. cuda without
# a usable device is one skip line (tools/gpu_check.sh runs it on a GPU).
for backend in $("$bin" --version | sed -n 's/^backends: //p' | tr -d ','); do
  [ "$backend" = cpu ] && continue
  for precision in fp32 bf16; do
    out=$("$bin" golden-check "$root"/golden/*.safetensors --backend "$backend" --precision "$precision" 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$backend" = cuda ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
      printf '%s\n' "$out" | grep -q '^normgrow: backend "cuda": '; then
      echo "skip golden cases on cuda: $out"
      break
    elif [ "$rc" -eq 0 ]; then
      echo "ok golden cases on $backend $precision: $(printf '%s\n' "$out" | grep '^worst')"
    elif [ "$precision" = bf16 ] && printf '%s\n' "$out" | grep -q 'needs a CPU with'; then
      echo "skip golden cases on $backend bf16: $out"
    else
      echo "FAIL golden cases on $backend $precision:"
      printf '%s\n' "$out" | grep -E 'FAIL|error|normgrow:|^worst' | sed 's/^/  /'
    fi
  done
done

case=$root/golden/post_untied_final_gqa2_teacher.safetensors
"$bin" golden-eval "$case" "$tmp/kept.safetensors" &&
  "$bin" golden-eval "$case" "$tmp/recomputed.safetensors" --recompute on &&
  # exact: recompute runs each block's forward again by the same calls at the same shapes
  if cmp -s "$tmp/kept.safetensors" "$tmp/recomputed.safetensors"; then
    echo "ok golden-eval with recompute: every output bit-identical"
  else
    echo "FAIL golden-eval with recompute: outputs differ"
  fi
for threads in 1 2; do
  "$bin" --threads "$threads" golden-eval "$case" "$tmp/a.safetensors" --force &&
    "$bin" --threads "$threads" golden-eval "$case" "$tmp/b.safetensors" --force &&
    if cmp -s "$tmp/a.safetensors" "$tmp/b.safetensors"; then  # exact: one run against itself
      echo "ok golden-eval deterministic with $threads threads"
    else
      echo "FAIL golden-eval deterministic with $threads threads: outputs differ"
    fi
done

# Machine independence: every OpenBLAS kernel family this CPU can run (as
# OPENBLAS_CORETYPE selects them; "default" is normgrow's own choice) x threads.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
families="default Prescott"
for f in "avx Sandybridge" "avx2 Haswell" "avx512f SkylakeX" "avx512_bf16 Cooperlake"; do
  case " $flags " in *" ${f% *} "*) families="$families ${f#* }" ;; esac
done
for family in $families; do
  for threads in 1 2 3; do
    if [ "$family" = default ]; then env=(env -u OPENBLAS_CORETYPE); else env=(env OPENBLAS_CORETYPE="$family"); fi
    if out=$("${env[@]}" "$bin" --threads "$threads" golden-check "$root"/golden/*.safetensors 2>&1); then
      echo "ok golden cases with BLAS family $family, $threads threads"
    else
      echo "FAIL golden cases with BLAS family $family, $threads threads:"
      printf '%s\n' "$out" | grep -E 'FAIL|error|normgrow:' | sed 's/^/  /'
    fi
  done
done
