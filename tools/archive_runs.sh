#!/usr/bin/env bash
# normgrow: the records of run trees as one .tar.xz, so that the numbers made from
# them (tools/report, `make readme-numbers`) can be made again where the runs are
# not: every file of each DIR but the weights and checkpoints (*.safetensors), the
# run locks (*.lock) and the report's pictures (*.png): config.json, metrics.jsonl,
# diag.jsonl, diag_final.json, backend.jsonl, train.log, the sweeps' sweep.json and
# calibrate.sh's calibration.json and report.md (docs/runs.md). Each DIR is stored
# under its own name: `tar xJf OUT -C X` gives X/<basename of DIR>.
#   tools/archive_runs.sh [--force] [--no-diag] OUT.tar.xz DIR...
# OUT is written whole or not at all, and replaced only with --force. --no-diag leaves
# out diag.jsonl too (the diagnostics at each evaluation, half a toy run's records): the
# sweeps' tables and the README's calibration blocks need none; the report's readings of
# the stream's scale do.
set -euo pipefail
usage="usage: tools/archive_runs.sh [--force] [--no-diag] OUT.tar.xz DIR..."
force=0 leave=()
while [ $# -gt 0 ]; do
  case $1 in
    --force) force=1 ;;
    --no-diag) leave=(--exclude=diag.jsonl) ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
out=$1
shift
case $out in *.tar.xz) ;; *) echo "archive_runs: $out: expected a name ending in .tar.xz" >&2; exit 2 ;; esac
[ "$force" = 1 ] || [ ! -e "$out" ] || { echo "archive_runs: $out exists (--force replaces it)" >&2; exit 1; }
declare -A named  # basename -> the DIR stored under it
for d in "$@"; do
  [ -d "$d" ] || { echo "archive_runs: $d: not a directory" >&2; exit 1; }
  [ -n "$(find "$d" -name config.json -print -quit)" ] ||
    { echo "archive_runs: $d: no run directory in it (no config.json)" >&2; exit 1; }
  b=$(basename "$(realpath "$d")")
  [ -z "${named[$b]:-}" ] ||
    { echo "archive_runs: $d and ${named[$b]} would both be stored as $b/: archive one of them" >&2; exit 1; }
  named[$b]=$d
done
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
args=()
for d in "$@"; do
  d=$(realpath "$d")
  args+=(-C "$(dirname "$d")" "$(basename "$d")")
done
# Sorted names, fixed owners and times of the files themselves: the same records
# give the same archive.
tar --create --xz --sort=name --owner=0 --group=0 --numeric-owner \
  --exclude='*.safetensors' --exclude='*.lock' --exclude='*.png' --exclude='*.tmp.*' "${leave[@]}" \
  --file "$tmp" "${args[@]}" ||
  { echo "archive_runs: $out: tar failed" >&2; exit 1; }
mv -f "$tmp" "$out"
trap - EXIT
echo "archive_runs: $out: $(tar --list --file "$out" | grep -vc '/$') files, $(du -h "$out" | cut -f1)"
