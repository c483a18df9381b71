#!/usr/bin/env bash
# normgrow bootstrap: makes sure the Debian packages normgrow builds with are present.
# As root it installs what is missing; otherwise it prints the one command to run.
# It needs no network when everything is there; when something is missing and
# the package archive cannot be reached, it names what is missing and fails.
#   tools/bootstrap.sh            build dependencies (OpenBLAS with OpenMP, cJSON; python3
#                                 with numpy, scipy and matplotlib for the report)
#   tools/bootstrap.sh demo       also what `make demo` needs (fortunes)
#   tools/bootstrap.sh demo-large and GCIDE, the corpus of `make demo STUDY=large` only
#                                 (dict-gcide, which depends on dictd, Debian's
#                                 dictionary server)
#   tools/bootstrap.sh fuzz       also what `make fuzz` needs (clang, libFuzzer, libomp, python3)
#   tools/bootstrap.sh torch      also Debian's PyTorch (python3-torch), for `make bench-torch`
#                                 and `make crosscheck`
set -euo pipefail

need=(gcc make pkg-config libopenblas-openmp-dev libcjson-dev)
need+=(libpcre2-dev libutf8proc-dev zlib1g-dev)  # tokenizer and corpus reader
[ "${ONEDNN:-1}" = 0 ] || need+=(libdnnl-dev)  # the oneDNN backend (not with make ONEDNN=0)
need+=(libopenmpi-dev openmpi-bin)  # data-parallel runs over MPI (ref/comm_mpi.c)
need+=(patchelf)  # make gpu-bundle (tools/gpu_bundle.sh)
need+=(python3 python3-numpy python3-scipy python3-matplotlib)  # the report (tools/report)
if [ "${1:-}" = "demo" ] || [ "${1:-}" = "demo-large" ]; then
  need+=(fortunes fortunes-min)
fi
if [ "${1:-}" = "demo-large" ]; then
  need+=(dict-gcide)
fi
if [ "${1:-}" = "torch" ]; then
  need+=(python3-torch)
fi
if [ "${1:-}" = "fuzz" ]; then
  need+=(clang libclang-rt-dev libomp-dev python3)
fi

if ! command -v dpkg-query >/dev/null; then
  echo "normgrow: bootstrap: no dpkg on this system: cannot check for ${need[*]};" \
    "the build fails on the first one missing" >&2
  exit 0
fi
missing=()
for p in "${need[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "normgrow: missing Debian packages: ${missing[*]}" >&2
  echo "normgrow: run as root: $cmd" >&2
  exit 1
fi
echo "normgrow: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >&2; then
  echo "normgrow: bootstrap: could not install ${missing[*]} (is the package archive" \
    "reachable from here?); install them, then run make again" >&2
  exit 1
fi
