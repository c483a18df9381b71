#!/usr/bin/env bash
# normgrow's layers (docs/design.md "Layers"), from the bottom:
#   1 core      the model, losses, optimizer, data, files: ref/ and include/normgrow/,
#               less what the layers above name
#   2 backends  ref/backend_cpu.c, accel/ (backend_onednn.c, cuda/) and their headers
#               backend_cpu.h, backend_onednn.h, backend_cuda.h
#   3 registry  ref/registry.c, registry.h
#   4 trainer   ref/train.c, train.h
#   5 tools     tools/, tests/, accel/cuda/bench_cuda.c
# Prints the include graph of the sources (every "..." include, resolved to a
# path; conditional ones too), one line per file with its layer, and checks it:
# no include circle, no file includes one of a higher layer, and the op table
# and the CUDA sources reach no JSON library header. Given the
# libraries of a build in link order (the Makefile's NG_LIBS, highest first),
# also checks that no library calls a symbol defined in a library linked above
# it. Each check prints "ok ..." or "FAIL ..." (tests/run.sh counts them);
# the status is non-zero when one fails.
#   tools/layers.sh [--root DIR] [--quiet] [LIBRARY.a ...]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
quiet=0
while [ $# -gt 0 ]; do
  case $1 in
    --root) root=$(cd "$2" && pwd); shift 2 ;;
    --quiet) quiet=1; shift ;;
    *) break ;;
  esac
done
libs=("$@")
cd "$root" || exit 2
names=(core backends registry trainer tools)

# The layer (1-5) of a source or header, by its path, into $layer (0: none).
layer_of() {
  case $1 in
    tools/* | tests/* | accel/cuda/bench_cuda.c) layer=5 ;;
    ref/train.c | include/normgrow/train.h) layer=4 ;;
    ref/registry.c | include/normgrow/registry.h) layer=3 ;;
    ref/backend_cpu.c | accel/* | include/normgrow/backend_cpu.h | include/normgrow/backend_onednn.h | \
      include/normgrow/backend_cuda.h) layer=2 ;;
    ref/* | include/normgrow/*) layer=1 ;;
    *) layer=0 ;;
  esac
}

# "file included" for every quoted include, the included path resolved:
# "normgrow/x.h" in include/, anything else beside the including file.
edges() {
  local f inc
  for f in include/normgrow/*.h ref/*.[ch] accel/*.c accel/cuda/*.c accel/cuda/*.cu accel/cuda/*.h \
    tools/*.[ch] tests/*.[ch] tests/fuzz/*.[ch]; do
    [ -f "$f" ] || continue
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r inc; do
      case $inc in
        normgrow/*) echo "$f include/$inc" ;;
        *) echo "$f $(realpath -m --relative-to=. "$(dirname "$f")/$inc")" ;;
      esac
    done
  done
}

fail=0
graph=$(edges)

if [ "$quiet" -eq 0 ]; then
  echo "include graph (layer: file -> what it includes):"
  cut -d' ' -f1 <<<"$graph" | uniq | while read -r f; do
    layer_of "$f"
    printf '  %d %-8s %s -> %s\n' "$layer" "${names[layer - 1]}" "$f" \
      "$(awk -v f="$f" '$1 == f { printf "%s%s", sep, $2; sep = " " }' <<<"$graph")"
  done
fi

# A circle: tsort names the files on it.
if loop=$(tsort <<<"$graph" 2>&1 >/dev/null) && [ -z "$loop" ]; then
  echo "ok no include circle ($(wc -l <<<"$graph") includes)"
else
  echo "FAIL include circle: $(grep -v 'input contains a loop' <<<"$loop" | sed 's/^tsort: //' | tr '\n' ' ')"
  fail=1
fi

up=0
while read -r f inc; do
  layer_of "$f"; lf=$layer
  layer_of "$inc"; li=$layer
  if [ "$li" -eq 0 ]; then
    echo "FAIL $f includes $inc, a file of no layer"; up=1
  elif [ "$li" -gt "$lf" ]; then
    echo "FAIL $f (${names[lf - 1]}) includes $inc (${names[li - 1]}): an upward include"; up=1
  fi
done <<<"$graph"
[ "$up" -eq 0 ] && echo "ok no file includes one of a higher layer"
fail=$((fail | up))

# The CUDA sources (nvcc's) and the headers every backend includes reach no
# library header: the op table needs no JSON library.
start=(accel/cuda/*.cu include/normgrow/backend.h include/normgrow/enums.h include/normgrow/divergence.h)
mapfile -t reach < <(awk -v start="${start[*]}" '
  { next_of[$1] = next_of[$1] " " $2 }
  END {
    n = split(start, queue, " ")
    for (i = 1; i <= n; i++) seen[queue[i]] = 1
    for (i = 1; i <= n; i++) {
      m = split(next_of[queue[i]], nx, " ")
      for (j = 1; j <= m; j++) if (!(nx[j] in seen)) { seen[nx[j]] = 1; queue[++n] = nx[j] }
    }
    for (f in seen) print f
  }' <<<"$graph")
json=$(grep -l '^[[:space:]]*#[[:space:]]*include[[:space:]]*<cJSON.h>' "${reach[@]}" 2>/dev/null | tr '\n' ' ')
if [ -z "$json" ]; then
  echo "ok the CUDA sources and backend.h reach no <cJSON.h> (${#reach[@]} files)"
else
  echo "FAIL the CUDA sources or backend.h reach <cJSON.h> through: ${json% }"; fail=1
fi

# Calls: every symbol a library needs from the others is defined in one linked below it.
if [ ${#libs[@]} -gt 0 ]; then
  defined() { nm -g --defined-only "$1" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u; }
  needed() { nm -g --undefined-only "$1" 2>/dev/null | awk '{ print $NF }' | sort -u; }
  calls=0
  for ((i = 0; i < ${#libs[@]}; i++)); do
    below=$(for ((j = i; j < ${#libs[@]}; j++)); do defined "${libs[j]}"; done | sort -u)
    for ((j = 0; j < i; j++)); do
      bad=$(comm -12 <(needed "${libs[i]}") <(comm -23 <(defined "${libs[j]}") <(echo "$below")) | tr '\n' ' ')
      if [ -n "$bad" ]; then
        echo "FAIL $(basename "${libs[i]}") calls up into $(basename "${libs[j]}"): ${bad% }"; calls=1
      fi
    done
  done
  [ "$calls" -eq 0 ] && echo "ok no library calls one linked above it: $(for l in "${libs[@]}"; do basename "$l"; done | tr '\n' ' ')"
  fail=$((fail | calls))
fi
exit "$fail"
