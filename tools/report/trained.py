"""Which runs trained. A run did not train when it diverged (its metrics.jsonl
ends with the "diverged" record of the step its sanity check stopped it at),
when its last validation CE is not finite, or ends within PLATEAU_MARGIN nats
of (or above) the unigram entropy of its validation shard (the plateau of a
model that predicts every token from the token frequencies alone), or when its
metrics.jsonl stops before its last step (stopped early, or still training:
the files do not tell which).
Such runs are named with their reason and left out of every mean.

The entropy is -sum p log p over the token frequencies of the shard the
config's data.val names (a shard file or a manifest, include/normgrow/data.h),
found as given, else below the directory the run's own run_dir is relative
to, else below one of the run directory's parents. Where it is not found the
plateau test is not made, and the report says so.
"""
import json
import math
import os

import numpy as np

from .runs import ReportError

PLATEAU_MARGIN = 0.1  # nats per token
SHARD_MAGIC = b"NGTOKENS"
SHARD_HEADER = 32
CHUNK = 1 << 24  # tokens counted at a time


def shard_counts(path):
    """Token counts [vocab] of one shard file."""
    with open(path, "rb") as f:
        head = f.read(SHARD_HEADER)
        size = os.fstat(f.fileno()).st_size
    if len(head) < SHARD_HEADER or head[:8] != SHARD_MAGIC:
        raise ReportError(f"{path}: not a normgrow token shard")
    version, vocab = np.frombuffer(head[8:16], "<u4")
    n = int(np.frombuffer(head[24:32], "<u8")[0])
    if version != 1 or vocab < 1 or size != SHARD_HEADER + 4 * n:
        raise ReportError(f"{path}: shard header does not match the file (version {version}, {n} tokens, {size} bytes)")
    tokens = np.memmap(path, "<u4", "r", SHARD_HEADER, (n,)) if n else np.zeros(0, "<u4")
    counts = np.zeros(int(vocab), np.int64)
    for at in range(0, n, CHUNK):
        part = tokens[at:at + CHUNK]
        if part.size and part.max() >= vocab:
            raise ReportError(f"{path}: a token id is >= the vocabulary size {vocab}")
        counts += np.bincount(part, minlength=int(vocab))
    return counts


def unigram_entropy(path):
    """Nats per token of the token frequencies of a shard or a manifest."""
    if path.endswith(".json"):
        try:
            with open(path, encoding="utf-8") as f:
                manifest = json.load(f)
            files = [os.path.join(os.path.dirname(path), e["file"]) for e in manifest["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            raise ReportError(f"{path}: not a normgrow shard manifest") from None
        counts = [shard_counts(file) for file in files]
        if not counts or any(len(c) != len(counts[0]) for c in counts):
            raise ReportError(f"{path}: its files differ in vocabulary size")
        counts = sum(counts)
    else:
        counts = shard_counts(path)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def find_val_shard(run):
    """The path of the run's data.val, or None when it is not found."""
    val = run.settings.get("data.val")
    if not isinstance(val, str) or not val:
        return None
    if os.path.isabs(val):
        return val if os.path.isfile(val) else None
    here = os.path.abspath(run.dir)
    roots = [os.getcwd()]
    run_dir = run.settings.get("run_dir")
    if isinstance(run_dir, str) and run_dir and here.endswith(os.path.normpath(run_dir)):
        roots.append(here[:len(here) - len(os.path.normpath(run_dir))])
    while os.path.dirname(here) != here:
        here = os.path.dirname(here)
        roots.append(here)
    for root in roots:
        path = os.path.join(root, val)
        if os.path.isfile(path):
            return path
    return None


class Entropies:
    """Unigram entropy per shard path, each shard read once."""

    def __init__(self):
        self.known = {}

    def of(self, run):
        path = find_val_shard(run)
        if path is None:
            return None, run.settings.get("data.val")
        key = os.path.realpath(path)
        if key not in self.known:
            self.known[key] = unigram_entropy(path)
        return self.known[key], path


def why_not_trained(run, entropy):
    """The reason the run did not train, or None when it did."""
    if run.diverged is not None:
        return f"diverged at step {run.last_step} of {run.steps_total}: {run.diverged}"
    if not run.evals:
        return (f"stopped before its first evaluation: its metrics.jsonl ends at step {run.last_step} of "
                f"{run.steps_total}")
    ce = run.last.ce
    if not math.isfinite(ce):
        return "its last validation CE is not finite"
    if not run.finished:
        return (f"unfinished: its metrics.jsonl stops at step {run.last_step} of {run.steps_total} "
                "(stopped early, or still training)")
    if entropy is not None and ce > entropy - PLATEAU_MARGIN:
        return (f"at the unigram plateau: validation CE {ce:.4f}, the unigram entropy of its "
                f"validation data {entropy:.4f}")
    return None


def classify(runs):
    """Sets run.failed (the reason, or None), run.entropy and run.val_shard
    (the shard's path, or the data.val that was not found) of every run."""
    ent = Entropies()
    for r in runs:
        r.entropy, r.val_shard = ent.of(r)
        r.failed = why_not_trained(r, r.entropy)
