#!/usr/bin/env bash
# normgrow runs (and report) over run directories made by hand from the report
# fixtures: one run a line within 100 columns, details on request, a live run
# named as running, and a directory that cannot be read (a config whose steps
# would divide by zero, a step of 1e300, more stages than a run has, links
# back into the tree) named on its own line while the others are listed.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tmp=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT

check() {  # NAME COMMAND...: ok when the command succeeds
  local name=$1
  shift
  if "$@"; then echo "ok $name"; else echo "FAIL $name: $(head -c 600 "$tmp/out") $(cat "$tmp/err")"; fi
}
runs() { "$bin" runs "$@" >"$tmp/out" 2>"$tmp/err"; }
widest() { awk '{ if (length($0) > n) n = length($0) } END { print n + 0 }' "$tmp/out"; }

R=$tmp/runs
cp -r "$root/tests/fixtures/report" "$R"
runs "$R"
check "runs lists 3 runs, one a line, within 100 columns" \
  bash -c '[ "$(wc -l <"$1")" -eq 4 ] && [ "$2" -le 100 ] && grep -q "^grow-post-s1  *finished  *6/6  *2.7330  *name=" "$1"' \
  _ "$tmp/out" "$(widest)"

# Runs that differ in 15 settings, under long names: still one line each.
for i in 1 2 3; do
  d=$R/a-study-with-a-rather-long-name/arm-$i-with-a-long-name-too
  mkdir -p "$d"
  sed "s/\"seed\": 1,/\"seed\": 1$i,/; s/\"hidden_size\": 16/\"hidden_size\": 1$i/; s/\"peak\": 0.003/\"peak\": 0.00$i/;
       s/\"floor\": 0.0003/\"floor\": 0.0002$i/; s/\"beta1\": 0.9,/\"beta1\": 0.8$i,/; s/\"eps\": 1e-08/\"eps\": 1e-0$i/;
       s/\"weight_decay\": 0.1/\"weight_decay\": 0.$i/; s/\"grad_clip\": 1.0/\"grad_clip\": $i.0/; s/\"warmup_tokens\": 16/\"warmup_tokens\": 1$i/;
       s/\"kd_weight\": 0.5/\"kd_weight\": 0.$i/; s/\"temperature\": 2.0/\"temperature\": $i.5/; s/\"gate_steps\": 1/\"gate_steps\": $i/;
       s/\"rope_theta\": 10000/\"rope_theta\": 1000$i/; s/\"beta2\": 0.95/\"beta2\": 0.9$i/" \
    "$R/grow-post-s1/config.json" >"$d/config.json"
  cp "$R/grow-post-s1/metrics.jsonl" "$d/"
done
runs "$R"
check "runs differing in 15 settings under long names: one line each, within 100 columns" \
  bash -c '[ "$(wc -l <"$1")" -eq 7 ] && [ "$2" -le 100 ] && grep -q "^\.\.\..*arm-2-with-a-long-name-too  *finished .*more$" "$1"' \
  _ "$tmp/out" "$(widest)"
check "runs passes by a difference too long for its line and shows a shorter one after it" \
  grep -q "arm-2-with-a-long-name-too  *finished .* seed=12, .*more$" "$tmp/out"
runs "$R" --long
check "runs --long: every difference in full below its run" \
  bash -c 'grep -q "^    stages = \[{\"depth\":1,\"tokens\":32,\"restart_lr\":true,\"freeze_existing\":false},{\"depth\":2" "$1" &&
           grep -q "^    optim.beta2 = 0.92$" "$1"' _ "$tmp/out"
runs "$R/grow-post-s1"
check "runs RUNDIR: that run with every setting" \
  bash -c 'grep -q "finished  *6/6  *2.7330" "$1" && grep -q "^    model.hidden_size = 16$" "$1" && grep -q "^    data.seq = 8$" "$1"' \
  _ "$tmp/out"
rm -rf "$R/a-study-with-a-rather-long-name"

# A sweep's tree (GROUP/SETTING/seedS) too long for the name column: its group and seed kept.
for i in 1 2; do
  mkdir -p "$R/hybrid-pre-post/lr.peak=0.002"
  cp -r "$R/grow-post-s1" "$R/hybrid-pre-post/lr.peak=0.002/seed$i"
done
runs "$R"
check "runs cuts a long sweep path between its group and its seed" \
  bash -c 'grep -q "^hybrid-pre-post/\.\.\./seed1  *finished " "$1" && grep -q "^hybrid-pre-post/\.\.\./seed2  *finished " "$1" &&
           [ "$2" -le 100 ]' _ "$tmp/out" "$(widest)"
rm -rf "$R/hybrid-pre-post"

# A live run: a process holds its train.lock, as train does (the pid inside).
L=$R/live
cp -r "$R/fixed-pre-s7" "$L"
head -n 3 "$R/fixed-pre-s7/metrics.jsonl" >"$L/metrics.jsonl"
(exec 9>"$L/train.lock" && flock -x 9 && echo $BASHPID >&9 && exec sleep 60) &
holder=$!
for _ in $(seq 50); do [ -s "$L/train.lock" ] && break; sleep 0.1; done
runs "$R"
check "runs names a live run running, with its pid" grep -q "^live  *running (pid $holder) *2/6 " "$tmp/out"
kill "$holder" && wait "$holder" 2>/dev/null
holder=
runs "$R"
check "runs: the same run after its process ends is stopped" grep -q "^live  *stopped (no checkpoint) *2/6 " "$tmp/out"
rm -rf "$L"

# Directories that cannot be read: each gets its line, the others are listed.
bad() {  # NAME SED-SCRIPT FILE: a copy of grow-post-s2 with FILE edited
  mkdir -p "$R/$1"
  cp "$R/grow-post-s2/config.json" "$R/grow-post-s2/metrics.jsonl" "$R/$1/"
  sed -i "$2" "$R/$1/$3"
}
bad fpe 's/"batch": 2,/"batch": 4294967296,/; s/"seq": 8/"seq": 4294967296/' config.json
bad huge-step '3s/"step":2,/"step":1e300,/' metrics.jsonl
bad many-stages 's/"stages": \[/"stages": [{"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16}, {"depth": 1, "tokens": 16},/' config.json
runs "$R"
rc=$?
check "runs with unreadable directories: status 1, each named on its line, the others listed" \
  bash -c '[ "$1" -eq 1 ] && grep -q "^fpe  *unreadable: config.json: data.batch: 4294967296 is outside \[1, 4096\]$" "$2" &&
           grep -q "^huge-step  *unreadable: metrics.jsonl:3: step: 1e+300 is beyond 2^53 - 1" "$2" &&
           grep -q "^many-stages  *unreadable: config.json: stages: more than 16$" "$2" &&
           [ "$(grep -c " finished " "$2")" -eq 3 ] && [ "$(wc -l <"$3")" -eq 1 ] && grep -q "3 of 6 run directories" "$3"' \
  _ "$rc" "$tmp/out" "$tmp/err"
"$bin" report "$R/fpe" "$R/grow-post-s1" --out "$tmp/rep" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "report of a run whose config would divide by zero: one line, status 1" \
  bash -c '[ "$1" -eq 1 ] && [ "$(wc -l <"$2")" -eq 1 ] && grep -q "data.batch" "$2"' _ "$rc" "$tmp/err"
rm -rf "$R/fpe" "$R/huge-step" "$R/many-stages"

# Links back into the tree and out of it are not followed: each run once, at once.
ln -s .. "$R/grow-post-s1/up"
ln -s "$R" "$R/again"
ln -s / "$R/root"
SECONDS=0
runs "$R"
check "runs does not follow links (each run once, in $SECONDS s)" \
  bash -c '[ "$(wc -l <"$1")" -eq 4 ] && [ "$(grep -c "grow-post-s1 " "$1")" -eq 1 ] && [ "$2" -lt 10 ]' _ "$tmp/out" "$SECONDS"

# tools/archive_runs.sh: the records of a tree, without weights, locks or pictures,
# extracted the same files; an existing archive kept without --force; two trees of one
# name refused.
A=$tmp/arch
mkdir -p "$A"
cp -r "$root/tests/fixtures/report" "$A/study"
echo weights >"$A/study/grow-post-s1/final.safetensors"
echo 1 >"$A/study/grow-post-s1/train.lock"
echo png >"$A/study/plot.png"
arch() { "$root/tools/archive_runs.sh" "$@" >"$tmp/out" 2>"$tmp/err"; }
arch "$A/runs.tar.xz" "$A/study"
check "archive_runs stores the tree's records under its name, without weights, locks or pictures" \
  bash -c 'mkdir -p "$1/x" && tar xJf "$1/runs.tar.xz" -C "$1/x" &&
           diff -r -x "*.safetensors" -x "*.lock" -x "*.png" "$1/study" "$1/x/study" >/dev/null &&
           [ -z "$(find "$1/x" -name "*.safetensors" -o -name "*.lock" -o -name "*.png")" ] &&
           [ "$(find "$1/x" -name config.json | wc -l)" -eq 3 ]' _ "$A"
check "the archived records report as the tree does" \
  bash -c '"$1" runs "$2/study" | sed "s/^ *//" >"$2/a" && "$1" runs "$2/x/study" | sed "s/^ *//" >"$2/b" && cmp -s "$2/a" "$2/b"' _ "$bin" "$A"
before=$(cksum <"$A/runs.tar.xz")
echo changed >"$A/study/grow-post-s1/metrics.jsonl"
arch "$A/runs.tar.xz" "$A/study"
rc=$?
check "archive_runs keeps an existing archive without --force: one line, status 1" \
  bash -c '[ "$1" -eq 1 ] && [ "$(wc -l <"$2")" -eq 1 ] && grep -q "force" "$2" && [ "$(cksum <"$3")" = "$4" ]' \
  _ "$rc" "$tmp/err" "$A/runs.tar.xz" "$before"
arch --force "$A/runs.tar.xz" "$A/study"
check "archive_runs --force replaces it" \
  bash -c '[ "$(tar xJOf "$1" study/grow-post-s1/metrics.jsonl)" = changed ]' _ "$A/runs.tar.xz"
arch --no-diag "$A/nodiag.tar.xz" "$A/study"
check "archive_runs --no-diag leaves out diag.jsonl and nothing else" \
  bash -c 'mkdir -p "$1/y" && tar xJf "$1/nodiag.tar.xz" -C "$1/y" && [ -n "$(find "$1/x" -name diag.jsonl)" ] &&
           [ -z "$(find "$1/y" -name diag.jsonl)" ] &&
           diff -r -x diag.jsonl -x "*.safetensors" -x "*.lock" -x "*.png" "$1/study" "$1/y/study" >/dev/null' _ "$A"
mkdir -p "$A/other/study"
cp -r "$root/tests/fixtures/report/grow-post-s1" "$A/other/study/"
arch "$A/two.tar.xz" "$A/study" "$A/other/study/"
rc=$?
check "archive_runs refuses two directories of the same name: one line, status 1, nothing written" \
  bash -c '[ "$1" -eq 1 ] && [ "$(wc -l <"$2")" -eq 1 ] && grep -q "both be stored as study/" "$2" && [ ! -e "$3" ]' \
  _ "$rc" "$tmp/err" "$A/two.tar.xz"
mkdir -p "$A/empty"
arch "$A/e.tar.xz" "$A/empty"
rc=$?
check "archive_runs refuses a directory without runs: one line, status 1, nothing written" \
  bash -c '[ "$1" -eq 1 ] && [ "$(wc -l <"$2")" -eq 1 ] && grep -q "no run directory" "$2" && [ ! -e "$3" ] &&
           [ -z "$(ls "$4" | grep tmp)" ]' _ "$rc" "$tmp/err" "$A/e.tar.xz" "$A"
