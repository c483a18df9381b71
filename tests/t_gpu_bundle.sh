#!/usr/bin/env bash
# shellcheck disable=SC2016  # check's conditions are evaluated when it runs
# The GPU bundle (make gpu-bundle, tools/gpu_bundle.sh) runs bare: unpacked as on a
# bare CUDA machine and run in a mount namespace where the system's library
# directories hold glibc, libstdc++ and libgcc alone (OpenBLAS, oneDNN, cJSON, PCRE2,
# utf8proc, zlib, OpenMPI, libgomp: gone), its normgrow prints its version and passes
# every golden case on the CPU and on oneDNN, test_cuda and bench_cuda run as they do
# without a GPU, test_backends loads and takes the op set that tools/gpu_check.sh hands
# it under compute-sanitizer. The loader's own record (LD_DEBUG=libs,files)
# of every object each process mapped must name the bundle's lib/ or a library the
# bundle takes from the machine (tools/gpu_bundle.sh outside: glibc's, libstdc++,
# libgcc, CUDA's cuBLAS and NCCL), and the build's own normgrow must fail to start
# there (the hiding works). Then tools/gpu_check.sh --rehearse on the bundle: every step
# in its order, the limits within the 6 minutes, the steps that need a GPU skipped saying
# what they would run, the toy arm's comparison on the CPU's metrics, OUTDIR holding
# gpu_check.tgz (the logs) and summary.txt alone, the summary printed last. Where make
# test builds no bundle (no CUDA backend, a sanitizer build) it says so in one skip line.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
bundle=$(dirname "$bin")/gpu-bundle
if [ -n "${NG_BUNDLE_SKIP:-}" ]; then
  echo "skip t_gpu_bundle: $NG_BUNDLE_SKIP: make test builds no GPU bundle"
  exit 0
fi
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
check() { if eval "$2"; then ok "$1"; else fail "$1${3:+: $3}"; fi; }

[ -f "$bundle/SHA256SUMS" ] || { fail "no bundle at $bundle (make gpu-bundle)"; exit 1; }
bytes=$(du -sb "$bundle" | cut -f1)
check "the bundle is at most 48 MiB ($((bytes >> 20)) MiB)" '[ "$bytes" -le $((48 << 20)) ]'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=$tmp/run
"$root/tools/gpu_bundle.sh" unpack "$bundle" "$dir" || { fail "unpack"; exit 1; }
cuda_path=$("$root/tools/gpu_bundle.sh" cuda-libs "$dir") || { fail "cuBLAS and NCCL not found here"; exit 1; }

# The replacement of /usr/lib: x86_64-linux-gnu/ with glibc, libstdc++ and libgcc alone.
allow=$tmp/allow
mkdir -p "$allow/x86_64-linux-gnu" "$tmp/empty"
mapfile -t system < <("$root/tools/gpu_bundle.sh" outside system)
for p in "${system[@]}"; do
  # shellcheck disable=SC2086  # p is a pattern
  for f in /usr/lib/x86_64-linux-gnu/$p; do [ -e "$f" ] && cp -L "$f" "$allow/x86_64-linux-gnu/"; done
done
# Every other directory the loader may search: its cache's and the defaults, but for
# CUDA's (its libraries are the ones a bundle may take from the machine; others found
# there fail the check below) and those under /usr/lib, which go with it.
mapfile -t hide < <({ ldconfig -p | sed -n 's|.* => \(.*\)/[^/]*$|\1|p'; echo /usr/local/lib; } |
  sort -u | while read -r d; do
    d=$(readlink -f "$d")
    case $d in /usr/lib | /usr/lib/* | /lib | /lib/*) ;; *) [ -d "$d" ] && echo "$d" ;; esac
  done | grep -vxF -f <(tr ':' '\n' <<<"$cuda_path" | xargs -n1 readlink -f))

# The set compute-sanitizer runs there (gpu_check.sh's sanitize step).
sanitize_set=$(sed -n 's|.*"$dir/bin/test_backends" \(cuda[a-z_ ]*\) >.*|\1|p' "$root/tools/gpu_check.sh")
check "gpu_check.sh's sanitize step names a test_backends set: $sanitize_set" '[ -n "$sanitize_set" ]'

# In the namespace: bash builtins and the binaries under test alone (the mounts go
# first; /usr/lib last, as mount itself needs it).
cat >"$tmp/inside.sh" <<'EOF'
set -u
tmp=$1 dir=$2 root=$3 sysbin=$4 cuda_path=$5 sanitize_set=$6
shift 6
for d in "$@"; do mount --bind "$tmp/empty" "$d" || exit 90; done
[ -L /lib ] || mount --bind "$tmp/allow/x86_64-linux-gnu" /lib/x86_64-linux-gnu || exit 90
mount --bind "$tmp/allow" /usr/lib || exit 90
cd "$root" || exit 91
"$sysbin" --version >"$tmp/sys.out" 2>&1
echo $? >"$tmp/sys.rc"
export LD_LIBRARY_PATH=$cuda_path LD_DEBUG=libs,files
run() {  # run NAME CMD...: output in NAME.out, status in NAME.rc, the loader's record in ld.NAME.*
  local name=$1
  shift
  LD_DEBUG_OUTPUT=$tmp/ld.$name "$@" >"$tmp/$name.out" 2>&1
  echo $? >"$tmp/$name.rc"
}
run version "$dir/bin/normgrow" --version
run golden "$dir/bin/normgrow" golden-check golden/*.safetensors
run golden_onednn "$dir/bin/normgrow" golden-check --backend onednn golden/*.safetensors
run test_cuda "$dir/bin/test_cuda"
run bench_cuda "$dir/bin/bench_cuda" paper bf16 --reps 1
LD_TRACE_LOADED_OBJECTS=1 run test_backends "$dir/bin/test_backends"
# shellcheck disable=SC2086  # the set is words
run sanitize_set "$dir/bin/test_backends" $sanitize_set
exit 0
EOF
ns=(unshare -m)
[ "$(id -u)" -eq 0 ] || ns=(unshare -rm)
"${ns[@]}" bash "$tmp/inside.sh" "$tmp" "$dir" "$root" "$bin" "$cuda_path" "$sanitize_set" "${hide[@]}"
rc=$?
check "the namespace hides the system's libraries (${#hide[@]} directories and /usr/lib)" '[ $rc -eq 0 ]' \
  "status $rc (90: a mount failed, 91: no $root)"
[ $rc -eq 0 ] || exit 1

check "the build's own normgrow cannot start there: $(head -c 160 "$tmp/sys.out")" \
  '[ "$(cat "$tmp/sys.rc")" -ne 0 ] && grep -q "error while loading shared libraries" "$tmp/sys.out"'
check "bundle normgrow --version lists cuda" \
  '[ "$(cat "$tmp/version.rc")" -eq 0 ] && grep -Eq "^backends:.*\bcuda\b" "$tmp/version.out"' \
  "$(head -c 300 "$tmp/version.out")"
check "bundle normgrow golden-check: every case on the CPU" \
  '[ "$(cat "$tmp/golden.rc")" -eq 0 ] && grep -Eq "^0 of [1-9][0-9]* cases failed" "$tmp/golden.out"' \
  "$(tail -2 "$tmp/golden.out")"
if grep -Eq "^backends:.*\bonednn\b" "$tmp/version.out"; then
  check "bundle normgrow golden-check --backend onednn: every case" \
    '[ "$(cat "$tmp/golden_onednn.rc")" -eq 0 ] && grep -Eq "^0 of [1-9][0-9]* cases failed" "$tmp/golden_onednn.out"' \
    "$(tail -2 "$tmp/golden_onednn.out")"
else
  echo "skip bundle golden-check --backend onednn: this build has no oneDNN backend (ONEDNN=0)"
fi
check "bundle test_cuda runs its checks without a GPU and skips the device's" \
  '[ "$(cat "$tmp/test_cuda.rc")" -eq 0 ] && grep -q "^skip test_cuda device checks" "$tmp/test_cuda.out" && ! grep -q "^FAIL" "$tmp/test_cuda.out"' \
  "$(grep -m3 -E "^FAIL|error" "$tmp/test_cuda.out")"
check "bundle bench_cuda says there is no device" \
  '[ "$(cat "$tmp/bench_cuda.rc")" -eq 1 ] && grep -q "^bench_cuda: no usable CUDA device\|^bench_cuda: no CUDA device" "$tmp/bench_cuda.out"' \
  "$(head -c 300 "$tmp/bench_cuda.out")"
check "bundle test_backends takes the sanitizer's set ($sanitize_set) and skips cuda without a GPU" \
  '[ "$(cat "$tmp/sanitize_set.rc")" -eq 0 ] && grep -q "^skip cuda" "$tmp/sanitize_set.out" && ! grep -q "^FAIL" "$tmp/sanitize_set.out"' \
  "$(head -c 300 "$tmp/sanitize_set.out")"
check "bundle test_backends loads" '[ "$(cat "$tmp/test_backends.rc")" -eq 0 ] && ! grep -q "not found" "$tmp/test_backends.out"' \
  "$(grep -m3 "not found" "$tmp/test_backends.out")"

# Every object the loader mapped: the file it last tried before "generating link map".
mapfile -t allowed < <("$root/tools/gpu_bundle.sh" outside system; "$root/tools/gpu_bundle.sh" outside cuda)
for name in version golden golden_onednn test_cuda bench_cuda test_backends; do
  mapped=$(cat "$tmp/ld.$name".* 2>/dev/null | awk '
    /trying file=/ { sub(/.*trying file=/, ""); last = $0 }
    /generating link map/ { print last }' | sort -u)
  n=0 stray=()
  while read -r f; do
    [ -n "$f" ] || continue
    n=$((n + 1))
    [ "$(readlink -f "$(dirname "$f")")" = "$(readlink -f "$dir/lib")" ] && continue
    b=$(basename "$f") hit=0
    for p in "${allowed[@]}"; do
      # shellcheck disable=SC2254  # p is a pattern
      case $b in $p) hit=1 ;; esac
    done
    [ $hit -eq 1 ] || stray+=("$f")
  done <<<"$mapped"
  check "$name: all $n libraries mapped are the bundle's or glibc, libstdc++, libgcc, CUDA's" \
    '[ $n -ge 17 ] && [ ${#stray[@]} -eq 0 ]' "${stray[*]:-only $n mapped}"
done

# The rehearsal.
"$root/tools/gpu_check.sh" --rehearse --prebuilt "$bundle" "$tmp/out" >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
check "gpu_check --rehearse exits 0" '[ $rc -eq 0 ]' "status $rc: $(tail -3 "$tmp/stderr")"
s=$tmp/out/summary.txt
check "OUTDIR holds gpu_check.tgz and summary.txt alone" \
  '[ "$(cd "$tmp/out" && ls | tr "\n" " ")" = "gpu_check.tgz summary.txt " ]' "$(ls "$tmp/out" | tr '\n' ' ')"
order=$(sed -n 's/^\([a-z_]*\) \{1,\}\(ok\|FAIL\|skipped\).*/\1/p' "$s" | tr '\n' ' ')
check "the steps in order: $order" '[ "$order" = "libs relink op_test sanitize op_table golden bench toy nccl " ]'
limits=$(sed -n 's/^step limits: \([0-9]*\)s in all.*/\1/p' "$s")
check "the step limits add up to ${limits}s, at most 360s" '[ -n "$limits" ] && [ "$limits" -le 360 ]'
declared=$(sed -n 's/^#   \([a-z_]*\) \{1,\}\([0-9]\{1,\}\) .*/\2/p' "$root/tools/gpu_check.sh" | awk "{ s += \$1 } END { print s }")
check "the limits of the script's header add up to the same ${declared}s" '[ "$declared" = "$limits" ]'
check "libs: the bundle unpacks and every binary's libraries resolve" \
  'grep -q "^libs *ok" "$s" && grep -q "^relink *skipped (every binary loads)" "$s"'
check "every GPU step skipped saying what it would run" \
  '[ "$(grep -c "skipped (rehearsal: needs a GPU; would run: " "$s")" -eq 6 ]'
check "toy: the comparison ran on the CPU metrics" \
  'grep -q "^toy .*the comparison ran on the CPU.s metrics against themselves: ok" "$s"'
check "the summary is the last thing printed" '[ "$(tail -n "$(wc -l <"$s")" "$tmp/stdout")" = "$(cat "$s")" ]'
mkdir "$tmp/x" && tar xzf "$tmp/out/gpu_check.tgz" -C "$tmp/x"
check "gpu_check.tgz holds the logs and the bundle's MANIFEST" \
  '[ -f "$tmp/x/gpu_check/libs.log" ] && [ -f "$tmp/x/gpu_check/toy.log" ] && [ -f "$tmp/x/gpu_check/MANIFEST" ] && [ -f "$tmp/x/gpu_check/summary.txt" ]'
[ $fails -eq 0 ]
