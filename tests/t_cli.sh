#!/usr/bin/env bash
# Command-line conventions: --help, -h, help COMMAND and COMMAND --help print
# usage on standard output and exit 0; --version names the version, the
# backends and the BLAS kernels; every command refuses an option it does not
# take with one line on stderr and a non-zero exit (no command silently
# ignores an option, e.g. a precision it does not have).
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for form in --help -h help; do
  if "$bin" $form >"$tmp/out" 2>"$tmp/err" && grep -q '^usage: normgrow' "$tmp/out" && [ ! -s "$tmp/err" ]; then
    echo "ok normgrow $form: usage on stdout, exit 0"
  else
    echo "FAIL normgrow $form: exit or output wrong"
  fi
done
if "$bin" >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL normgrow without a command exits 0"
else
  grep -q '^usage: normgrow' "$tmp/err" && echo "ok normgrow without a command: usage on stderr, non-zero exit" ||
    echo "FAIL normgrow without a command: no usage on stderr"
fi

commands=$("$bin" --help | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p; s/^  \([a-z][a-z-]*\)$/\1/p')
[ "$(printf '%s\n' $commands | wc -l)" -ge 12 ] && echo "ok --help lists $(printf '%s\n' $commands | wc -l) commands" ||
  echo "FAIL --help lists too few commands: $commands"
for cmd in $commands; do
  for form in "$cmd --help" "$cmd -h" "help $cmd"; do
    if "$bin" $form >"$tmp/out" 2>"$tmp/err" && grep -q "^usage: normgrow $cmd" "$tmp/out" && [ ! -s "$tmp/err" ]; then
      echo "ok normgrow $form"
    else
      echo "FAIL normgrow $form: exit $?, stdout $(head -c 80 "$tmp/out"), stderr $(head -c 80 "$tmp/err")"
    fi
  done
  "$bin" "$cmd" x y z --no-such-option 1 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
    grep -q -- "--no-such-option" "$tmp/err"; then
    echo "ok $cmd refuses an unknown option: $(cat "$tmp/err")"
  else
    echo "FAIL $cmd with an unknown option: exit $rc, stderr: $(cat "$tmp/err")"
  fi
done

# A mistyped command: one line naming the closest command (swapped letters,
# a letter missing or wrong); a name close to none gets no guess.
for typo in tarin:train diga:diag exprot:export golden-chek:golden-check plna:plan xyzzy:; do
  "$bin" "${typo%%:*}" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  want=${typo#*:}
  if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "unknown command \"${typo%%:*}\"" "$tmp/err" &&
    if [ -n "$want" ]; then grep -q "did you mean \"$want\"?" "$tmp/err"; else ! grep -q "did you mean" "$tmp/err"; fi; then
    echo "ok mistyped command ${typo%%:*}: $(cat "$tmp/err")"
  else
    echo "FAIL mistyped command ${typo%%:*}: exit $rc, stderr: $(cat "$tmp/err")"
  fi
done

# An option missing its value before the next option says so (not "2 arguments given").
"$bin" train --seed --run-dir "$tmp/d" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "option --seed needs a value (--run-dir follows it)" "$tmp/err" &&
  [ ! -e "$tmp/d" ]; then
  echo "ok an option without its value: $(cat "$tmp/err")"
else
  echo "FAIL an option without its value: exit $rc, stderr: $(cat "$tmp/err")"
fi

# A backend or precision that is not there: one line naming it, no output.
case_file=$root/golden/pre_gqa4_long.safetensors
# ONEDNN_MAX_CPU_ISA=AVX512_CORE hides AVX-512 BF16 and AMX from oneDNN: a CPU without them.
# A build without oneDNN (make ONEDNN=0) refuses the backend itself.
refusals=("--precision bf16:cpu" "--backend nosuch:nosuch" "--precision fp16:fp16" "--backend onednn --precision half:half")
if "$bin" --version | grep -Eq '^backends:.*\bonednn\b'; then
  refusals+=("--backend onednn --precision bf16:AVX-512 BF16")
else
  refusals+=("--backend onednn:backend \"onednn\" is not built into this binary (available: cpu")
fi
for args in "${refusals[@]}"; do
  ONEDNN_MAX_CPU_ISA=AVX512_CORE "$bin" golden-eval "$case_file" "$tmp/o.safetensors" ${args%%:*} >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ ! -e "$tmp/o.safetensors" ] &&
    [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "${args#*:}" "$tmp/err"; then
    echo "ok golden-eval ${args%%:*} refused: $(cat "$tmp/err")"
  else
    echo "FAIL golden-eval ${args%%:*}: exit $rc, stderr: $(cat "$tmp/err")"
  fi
done

# Nothing is replaced without --force (docs/runs.md): golden-eval's OUT and
# golden-make's CASE are refused in one line and left as they were; --force
# replaces them.
spec=$(ls "$root"/golden/specs/*.json | head -n 1)
for form in "golden-eval $case_file" "golden-make $spec"; do
  printf 'taken' >"$tmp/taken"
  "$bin" $form "$tmp/taken" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "--force" "$tmp/err" &&
    [ "$(cat "$tmp/taken")" = taken ] && "$bin" $form "$tmp/taken" --force >/dev/null 2>&1 &&
    [ "$(stat -c %s "$tmp/taken")" -gt 5 ]; then
    echo "ok ${form%% *} refuses to replace its output without --force: $(cat "$tmp/err")"
  else
    echo "FAIL ${form%% *} with an existing output: exit $rc, stderr: $(cat "$tmp/err")"
  fi
done

if "$bin" --version >"$tmp/out" 2>&1 && grep -q '^normgrow [0-9]' "$tmp/out" && grep -q '^backends: .*cpu' "$tmp/out" &&
  grep -q '^BLAS: .*kernels [A-Za-z0-9]' "$tmp/out"; then
  echo "ok --version: $(tr '\n' ' ' <"$tmp/out" | cut -c1-160)"
else
  echo "FAIL --version: $(cat "$tmp/out")"
fi

# The OpenMP waits normgrow computes with (tools/normgrow.c prepare_runtime): passive after a
# short spin when the user chose no policy; a policy of the user's own left as it is. Read
# from the environment of a running command, after normgrow has run itself again.
waits() {  # env assignments...: the OMP_WAIT_POLICY and GOMP_SPINCOUNT of a running bench
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" "$bin" bench --backend cpu --steps 1 >/dev/null 2>&1 &
  local pid=$! got='' exe
  exe=$(realpath "$bin")
  for _ in $(seq 50); do  # normgrow's environment, not env's before it runs normgrow
    got=''
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] &&
      got=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -E '^(OMP_WAIT_POLICY|GOMP_SPINCOUNT)=' | sort | tr '\n' ' ')
    case $got in *OMP_WAIT_POLICY=*) break ;; esac
    sleep 0.1
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "$got"
}
got=$(waits)
[ "$got" = "GOMP_SPINCOUNT=20000 OMP_WAIT_POLICY=passive " ] && echo "ok no wait policy given: $got" ||
  echo "FAIL no wait policy given: $got"
got=$(waits OMP_WAIT_POLICY=active)
[ "$got" = "OMP_WAIT_POLICY=active " ] && echo "ok the user's wait policy kept, no spin count added: $got" ||
  echo "FAIL the user's wait policy: $got"
got=$(waits GOMP_SPINCOUNT=5)
[ "$got" = "GOMP_SPINCOUNT=5 OMP_WAIT_POLICY=passive " ] && echo "ok the user's spin count kept: $got" ||
  echo "FAIL the user's spin count: $got"
