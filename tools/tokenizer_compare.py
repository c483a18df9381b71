#!/usr/bin/env python3
"""normgrow's shards against the Hugging Face `tokenizers` package, id for id, and speed.

    tokenizer_compare.py --tokenizer DIR_OR_JSON --corpus DIR --shards OUT_DIR

CORPUS holds plain-text files, each one document (read in name order, as
`normgrow data CORPUS --tokenizer ... --out OUT_DIR` does). Every document's ids
and <|endoftext|> must be, in order, the next ids of the train or of the val
shard. Prints "<MB/s encode> <MB/s encode_batch> <identical|first difference>".
"""
import argparse
import array
import json
import os
import time

import hf_tokenizer

EOT = "<|endoftext|>"


def shard_ids(out, split):
    """All ids of OUT/<split>.bin, or of the files of OUT/<split>.manifest.json."""
    single = os.path.join(out, split + ".bin")
    files = [single]
    if not os.path.exists(single):
        with open(os.path.join(out, split + ".manifest.json")) as f:
            files = [os.path.join(out, e["file"]) for e in json.load(f)["files"]]
    ids = array.array("I")
    for path in files:
        with open(path, "rb") as f:
            f.seek(32)
            ids.frombytes(f.read())
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--shards", required=True)
    args = ap.parse_args()
    path = args.tokenizer
    tok = hf_tokenizer.load(path)
    eot = tok.token_to_id(EOT)
    docs = []
    for name in sorted(os.listdir(args.corpus)):  # byte order, as normgrow
        with open(os.path.join(args.corpus, name), "rb") as f:
            docs.append(f.read().decode("utf-8", "replace"))
    docs = [d for d in docs if d.strip(" \t\n\v\f\r")]  # normgrow drops blank documents
    mb = sum(len(d.encode()) for d in docs) / 1e6
    t = time.perf_counter()
    one = [tok.encode(d, add_special_tokens=False).ids for d in docs]
    one_speed = mb / (time.perf_counter() - t)
    t = time.perf_counter()
    tok.encode_batch(docs, add_special_tokens=False)
    batch_speed = mb / (time.perf_counter() - t)

    splits = [shard_ids(args.shards, "train"), shard_ids(args.shards, "val")]
    at = [0, 0]
    verdict = "identical"
    for i, ids in enumerate(one):
        want = array.array("I", ids + [eot])
        k = next((k for k in (0, 1) if splits[k][at[k]:at[k] + len(want)] == want), None)
        if k is None:
            verdict = f"document {i} differs"
            break
        at[k] += len(want)
    if verdict == "identical" and at != [len(s) for s in splits]:
        verdict = "shards hold more tokens"
    print(f"{one_speed:.2f} {batch_speed:.2f} {verdict}")


if __name__ == "__main__":
    main()
