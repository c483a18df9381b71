#!/usr/bin/env bash
# The report command on hand-written run directories (tests/fixtures/report):
# two arms, grow-post (Post-Norm, 1→2→3, seeds 1 and 2) and fixed-pre
# (Pre-Norm, one seed). Every number checked here is recomputed from the
# fixture files themselves; bad inputs give one line on stderr and a non-zero exit.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/tests/fixtures/report" "$tmp/runs"
runs=("$tmp/runs/grow-post-s1" "$tmp/runs/grow-post-s2" "$tmp/runs/fixed-pre-s7")
md=$tmp/runs/report/report.md

check() {  # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then echo "ok report: $what"; else echo "FAIL report: $what"; fi
}

# The cell of the markdown table under "## SECTION" in the row whose first
# cell is ROW and the column headed COLUMN.
cell() {  # section row column
  awk -F'|' -v sec="## $1" -v row="$2" -v col="$3" '
    function trim(s) { gsub(/^ +| +$/, "", s); return s }
    /^## / { inside = ($0 == sec); c = 0; next }
    inside && /^\|/ {
      if (!c) { for (i = 2; i < NF; i++) if (trim($i) == col) c = i; next }
      if (trim($2) == row) { print trim($c); exit }
    }' "$md"
}

# The val_ce of the last eval record of a run's metrics.jsonl.
final_ce() {
  grep '"event":"eval"' "$1/metrics.jsonl" | tail -n 1 | sed 's/.*"val_ce":\([-0-9.eE+]*\).*/\1/'
}

if ! "$bin" report "${runs[@]}" >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL report: exited non-zero on the fixture: $(cat "$tmp/err")"
  exit 0
fi
check "written to dirname(RUN_DIR)/report by default" test -s "$md"

for arm in grow-post fixed-pre; do
  check "arms table has a row for $arm" test -n "$(cell Arms "$arm" placement)"
done

ce1=$(final_ce "${runs[0]}") ce2=$(final_ce "${runs[1]}") ce3=$(final_ce "${runs[2]}")
want_post=$(awk -v a="$ce1" -v b="$ce2" 'BEGIN {
  m = (a + b) / 2; printf "%.4f ± %.4f", m, sqrt(((a - m) ^ 2 + (b - m) ^ 2) / 1) }')
want_pre=$(awk -v a="$ce3" 'BEGIN { printf "%.4f", a }')
got=$(cell Arms grow-post "final val CE")
# Printed numbers compared as text, here and below: both sides read the same
# fixture digits and do the same double operations in the same order (mean
# (a + b) / n, sample std, differences, ratios), with no BLAS in between.
check "grow-post final CE is the mean ± std of its seeds' last val_ce ($ce1, $ce2): $got" test "$got" = "$want_post"
got=$(cell Arms fixed-pre "final val CE")
check "fixed-pre final CE is its last val_ce ($ce3): $got" test "$got" = "$want_pre"

want=$(awk -v a="$ce1" -v b="$ce2" -v c="$ce3" 'BEGIN { printf "%+.4f", (a + b) / 2 - c }')
got=$(cell "Differences in final validation CE" grow-post fixed-pre)
check "pairwise grow-post minus fixed-pre is $want: $got" test "${got%% *}" = "$want"
want=$(awk -v a="$ce1" -v b="$ce2" -v c="$ce3" 'BEGIN { printf "%+.4f", c - (a + b) / 2 }')
got=$(cell "Differences in final validation CE" fixed-pre grow-post)
check "pairwise fixed-pre minus grow-post is $want: $got" test "${got%% *}" = "$want"

# The other readings of the RMS spread (each new block's input, per layer, by
# token class) and the ablation's minimum over blocks, recomputed from the
# fixture files by an independent script (python3 with its json module only).
if command -v python3 >/dev/null; then
  python3 "$root/tests/report_readings.py" "$md" "${runs[@]}"
else
  echo "skip report readings: python3 not installed"
fi

# Token accounting: each arm's totals of its last eval record, as multiples of
# the fixed-depth arm's (fixed-pre).
last_eval() {  # run key
  grep '"event":"eval"' "$1/metrics.jsonl" | tail -n 1 | sed "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/"
}
for key in tokens layer_tokens flops; do
  col=${key/_/-}; [ "$key" = flops ] && col=FLOPs
  want=$(awk -v a="$(last_eval "${runs[0]}" $key)" -v b="$(last_eval "${runs[1]}" $key)" \
    -v c="$(last_eval "${runs[2]}" $key)" 'BEGIN { printf "%.2f", (a + b) / 2 / c }')
  got=$(cell "Token accounting" grow-post "$col / ref")
  check "token accounting: grow-post's $col over fixed-pre's is $want: $got" test "$got" = "$want"
done
check "token accounting: fixed-pre is the reference (1.00) and named" \
  bash -c '[ "$1" = 1.00 ] && grep -q "reference arm.s, .fixed-pre." "$2"' _ "$(cell "Token accounting" fixed-pre "layer-tokens / ref")" "$md"

# Mean RMS by token class at the last layer: the mean over seeds of diag_final.json's
# rms.<class>.mean (grow-post's files have window_start; fixed-pre's predates it: n/a).
class_mean() {  # point class run...: reads the fixtures' pretty-printed JSON line by line
  local p=$1 c=$2; shift 2
  for d in "$@"; do
    awk -v p="\"$p\"" -v c="\"$c\": {" '
      /"name":/ { at = index($0, p) > 0 } at && index($0, c) { want = 1 }
      want && /"mean":/ { gsub(/[^0-9.eE+-]/, "", $2); print $2; exit }' "$d/diag_final.json"
  done | awk '{ s += $1; n++ } END { printf "%.4g", s / n }'
}
for point in hidden.3 res2.3; do
  for class in window_start separator; do
    want=$(class_mean "$point" "$class" "${runs[0]}" "${runs[1]}")
    got=$(awk -F'|' -v p="$point" -v c="$class" '
      function trim(s) { gsub(/^ +| +$/, "", s); return s }
      /^## / { inside = ($0 == "## Residual RMS by token class"); col = 0; next }
      inside && /^\|/ { if (!col) { for (i = 2; i < NF; i++) if (trim($i) == c) col = i; next }
                        if (trim($2) == "grow-post" && trim($3) == p) print trim($col) }' "$md")
    check "RMS by class: grow-post $point $class is the seeds' mean $want: $got" test "$got" = "$want"
  done
done
check "RMS by class: fixed-pre's file without window_start reads n/a" \
  bash -c 'grep -q "^| fixed-pre | hidden.3 | n/a | " "$1"' _ "$md"

ablation_rows() {  # arm: the removal column of its ablation rows
  awk -F'|' -v arm="$1" '/^## / { inside = ($0 == "## Block-removal ablation") }
    inside && $2 ~ "^ " arm " $" { print $3 }' "$md"
}
check "ablation lists skip and norms_only for grow-post" \
  bash -c '[[ $(echo "$1" | grep -c "^ skip") = 1 && $(echo "$1" | grep -c "^ norms_only") = 1 ]]' _ "$(ablation_rows grow-post)"
check "ablation lists only skip for fixed-pre" \
  bash -c '[[ $(echo "$1" | grep -c .) = 1 && $1 == " skip"* ]]' _ "$(ablation_rows fixed-pre)"

if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  for png in val_ce rms_std rms_by_class rms_readings ablation; do
    f=$tmp/runs/report/$png.png
    check "$png.png is a PNG embedded in report.md" \
      bash -c '[ "$(head -c 8 "$1" | od -An -tx1 | tr -d " \n")" = 89504e470d0a1a0a ] && grep -qF "]($2)" "$3"' \
      _ "$f" "$png.png" "$md"
  done
else
  echo "skip plots: matplotlib not installed"
fi

# Without matplotlib (a stand-in script that exits 3 as plot_report.py does)
# the report is still written and says why the plots are missing.
mkdir -p "$tmp/tools-skip" "$tmp/tools-broken"
printf 'import sys\nprint("matplotlib is not installed for test", file=sys.stderr)\nsys.exit(3)\n' \
  >"$tmp/tools-skip/plot_report.py"
printf 'raise RuntimeError("broken on purpose")\n' >"$tmp/tools-broken/plot_report.py"
if NG_TOOLS=$tmp/tools-skip "$bin" report "${runs[@]}" --out "$tmp/skip" >/dev/null 2>&1; then
  check "plots skipped: report says why" \
    grep -qE "plots were skipped: (matplotlib is not installed for test|python3 was not found)" "$tmp/skip/report.md"
else
  echo "FAIL report: a plot script exiting with status 3 failed the report"
fi

# A run without diag.jsonl and diag_final.json: its sections say so.
cp -r "$tmp/runs/fixed-pre-s7" "$tmp/nodiag"
rm "$tmp/nodiag/diag.jsonl" "$tmp/nodiag/diag_final.json"
if "$bin" report "$tmp/nodiag" --out "$tmp/nodiag-report" >/dev/null 2>&1; then
  check "missing diag files are named in the report" \
    bash -c 'grep -q "No diag.jsonl.*nodiag" "$1" && grep -q "No diag_final.json in.*nodiag" "$1"' _ "$tmp/nodiag-report/report.md"
else
  echo "FAIL report: a run without diag files failed the report"
fi

# Errors: one line on stderr naming the file, non-zero exit, no report.
bad() {  # description, expected text on stderr, then the report's arguments
  local what=$1 expect=$2; shift 2
  "$bin" report "$@" 2>"$tmp/err" >/dev/null
  local rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "$expect" "$tmp/err"; then
    echo "ok report: $what: $(cat "$tmp/err")"
  else
    echo "FAIL report: $what: status $rc, stderr: $(cat "$tmp/err")"
  fi
}
cp -r "$tmp/runs/fixed-pre-s7" "$tmp/nometrics"
rm "$tmp/nometrics/metrics.jsonl"
bad "missing metrics.jsonl" "nometrics/metrics.jsonl" "$tmp/nometrics" --out "$tmp/bad"
cp -r "$tmp/runs/fixed-pre-s7" "$tmp/badjson"
head -c 200 "$tmp/runs/fixed-pre-s7/config.json" >"$tmp/badjson/config.json"
bad "truncated config.json" "badjson/config.json" "$tmp/badjson" --out "$tmp/bad"
check "no report.md after errors" test ! -e "$tmp/bad/report.md"
if [ -x /usr/bin/python3 ] || command -v python3 >/dev/null; then
  NG_TOOLS=$tmp/tools-broken bad "failing plot script" "status 1" "${runs[@]}" --out "$tmp/broken"
fi

# What a report must not do: average runs that are not seeds of one config,
# call an unfinished run's last evaluation final without a word, compare arms
# evaluated on different validation settings silently, fail on a directory
# that is not a run, cite files the user lacks, or replace a report.
cp -r "$tmp/runs" "$tmp/more"
mkdir -p "$tmp/more/notes" "$tmp/more/hf"
printf '{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}' >"$tmp/more/hf/config.json"  # an export
sed 's/"seed": 2,/"seed": 3,/; s/"kd_weight": 0.5/"kd_weight": 0.7/' "$tmp/runs/grow-post-s2/config.json" >"$tmp/more/grow-post-s2/config.json"
bad "same name, other kd_weight: not seeds of one arm" "loss.kd_weight (0.5 / 0.7)" \
  "$tmp/more/grow-post-s1" "$tmp/more/grow-post-s2" --out "$tmp/bad"
cp "$tmp/runs/grow-post-s2/config.json" "$tmp/more/grow-post-s2/config.json"
head -n 6 "$tmp/runs/fixed-pre-s7/metrics.jsonl" >"$tmp/more/fixed-pre-s7/metrics.jsonl"  # stopped at step 4
sed -i 's/"batches": 1/"batches": 2/' "$tmp/more/grow-post-s1/config.json" "$tmp/more/grow-post-s2/config.json"
if "$bin" report "$tmp/more/grow-post-s1" "$tmp/more/grow-post-s2" "$tmp/more/fixed-pre-s7" "$tmp/more/notes" "$tmp/more/hf" \
  --out "$tmp/more-report" >"$tmp/out" 2>"$tmp/err"; then
  md2=$tmp/more-report/report.md
  check "directories that are not runs (a Hugging Face export among them) are left out with a note" \
    bash -c 'grep -q "notes is not a run directory" "$1" && grep -q "hf is not a run directory" "$1" &&
             grep -q "left out: .*notes.*hf" "$2"' _ "$tmp/out" "$md2"
  check "an unfinished run is marked (arms table and a note with its step)" \
    bash -c 'grep -q "| fixed-pre | .* | 7 (unfinished) |" "$1" && grep -q "fixed-pre-s7. stopped at step 4 of 6" "$1"' _ "$md2"
  check "arms evaluated with different eval.batches are flagged" \
    bash -c 'grep -q "Warning: the runs were not evaluated alike.*eval.batches" "$1" && grep -q "WARNING" "$2"' _ "$md2" "$tmp/out"
  check "the report cites no file outside the repository (STUDY.md)" bash -c '! grep -q "STUDY" "$1"' _ "$md2"
else
  echo "FAIL report: mixed runs and a non-run directory: $(cat "$tmp/err")"
fi
bad "an existing report is not replaced without --force" "report.md already exists" \
  "$tmp/more/grow-post-s1" --out "$tmp/more-report"
if "$bin" report "$tmp/more/grow-post-s1" --out "$tmp/more-report" --force >/dev/null 2>&1; then
  echo "ok report: --force replaces a report"
else
  echo "FAIL report: --force did not replace the report"
fi
