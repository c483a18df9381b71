#!/usr/bin/env bash
# tools/study.sh (the study's launcher) from the outside, one process, on sets of one's own
# (--configs): configs/rehearsal's seven arms and teacher shrunk to a few steps each.
# 1. Byte-level: data from a text corpus, the set's teacher pretrained and used as a Hugging
#    Face directory, the seven arms, the report; a second call keeps all of it; an arm that
#    diverges is kept and marked in the report, and the study goes on.
# 2. Qwen3's vocabulary, with the real Qwen3 tokenizer (../shared, when present): a tiny
#    teacher of 151,936 tokens made here and exported with the tokenizer's files is the
#    --teacher; the launcher tokenizes the corpus with its tokenizer.json (the same ids as
#    `normgrow data --tokenizer` gives), trains the seven arms at that vocabulary from it and
#    writes the report.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
tok=$root/../shared/data/qwen3-tokenizer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export NG_BIN=$bin PROGRESS_SECONDS=3600 OMP_NUM_THREADS=1
arms="joint-pre joint-post grow-pre grow-post control-extra-tokens control-layer-tokens control-lr-restarts"
corpus=(--corpus /usr/share/common-licenses/GPL-3 --corpus /usr/share/common-licenses/GPL-2 --records-split "")

# set DIR VOCAB: configs/rehearsal at hidden 16, batch 4 x 16, a 32nd of its tokens
shrink() {
  python3 - "$root/configs/rehearsal" "$1" "$2" <<'EOF'
import json, os, sys
src, dst, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
for f in sorted(os.listdir(src)):
    c = json.load(open(os.path.join(src, f)))
    c["model"].update(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=8)
    c["data"].update(batch=4, seq=16, micro_batch=4)
    for s in c["stages"]:
        s["tokens"] = max(64, s["tokens"] // 32 // 64 * 64)
    c["eval"] = {"every_steps": 4, "batches": 1}
    c["checkpoint_every_steps"] = 4
    if "growth" in c:
        c["growth"]["gate_steps"] = 2
    json.dump(c, open(os.path.join(dst, f), "w"), indent=2)
EOF
}
finals() { for a in $arms; do stat -c '%n %i %Y' "$1/$a/final.safetensors" 2>/dev/null; done; }

# 1. byte-level
shrink bytes 257
"$root/tools/study.sh" --configs bytes "${corpus[@]}" --out s1 >s1.log 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(finals s1 | grep -c .)" -eq 7 ] && [ -f s1/teacher-hf/config.json ] &&
   [ -f s1/report/report.md ] && grep -q '^| grow-post ' s1/report/report.md; then
  echo "ok study --configs: byte-level data, the teacher pretrained and exported, 7 arms, the report ($(grep -c 'finished$' s1.log) arms trained)"
else
  echo "FAIL study --configs: status $rc; $(tail -3 s1.log | tr '\n' ' ')"
fi
before=$(finals s1)
"$root/tools/study.sh" --configs bytes "${corpus[@]}" --out s1 >s1b.log 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$before" = "$(finals s1)" ] && [ "$(grep -c 'finished, kept' s1b.log)" -eq 7 ] &&
   grep -q 'data: reusing' s1b.log && grep -q 'teacher: reusing' s1b.log; then
  echo "ok study: a second call keeps the data, the teacher and the 7 finished arms"
else
  echo "FAIL study: a second call did not keep what was done (status $rc)"
fi
# An arm that diverges (joint-post at lr.peak 10 with a weight decay of 1) is a result: the
# study's copy with that arm's run removed trains it, goes on, and its report marks it as not
# trained (exit 0); a second call keeps it.
cp -r bytes dv && cp -r s1 s3 && rm -rf s3/joint-post s3/report
python3 -c "import json, sys
c = json.load(open(sys.argv[1]))
c['lr']['peak'], c['optim']['weight_decay'] = 10, 1
json.dump(c, open(sys.argv[1], 'w'), indent=2)" dv/joint-post.json
"$root/tools/study.sh" --configs dv "${corpus[@]}" --out s3 >s3.log 2>&1
rc=$?
"$root/tools/study.sh" --configs dv "${corpus[@]}" --out s3 >s3b.log 2>&1
rc2=$?
if [ "$rc" -eq 0 ] && grep -q 'arm 2/7 joint-post: diverged (its output is above' s3.log &&
   [ "$(grep -c 'finished, kept' s3.log)" -eq 6 ] && [ ! -e s3/joint-post/final.safetensors ] &&
   grep -q '^- `s3/joint-post` (`joint-post` seed 1): diverged at step [0-9]* of ' s3/report/report.md &&
   [ "$rc2" -eq 0 ] && grep -q 'arm 2/7 joint-post: diverged, kept' s3b.log && ! grep -q ': starting in' s3b.log; then
  echo "ok study with an arm that diverges: the others kept, the report marks it; a second call keeps it"
else
  echo "FAIL study with an arm that diverges: status $rc, then $rc2; $(tail -3 s3.log | tr '\n' ' ')"
fi
"$root/tools/study.sh" --configs nowhere "${corpus[@]}" --out bad >bad.out 2>&1
rc=$?
if [ "$rc" -eq 2 ] && [ "$(wc -l <bad.out)" -eq 1 ] && grep -q "study: --configs .*nowhere: not a directory" bad.out; then
  echo "ok study --configs of no directory: refused ($(cat bad.out))"
else
  echo "FAIL study --configs of no directory: status $rc, $(cat bad.out)"
fi

# 2. Qwen3's vocabulary and tokenizer
if [ ! -f "$tok/tokenizer.json" ]; then
  echo "skip study with the Qwen3 tokenizer: no tokenizer at $tok"
  exit 0
fi
shrink qwen 151936
rm qwen/teacher.json  # the teacher is given
python3 - qwen/../bytes/teacher.json qteacher.json "$tmp/qdata" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["model"]["vocab_size"] = 151936
c["data"].update(train=sys.argv[3] + "/train.bin", val=sys.argv[3] + "/val.bin")
c["run_dir"] = "qteacher"
c["stages"][0]["tokens"] = 1024
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
"$bin" data /usr/share/common-licenses/GPL-3 --records-split "" --tokenizer "$tok" --out qdata >/dev/null 2>&1 &&
  "$bin" train qteacher.json >/dev/null 2>&1 &&
  "$bin" export qteacher/final.safetensors qhf --dtype f32 >/dev/null 2>&1 &&
  cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" qhf/ ||
  { echo "FAIL study with the Qwen3 tokenizer: could not make the tiny Qwen3-vocabulary teacher"; exit 0; }
"$root/tools/study.sh" --configs qwen --teacher qhf "${corpus[@]}" --out s2 >s2.log 2>&1
rc=$?
"$bin" data "${corpus[@]:1:1}" "${corpus[@]:3:1}" --records-split "" --tokenizer "$tok" --out direct >/dev/null 2>&1
same=$(cmp -s s2/data/train.bin direct/train.bin && cmp -s s2/data/val.bin direct/val.bin && echo yes)
if [ "$rc" -eq 0 ] && [ "$same" = yes ] && [ "$(finals s2 | grep -c .)" -eq 7 ] && [ -f s2/report/report.md ] &&
   grep -q "tokenizer of qhf" s2.log; then
  echo "ok study with the Qwen3 tokenizer: the corpus tokenized by the teacher's tokenizer.json (the shards of \`normgrow data --tokenizer\`), 7 arms at vocabulary 151,936, the report"
else
  echo "FAIL study with the Qwen3 tokenizer: status $rc, shards as normgrow data's: ${same:-no}; $(tail -3 s2.log | tr '\n' ' ')"
fi
