#!/usr/bin/env bash
# shellcheck disable=SC2016  # '$ORIGIN' is for the loader
# normgrow gpu_bundle: what a bare CUDA machine runs, built on this one (docs/cuda.md,
# "The GPU window"). A bare machine has the CUDA toolkit (or PyTorch's CUDA libraries)
# and nothing of normgrow's Debian packages.
#
#   tools/gpu_bundle.sh pack BUILD BUNDLE    (make gpu-bundle) next to BUNDLE/bin, which make
#       links, writes lib.tgz, lib.list, needed, toy/, relink/, MANIFEST and SHA256SUMS;
#       fails when the folder passes 48 MiB
#   tools/gpu_bundle.sh unpack BUNDLE DIR    checks SHA256SUMS; DIR/bin, DIR/lib, DIR/toy,
#       DIR/needed
#   tools/gpu_bundle.sh cuda-libs DIR        the directories holding the CUDA libraries that
#       DIR/bin needs from the machine, colon-separated (for LD_LIBRARY_PATH); fails naming
#       any it cannot find
#   tools/gpu_bundle.sh relink BUNDLE DIR    the fallback where DIR/bin (from unpack) does not
#       run: compiles the bundle's .cu sources with this machine's nvcc and links DIR/bin anew
#       from the bundle's objects and DIR/lib
#   tools/gpu_bundle.sh outside [system|cuda] the library names a bundle may take from the
#       machine, one per line (shell patterns): the system's, CUDA's, or both
#
# The bundle (BUNDLE/):
#   bin/        normgrow, test_cuda, test_backends, bench_cuda: the CUDA runtime static,
#               DT_RPATH $ORIGIN/../lib
#   lib.tgz     lib/: every shared library of bin/ but those `outside` names (OpenBLAS,
#               oneDNN, cJSON, PCRE2, utf8proc, zlib, OpenMPI, libgomp, libgfortran, ...),
#               each under its soname, a RUNPATH of its own made $ORIGIN (patchelf);
#               lib.list says where each came from
#   toy/        the toy distillation arm of tools/gpu_toy (arm.json, its data, its teacher's
#               final checkpoint) and cpu.jsonl, the arm's metrics trained on this CPU
#   needed      the libraries bin/ names (DT_NEEDED), for cuda-libs and relink
#   relink/     the objects of bin/ and the libraries of the build but CUDA's (libs: their
#               link order), the CUDA sources and the headers they include, nvcc's flags
#   MANIFEST    commit, compilers, glibc, what the machine must have; SHA256SUMS of every file
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
limit_mib=48
bins=(normgrow test_cuda test_backends bench_cuda)
usage="usage: tools/gpu_bundle.sh pack BUILD BUNDLE | unpack BUNDLE DIR | cuda-libs DIR | relink BUNDLE DIR | outside [system|cuda]"

die() {
  echo "gpu_bundle: $*" >&2
  exit 1
}

# The libraries a bundle takes from the machine: the system's (glibc's, libstdc++,
# libgcc) and CUDA's (cuBLAS, NCCL, the driver's libcuda; the CUDA runtime is linked in).
system_names() {
  printf '%s\n' linux-vdso.so.1 'ld-linux-x86-64.so.*' 'libc.so.*' 'libm.so.*' 'libpthread.so.*' \
    'libdl.so.*' 'librt.so.*' 'libstdc++.so.*' 'libgcc_s.so.*'
}
cuda_names() { printf '%s\n' 'libcublas.so.*' 'libcublasLt.so.*' 'libnccl.so.*' 'libcuda.so.*'; }
outside() {
  case ${1:-} in
    system) system_names ;;
    cuda) cuda_names ;;
    "") system_names; cuda_names ;;
    *) die "$usage" ;;
  esac
}

# matches NAME PATTERNS...: whether NAME matches one of the shell patterns.
matches() {
  local n=$1 p
  shift
  for p in "$@"; do
    # shellcheck disable=SC2254  # p is a pattern
    case $n in $p) return 0 ;; esac
  done
  return 1
}

# ---------------------------------------------------------------- pack

# soname path, one line per library the binaries load that the bundle must carry.
bundled_libs() {
  local bundle=$1 b name arrow path rest
  mapfile -t out < <(outside)
  for b in "${bins[@]}"; do
    while read -r name arrow path rest; do
      [ "$arrow" = "=>" ] || continue
      [ "$path" = "not" ] && die "bin/$b: $name not found here"
      matches "$name" "${out[@]}" && continue
      case $name in libcudart.so.*) die "bin/$b needs $name: the CUDA runtime must be static" ;; esac
      echo "$name $path"
    done < <(ldd "$bundle/bin/$b")
  done | sort -u
}

# lib.tgz and lib.list, unless the list (name, source, size, time) is what it was.
pack_libs() {
  local bundle=$1 list name path
  list=$(bundled_libs "$bundle" | while read -r name path; do
    echo "$name $(readlink -f "$path") $(stat -Lc '%s %Y' "$path")"
  done)
  if [ -f "$bundle/lib.tgz" ] && [ -f "$bundle/lib.list" ] && [ "$list" = "$(cat "$bundle/lib.list")" ]; then
    return
  fi
  local stage=$bundle/lib.tmp
  rm -rf "$stage" "$bundle/lib.tgz"
  mkdir -p "$stage/lib"
  while read -r name path _; do
    cp -L "$path" "$stage/lib/$name"
    # A library's own RUNPATH would send the search for its dependencies to the
    # system's directories (OpenMPI's): it looks beside itself instead.
    if readelf -d "$stage/lib/$name" | grep -qE '\((RPATH|RUNPATH)\)'; then
      patchelf --set-rpath '$ORIGIN' "$stage/lib/$name"
    fi
  done <<<"$list"
  tar czf "$bundle/lib.tgz.tmp" -C "$stage" lib
  mv "$bundle/lib.tgz.tmp" "$bundle/lib.tgz"
  echo "$list" >"$bundle/lib.list"
  rm -rf "$stage"
}

# toy/: the arm of tools/gpu_toy trained on this CPU, again when normgrow, the configs
# or the text it reads are newer than its metrics.
pack_toy() {
  local build=$1 bundle=$2 bin=$1/normgrow f stale=0
  local text=("$root"/README.md "$root"/docs/*.md)
  if [ -f "$bundle/toy/cpu.jsonl" ]; then
    for f in "$bin" "$root"/tools/gpu_toy/*.json "${text[@]}"; do
      [ "$f" -nt "$bundle/toy/cpu.jsonl" ] && stale=1
    done
    [ $stale -eq 0 ] && return
  fi
  local t=$bundle/toy.tmp
  rm -rf "$t"
  mkdir -p "$t"
  cp "$root"/tools/gpu_toy/*.json "$t/"
  (
    cd "$t"
    "$bin" data "${text[@]}" --val-fraction 0.25 --out data >log.txt 2>&1 &&
      "$bin" train teacher.json >>log.txt 2>&1 && "$bin" train arm.json >>log.txt 2>&1
  ) || die "the toy arm failed on the CPU: $(tail -3 "$t/log.txt")"
  mv "$t/arm/metrics.jsonl" "$t/cpu.jsonl"
  mv "$t/arm/backend.jsonl" "$t/cpu-backend.jsonl"
  mv "$t/teacher/final.safetensors" "$t/teacher.final"
  rm -rf "$t/arm" "$t/teacher" "$t/log.txt"
  mkdir "$t/teacher"
  mv "$t/teacher.final" "$t/teacher/final.safetensors"
  rm -rf "$bundle/toy"
  mv "$t" "$bundle/toy"
}

# relink/: objects (debug sections stripped), sources, flags, the libraries linked.
pack_relink() {
  local build=$1 bundle=$2 r=$2/relink.tmp
  rm -rf "$r"
  mkdir -p "$r/obj/tools" "$r/src/accel/cuda"
  cp "$build"/tools/*.o "$r/obj/tools/"
  cp "$build"/tests/test_cuda.o "$build"/tests/test_backends.o "$build"/accel/cuda/bench_cuda.o \
    "$build"/accel/cuda/launch.o "$build"/accel/cuda/comm_nccl.o "$r/obj/"
  # The libraries in link order (the Makefile's NG_LIBS), each above the ones it
  # calls; relink makes the CUDA backend's again, the others are these.
  local order="${NG_LIBS:?NG_LIBS: the libraries of the build in link order (make gpu-bundle sets it)}" l
  for l in $order; do
    echo "$l" >>"$r/libs"
    [ "$l" = libnormgrow_cuda.a ] || cp "$build/$l" "$r/"
  done
  strip --strip-debug "$r"/obj/*.o "$r"/obj/tools/*.o "$r"/*.a
  cp "$root"/accel/cuda/*.cu "$root"/accel/cuda/*.h "$r/src/accel/cuda/"
  cp -r "$root/include" "$r/src/"
  echo "${CUDA_FLAGS:?CUDA_FLAGS: the nvcc flags of the build (make gpu-bundle sets it)}" >"$r/nvcc-flags"
  rm -rf "$bundle/relink"
  mv "$r" "$bundle/relink"
}

# The newest glibc symbol version any binary or bundled library asks for.
glibc_needed() {
  local bundle=$1
  { for b in "${bins[@]}"; do objdump -T "$bundle/bin/$b"; done
    cut -d' ' -f2 "$bundle/lib.list" | xargs objdump -T
  } | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1
}

# needed: every library the binaries name (their DT_NEEDED), read here so that the
# machine needs no binutils.
pack_needed() {
  local bundle=$1 b
  for b in "${bins[@]}"; do readelf -d "$bundle/bin/$b"; done |
    sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | awk '!seen[$0]++' >"$bundle/needed"
}

pack_manifest() {
  local bundle=$1
  {
    echo "normgrow GPU bundle"
    echo "commit: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
    echo "nvcc: $("${NVCC:-nvcc}" --version | sed -n 's/.*release //p')"
    echo "nvcc flags: $(cat "$bundle/relink/nvcc-flags")"
    echo "gcc: $(gcc -dumpfullversion)"
    echo "glibc: $(ldd --version | sed -n '1s/.* //p') here; the binaries ask for $(glibc_needed "$bundle")"
    echo "from the machine: $(outside | tr '\n' ' ')"
    echo "bundled (lib.tgz): $(cut -d' ' -f1 "$bundle/lib.list" | tr '\n' ' ')"
  } >"$bundle/MANIFEST"
  (cd "$bundle" && find bin lib.tgz lib.list needed toy relink MANIFEST -type f -print0 | sort -z |
    xargs -0 sha256sum >SHA256SUMS)
}

pack() {
  local build bundle
  build=$(cd "$1" && pwd) bundle=$(cd "$2" && pwd)
  for b in "${bins[@]}"; do [ -x "$bundle/bin/$b" ] || die "$bundle/bin/$b: missing (make gpu-bundle links it)"; done
  pack_libs "$bundle"
  pack_toy "$build" "$bundle"
  pack_relink "$build" "$bundle"
  pack_needed "$bundle"
  pack_manifest "$bundle"
  local bytes
  bytes=$(du -sb "$bundle" | cut -f1)
  [ "$bytes" -le $((limit_mib << 20)) ] || die "$bundle: $((bytes >> 20)) MiB, over the $limit_mib MiB a GPU call carries"
  echo "gpu_bundle: $bundle: $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB" \
    "($(wc -l <"$bundle/lib.list") libraries in lib.tgz; at most $limit_mib MiB)"
}

# ---------------------------------------------------------------- on the machine

unpack() {
  local bundle=$1 dir=$2 bad
  [ -f "$bundle/SHA256SUMS" ] || die "$bundle: no SHA256SUMS (not a bundle of make gpu-bundle?)"
  bad=$(cd "$bundle" && sha256sum -c --quiet SHA256SUMS 2>&1) || die "$bundle: files differ from SHA256SUMS: $bad"
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || die "$dir: not empty"
  cp -r "$bundle/bin" "$bundle/toy" "$bundle/needed" "$dir/"
  tar xzf "$bundle/lib.tgz" -C "$dir"
}

# Directories that may hold CUDA's libraries: the toolkit's, the loader's cache, and
# the nvidia packages of python3's site-packages (PyTorch's CUDA libraries).
cuda_dirs() {
  local d sp
  for d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && echo "$d"
  done
  ldconfig -p 2>/dev/null | sed -n 's|.* => \(.*\)/[^/]*$|\1|p' | sort -u
  for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    [ -d "$sp/nvidia" ] && find "$sp/nvidia" -maxdepth 3 -type d -name lib
  done
  return 0
}

# The directory of soname NAME among cuda_dirs, or nothing.
cuda_find() {
  local d
  while read -r d; do
    [ -e "$d/$1" ] && { echo "$d"; return; }
  done < <(cuda_dirs)
}

cuda_libs() {
  local dir=$1 name found=() missing=() d
  mapfile -t pats < <(cuda_names)
  mapfile -t names <"$dir/needed"
  # cuBLAS loads cuBLASLt: searched for too, where it is not beside it.
  for name in "${names[@]}" $(printf '%s\n' "${names[@]}" | sed -n 's/^libcublas\.so/libcublasLt.so/p'); do
    matches "$name" "${pats[@]}" || continue
    d=$(cuda_find "$name")
    if [ -n "$d" ]; then found+=("$d"); else missing+=("$name"); fi
  done
  [ ${#missing[@]} -eq 0 ] || die "not found on this machine: ${missing[*]} (searched: $(cuda_dirs | tr '\n' ' '))"
  printf '%s\n' "${found[@]}" | awk '!seen[$0]++' | paste -sd:
}

relink() {
  local bundle=$1 dir=$2 r=$1/relink nvcc cuda f libs=() name d
  nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [ -x "$nvcc" ] || die "relink: no nvcc on this machine"
  cuda=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  [ -d "$dir/lib" ] || die "relink: $dir/lib: missing (unpack the bundle first)"
  mkdir -p "$dir/relink"
  read -ra flags <"$r/nvcc-flags"
  for f in "$r"/src/accel/cuda/*.cu; do
    "$nvcc" -I"$r/src/include" "${flags[@]}" -c "$f" -o "$dir/relink/$(basename "$f" .cu).o" &
  done
  for f in "$r"/src/accel/cuda/*.cu; do wait -n || die "relink: nvcc failed"; done
  ar rcs "$dir/relink/libnormgrow_cuda.a" "$dir"/relink/*.o "$r/obj/launch.o" "$r/obj/comm_nccl.o"
  mapfile -t pats < <(cuda_names)
  while read -r name; do
    if [ -e "$dir/lib/$name" ]; then libs+=("$dir/lib/$name")
    elif matches "$name" "${pats[@]}"; then
      d=$(cuda_find "$name")
      [ -n "$d" ] || die "relink: $name not found on this machine"
      libs+=("$d/$name")
    elif [[ $name != libcudart.so.* ]]; then libs+=("-l:$name")
    fi
  done <"$1/needed"
  local static=
  for f in "$cuda"/lib64/libcudart_static.a "$cuda"/targets/x86_64-linux/lib/libcudart_static.a; do
    [ -z "$static" ] && [ -f "$f" ] && static=$f
  done
  [ -n "$static" ] || die "relink: no libcudart_static.a under $cuda"
  local link archives=() a
  while read -r a; do
    if [ "$a" = libnormgrow_cuda.a ]; then archives+=("$dir/relink/$a"); else archives+=("$r/$a"); fi
  done <"$r/libs"
  for b in "${bins[@]}"; do
    case $b in
      normgrow) link=("$r"/obj/tools/*.o) ;;
      bench_cuda) link=("$r/obj/bench_cuda.o") ;;
      *) link=("$r/obj/$b.o") ;;
    esac
    gcc -o "$dir/bin/$b" "${link[@]}" "${archives[@]}" "${libs[@]}" "$static" -ldl -lrt -lpthread -lstdc++ -lm \
      -Wl,--disable-new-dtags -Wl,-rpath,'$ORIGIN/../lib' || die "relink: linking $b failed"
  done
}

case ${1:-} in
  pack) [ $# -eq 3 ] || die "$usage"; pack "$2" "$3" ;;
  unpack) [ $# -eq 3 ] || die "$usage"; unpack "$2" "$3" ;;
  cuda-libs) [ $# -eq 2 ] || die "$usage"; cuda_libs "$2" ;;
  relink) [ $# -eq 3 ] || die "$usage"; relink "$2" "$3" ;;
  outside) [ $# -le 2 ] || die "$usage"; outside "${2:-}" ;;
  *) die "$usage" ;;
esac
