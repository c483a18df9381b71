#!/usr/bin/env bash
# The whole study as one command: token shards from a corpus, the teacher (a
# Hugging Face directory, or for the toy sets one pretrained here), an optional
# top-k teacher cache, the seven arms in order under an MPI launch line, and the
# report. Run it again after an interruption: what is done is kept (data,
# teacher, cache, every finished arm), an interrupted arm resumes from its last
# checkpoint, and the rest follows. An arm that diverges is a result: kept, and
# marked in the report as not trained.
#
# usage: tools/study.sh --set SET | --configs DIR --corpus PATH [--corpus PATH ...]
#            [--records-split LINE | --jsonl-field FIELD] [--max-tokens N] [--val-fraction F]
#            [--teacher DIR] [--devices N] [--launch "CMD"] [--out DIR] [--teacher-cache K]
#            [--device-memory GIB] [--backend NAME] [--precision fp32|bf16]
#   SET      paper (configs/paper), paper-3.09b (configs/paper/student-3.09b), toy,
#            toy-large, rehearsal (configs/<set>)
#   --configs DIR  a set of one's own: DIR holds the seven arms' configs (and teacher.json
#            where no --teacher is given), named as in configs/toy
#   --corpus files or directories of text (plain or gzip, JSONL with --jsonl-field), as
#            `normgrow data` reads them; with a model of Qwen3's vocabulary they are
#            tokenized with the teacher's tokenizer.json, else byte-level
#   --teacher the teacher: a Hugging Face directory (paper: Qwen3-8B-Base), or a normgrow
#            checkpoint; the toy sets without it pretrain their teacher.json here and use
#            it as a Hugging Face directory (OUT/teacher-hf), as the paper sets use theirs
#   --devices N  ranks (GPUs), one process each (default 1)
#   --launch the MPI launch line each arm runs under (default "mpirun -np N" for N > 1,
#            none for 1), e.g. "mpirun --oversubscribe -np 2"
#   --out    where everything goes (default runs/study-SET): data/, teacher*/, cache/,
#            configs/ (the set's arms with this study's paths), one directory per arm, report/
#   --teacher-cache K  distil from a top-k cache of the teacher (k = K) made once here,
#            its windows shared by the ranks of the launch line
#   --device-memory, --backend, --precision: passed to `normgrow plan` and `train`
# Progress: a line per step of the study, and every PROGRESS_SECONDS (default 60) the arm,
# its stage, tokens done and an estimate of the time left in the arm and in the study
# (from `normgrow plan`'s FLOPs and the arm's rate so far; evaluations not included).
# SIGINT or SIGTERM stops the running arm at a checkpoint (normgrow's own handling,
# through the launch line) and ends the study; the same command continues it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NG_BIN:-$root/build/normgrow}
usage="usage: tools/study.sh --set paper|paper-3.09b|toy|toy-large|rehearsal | --configs DIR --corpus PATH... [--records-split LINE | --jsonl-field F] [--max-tokens N] [--val-fraction F] [--teacher DIR] [--devices N] [--launch CMD] [--out DIR] [--teacher-cache K] [--device-memory GIB] [--backend NAME] [--precision P]"
set_name='' configs='' corpus=() data_opts=() teacher='' devices=1 launch='' launch_given=0 out='' cache_k='' plan_opts=() where=()
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
  case $1 in
    --set) set_name=$2 ;;
    --configs) configs=$(realpath -m "$2") set_name=$(basename "$2") ;;
    --corpus) corpus+=("$2") ;;
    --records-split | --jsonl-field | --max-tokens | --val-fraction) data_opts+=("$1" "$2") ;;
    --teacher) teacher=$2 ;;
    --devices) devices=$2 ;;
    --launch) launch=$2 launch_given=1 ;;
    --out) out=$2 ;;
    --teacher-cache) cache_k=$2 ;;
    --device-memory) plan_opts+=("$1" "$2") ;;
    --backend | --precision) where+=("$1" "$2") ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift 2
done
if [ -z "$configs" ]; then
  case $set_name in
    paper | toy | toy-large | rehearsal) configs=$root/configs/$set_name ;;
    paper-3.09b) configs=$root/configs/paper/student-3.09b ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
fi
[ -d "$configs" ] || { echo "study: --configs $configs: not a directory" >&2; exit 2; }
[ ${#corpus[@]} -gt 0 ] || { echo "study: --corpus: give the corpus (files or directories)" >&2; exit 2; }
[[ $devices =~ ^[1-9][0-9]*$ ]] || { echo "study: --devices: expected a count >= 1" >&2; exit 2; }
[ -z "$cache_k" ] || [[ $cache_k =~ ^[1-9][0-9]*$ ]] || { echo "study: --teacher-cache: expected k >= 1" >&2; exit 2; }
[ "$launch_given" = 1 ] || { [ "$devices" -gt 1 ] && launch="mpirun -np $devices"; } || true
out=${out:-runs/study-$set_name}
arms=(joint-pre joint-post grow-pre grow-post control-extra-tokens control-layer-tokens control-lr-restarts)
start=$(date +%s)
say() { printf '[study %s] %s\n' "$(clock $(($(date +%s) - start)))" "$*"; }
clock() { printf '%dh%02dm%02ds' $(($1 / 3600)) $(($1 % 3600 / 60)) $(($1 % 60)); }
[ -x "$bin" ] || { echo "study: $bin is missing: run make first" >&2; exit 1; }
for a in "${arms[@]}"; do
  [ -f "$configs/$a.json" ] || { echo "study: $configs/$a.json is missing" >&2; exit 1; }
done
# On the CPU backends an arm's ranks share the cores (a GPU run's kernels ignore it).
rank_threads=${OMP_NUM_THREADS:-$(( $(nproc) / devices > 0 ? $(nproc) / devices : 1 ))}
mkdir -p "$out/configs"

# The child that runs (data, the teacher, an arm under the launch line) is in a session
# of its own, so that a terminal's Ctrl-C reaches the study alone, which sends the child
# one SIGTERM: normgrow ends its step at a checkpoint, and the study ends.
child='' monitor=''
stop() {
  trap - INT TERM
  say "stopping (signal): the running step ends at a checkpoint; run the same command to continue"
  if [ -n "$monitor" ]; then kill "$monitor" 2>/dev/null || true; fi
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  exit 130
}
trap stop INT TERM
run() {  # runs "$@" as the child; its status
  setsid "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=
  return $rc
}

# ---------------------------------------------------------------- data
key_of() { sed -n "s/^ *\"$2\": \\([^,]*\\),\\{0,1\\}\$/\\1/p" "$1" | head -1 | tr -d '"'; }
first=$configs/${arms[0]}.json
vocab=$(key_of "$first" vocab_size)
shard() {  # DIR SPLIT: the split's shard in either layout
  if [ -f "$1/$2.manifest.json" ]; then echo "$1/$2.manifest.json"; else echo "$1/$2.bin"; fi
}
tokenizer=()
if [ "$vocab" != 257 ]; then  # not byte-level: the teacher's own tokenizer
  if [ -z "$teacher" ] || [ ! -f "$teacher/tokenizer.json" ]; then
    echo "study: $configs has a vocabulary of $vocab: --teacher must be a Hugging Face directory with its tokenizer.json" >&2
    exit 2
  fi
  tokenizer=(--tokenizer "$teacher")
fi
if [ -f "$(shard "$out/data" val)" ] && [ -f "$(shard "$out/data" train)" ]; then
  say "data: reusing $out/data"
else
  say "data: ${#corpus[@]} input(s) (${corpus[0]}${corpus[1]:+ ...}) -> $out/data${tokenizer[1]:+ (tokenizer of $teacher)}"
  run "$bin" data "${corpus[@]}" "${data_opts[@]}" "${tokenizer[@]}" --out "$out/data"
fi
train_shard=$(shard "$out/data" train) val_shard=$(shard "$out/data" val)

# ---------------------------------------------------------------- teacher
if [ -z "$teacher" ]; then
  [ -f "$configs/teacher.json" ] ||
    { echo "study: $configs has no teacher.json: give --teacher (a Hugging Face directory)" >&2; exit 2; }
  sed "s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$out/teacher\"|; s|\"train\": \"[^\"]*\"|\"train\": \"$train_shard\"|;
       s|\"val\": \"[^\"]*\"|\"val\": \"$val_shard\"|" "$configs/teacher.json" >"$out/configs/teacher.json"
  if [ -f "$out/teacher/final.safetensors" ]; then
    say "teacher: reusing $out/teacher"
  elif [ -f "$out/teacher/checkpoint.safetensors" ]; then
    say "teacher: continuing the interrupted pretraining in $out/teacher"
    run "$bin" train --resume "$out/teacher" "${where[@]}"
  else
    say "teacher: pretraining $configs/teacher.json -> $out/teacher (one process)"
    run "$bin" train "$out/configs/teacher.json" --force "${where[@]}"
  fi
  if [ ! -f "$out/teacher-hf/config.json" ]; then
    say "teacher: as a Hugging Face directory -> $out/teacher-hf"
    rm -rf "$out/teacher-hf.tmp"
    run "$bin" export "$out/teacher/final.safetensors" "$out/teacher-hf.tmp" --dtype f32 >/dev/null
    mv "$out/teacher-hf.tmp" "$out/teacher-hf"
  fi
  teacher=$out/teacher-hf
fi
[ -e "$teacher" ] || { echo "study: teacher $teacher does not exist" >&2; exit 2; }

# ---------------------------------------------------------------- teacher cache
cache_json=
if [ -n "$cache_k" ]; then
  seq=$(key_of "$first" seq) tau=$(key_of "$first" temperature)
  mkdir -p "$out/cache"
  for split in train val; do
    shard_path=$train_shard
    [ "$split" = val ] && shard_path=$val_shard
    if [ -f "$out/cache/$split.topk" ]; then
      say "teacher cache: reusing $out/cache/$split.topk"
    else  # the ranks share the windows: a manifest of their parts (topk.h)
      say "teacher cache: top-$cache_k of the teacher over $shard_path -> $out/cache/$split.topk${launch:+ under $launch}"
      # shellcheck disable=SC2086  # the launch line is words
      run env OMP_NUM_THREADS="$rank_threads" $launch "$bin" teacher-cache "$teacher" "$shard_path" \
        "$out/cache/$split.topk" --k "$cache_k" --temperature "$tau" --seq "$seq" "${where[@]}"
    fi
  done
  cache_json="\"teacher_cache\": {\"train\": \"$out/cache/train.topk\", \"val\": \"$out/cache/val.topk\"},"
fi

# ---------------------------------------------------------------- the arms' configs
for a in "${arms[@]}"; do
  sed "s|\"run_dir\": \"[^\"]*\"|\"run_dir\": \"$out/$a\"|; s|\"train\": \"[^\"]*\"|\"train\": \"$train_shard\"|;
       s|\"val\": \"[^\"]*\"|\"val\": \"$val_shard\"|;
       s|^\\( *\\)\"teacher\": \"[^\"]*\",|\\1\"teacher\": \"$teacher\", $cache_json|" \
    "$configs/$a.json" >"$out/configs/$a.json"
done
plan=$out/plan.txt arm_configs=()
for a in "${arms[@]}"; do arm_configs+=("$out/configs/$a.json"); done
if "$bin" plan "${arm_configs[@]}" --devices "$devices" "${plan_opts[@]}" >"$out/plan.txt.tmp" 2>&1; then
  mv "$out/plan.txt.tmp" "$plan"
  say "plan ($plan): $(grep '^study ' "$plan" | sed 's/  */ /g')"
  grep -q 'does NOT fit' "$plan" && say "plan: an arm does NOT fit the devices (see $plan)"
else
  say "plan: $(tail -1 "$out/plan.txt.tmp")"
  rm -f "$out/plan.txt.tmp" && plan=
fi
# An arm's column of the plan's study table: 4 tokens, 5 training FLOPs (0: no plan).
planned() { [ -n "$plan" ] && awk -v a="$1" -v c="$2" '$1 == a { gsub(",", "", $c); print $c + 0; f = 1 } END { if (!f) print 0 }' "$plan" || echo 0; }

# ---------------------------------------------------------------- progress
field() { sed 's/.*"'"$2"'":\([0-9.e+]*\).*/\1/' <<<"$1"; }  # a number of a JSON record
# Every PROGRESS_SECONDS, while arm $1 (index $2) runs: its stage and tokens from the
# last step of its metrics.jsonl, and the time left at its rate of training FLOPs.
progress() {
  local dir=$out/$1 name total_tokens total_flops later=0 f0='' t0 now line stage tokens flops left
  trap - INT TERM  # (the study's own handler is for the study)
  name=$(key_of "$out/configs/$1.json" name)
  total_tokens=$(planned "$name" 4)
  total_flops=$(planned "$name" 5)
  for a in "${arms[@]:$(($2 + 1))}"; do
    [ -f "$out/$a/final.safetensors" ] || later=$(awk -v x="$later" -v y="$(planned "$(key_of "$out/configs/$a.json" name)" 5)" 'BEGIN { print x + y }')
  done
  t0=$(date +%s)
  while sleep "${PROGRESS_SECONDS:-60}"; do
    line=$(grep '"event":"step"' "$dir/metrics.jsonl" 2>/dev/null | tail -1) || continue
    stage=$(field "$line" stage) tokens=$(field "$line" tokens) flops=$(field "$line" flops)
    now=$(date +%s)
    [ -n "$f0" ] || { f0=$flops t0=$now; }
    left=$(awk -v f0="$f0" -v f="$flops" -v t="$((now - t0))" -v arm="$total_flops" -v later="$later" 'BEGIN {
      if (f <= f0 || t <= 0 || arm <= 0) { print "unknown"; exit }
      r = (f - f0) / t; a = (arm - f) / r; s = a + later / r
      printf "%dm in the arm, %dh%02dm in the study", a / 60, s / 3600, s % 3600 / 60 }')
    say "arm $(($2 + 1))/${#arms[@]} $1: stage $stage of $(grep -c '"depth"' "$out/configs/$1.json"), $tokens of $total_tokens tokens; time left: $left"
  done
}

# ---------------------------------------------------------------- the arms
# An arm that diverged (`normgrow train` stopped it at a NaN, an Inf or a runaway CE, its
# metrics.jsonl ending with a "diverged" record) is a result: kept, the report marks it as
# not trained, and the study goes on.
diverged() { [ -f "$1/metrics.jsonl" ] && tail -n 1 "$1/metrics.jsonl" | grep -q '^{"event":"diverged",'; }
for i in "${!arms[@]}"; do
  a=${arms[$i]} dir=$out/${arms[$i]}
  if [ -f "$dir/final.safetensors" ] && [ -f "$dir/diag_final.json" ]; then
    say "arm $((i + 1))/${#arms[@]} $a: finished, kept ($dir)"
    continue
  fi
  if diverged "$dir"; then
    say "arm $((i + 1))/${#arms[@]} $a: diverged, kept ($dir; the report marks it as not trained)"
    continue
  fi
  progress "$a" "$i" &
  monitor=$! rc=0
  # shellcheck disable=SC2086  # the launch line is words
  if [ -f "$dir/checkpoint.safetensors" ]; then
    say "arm $((i + 1))/${#arms[@]} $a: continuing from its checkpoint in $dir${launch:+ under $launch}"
    run env OMP_NUM_THREADS="$rank_threads" $launch "$bin" train --resume "$dir" "${where[@]}" || rc=$?
  else
    say "arm $((i + 1))/${#arms[@]} $a: starting in $dir${launch:+ under $launch}"
    run env OMP_NUM_THREADS="$rank_threads" $launch "$bin" train "$out/configs/$a.json" --force "${where[@]}" || rc=$?
  fi
  kill "$monitor" 2>/dev/null || true
  wait "$monitor" 2>/dev/null || true
  monitor=
  if [ "$rc" -ne 0 ] && diverged "$dir"; then
    say "arm $((i + 1))/${#arms[@]} $a: diverged (its output is above; the report marks it as not trained)"
    continue
  fi
  if [ "$rc" -ne 0 ] || [ ! -f "$dir/final.safetensors" ]; then
    say "arm $a: failed (status $rc); its output is above; run the same command to continue"
    exit 1
  fi
  say "arm $((i + 1))/${#arms[@]} $a: finished"
done

# ---------------------------------------------------------------- report
say "report: $out/report"
run "$bin" report "${arms[@]/#/$out/}" --out "$out/report" --force
say "done: $out/report/report.md"
