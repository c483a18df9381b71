#!/usr/bin/env bash
# The layers (docs/design.md "Layers", tools/layers.sh): the sources' include
# graph has no circle and no upward include, the op table and the CUDA sources
# reach no JSON library, and this build's libraries, in link order, call none
# linked above them. Then the checker itself: a copy of the sources with an
# upward include, one with a circle, and two libraries where the lower calls
# the upper are each refused.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
build=$(dirname "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# This build's libraries in link order (the Makefile's NG_LIBS), those it has.
libs=()
for l in train registry cuda onednn cpu; do
  [ -f "$build/libnormgrow_$l.a" ] && libs+=("$build/libnormgrow_$l.a")
done
libs+=("$build/libnormgrow.a")
"$root/tools/layers.sh" --quiet "${libs[@]}" || echo "FAIL tools/layers.sh: the layers above do not hold"

# The sources the checker reads, copied; refused WHAT FILE LINE WANT appends LINE
# to FILE there and says "ok" when the checker refuses the copy with a line
# matching WANT (then puts FILE back).
(cd "$root" && tar -cf - include/normgrow/*.h ref/*.[ch] accel/*.c accel/cuda/*.c accel/cuda/*.cu \
  accel/cuda/*.h tools/*.[ch] tests/*.[ch] tests/fuzz/*.[ch]) | (mkdir -p "$tmp/src" && tar -xf - -C "$tmp/src")
refused() {
  local what=$1 file=$2 line=$3 want=$4 out
  cp "$tmp/src/$file" "$tmp/orig"
  echo "$line" >>"$tmp/src/$file"
  out=$("$root/tools/layers.sh" --quiet --root "$tmp/src" 2>&1)
  if [ $? -ne 0 ] && grep -q "^FAIL .*$want" <<<"$out"; then
    echo "ok layers.sh refuses $what: $(grep '^FAIL' <<<"$out" | head -n 1)"
  else
    echo "FAIL layers.sh accepts $what: $out"
  fi
  cp "$tmp/orig" "$tmp/src/$file"
}
refused "an upward include" ref/model.c '#include "normgrow/registry.h"' \
  'ref/model.c (core) includes include/normgrow/registry.h (registry)'
refused "an include circle" include/normgrow/enums.h '#include "normgrow/backend.h"' 'include circle'
refused "a JSON header under the CUDA sources" include/normgrow/divergence.h '#include "normgrow/config.h"' \
  'reach <cJSON.h> through: include/normgrow/config.h'

# Two libraries, the lower (lo) calling the upper (hi).
printf 'int lo(void);\nint hi(void) { return lo(); }\n' >"$tmp/hi.c"
printf 'int hi(void);\nint lo(void) { return 1; }\nint lo2(void) { return hi(); }\n' >"$tmp/lo.c"
for l in hi lo; do
  cc -c "$tmp/$l.c" -o "$tmp/$l.o" && ar rcs "$tmp/lib$l.a" "$tmp/$l.o"
done
out=$("$root/tools/layers.sh" --quiet --root "$tmp/src" "$tmp/libhi.a" "$tmp/liblo.a" 2>&1)
if [ $? -ne 0 ] && grep -q '^FAIL liblo.a calls up into libhi.a: hi$' <<<"$out"; then
  echo "ok layers.sh refuses a library calling one linked above it: $(grep '^FAIL' <<<"$out")"
else
  echo "FAIL layers.sh accepts a library calling one linked above it: $out"
fi
