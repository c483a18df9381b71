#!/usr/bin/env python3
"""Every Unicode code point, and every composition boundary, through normgrow's tokenizer
and Hugging Face `tokenizers`.

    tokenizer_codepoints.py --tokenizer DIR_OR_JSON --bin build/normgrow

Code points: each code point X (surrogates aside) goes in the probe "aXX'o 1X" + U+0301,
where its class (letter, digit, space, mark, other) and its normalization decide the words.

Compositions: the pairs and triples where NFC composes, reorders or is blocked:
  - Hangul: every leading consonant (L) with every vowel (V), alone and with every trailing
    consonant (T), U+11A7 (the T index 0, no trailing consonant) included; every LV syllable
    followed by every T and every V; every syllable (LV and LVT) followed by the first and
    last T, U+11A7, U+11C3 and the first and last V; each with the jamo just outside the
    composing ranges and a combining mark in between;
  - combining marks: every mark after "a" and "e" and after U+11A7; two and three marks of
    every pair and triple of canonical combining classes (one mark a class, in both orders,
    so that each pair is once in order and once reordered);
  - every canonical pair (a starter and what composes with it) with a mark of every class
    before and after the second part, and every character with a canonical decomposition
    followed by a mark of every class.
Marks are those of Python's Unicode and those newer than Unicode 9.0 (ref/nfc_unicode9.h).

The probes are joined by <|endoftext|> and encoded in pieces by `normgrow tokenize` and by
the package. Prints "<N> code points, <D> differ" and "<M> composition sequences, <D>
differ", each with the first few that do.
"""
import argparse
import os
import re
import subprocess
import unicodedata

import hf_tokenizer

SEP = "<|endoftext|>"
PIECE = 4 << 20  # bytes of probes a call of `normgrow tokenize`

L = list(range(0x1100, 0x1113)) + [0x10FF, 0x1113, 0x115F, 0xA960]
V = list(range(0x1161, 0x1176)) + [0x1160, 0x1176, 0xD7B0]
T = list(range(0x11A7, 0x11C3)) + [0x11C3, 0xD7CB]  # 0x11A7: T index 0
S_BASE, S_COUNT, T_COUNT = 0xAC00, 11172, 28
LV = [S_BASE + k for k in range(0, S_COUNT, T_COUNT)] + [S_BASE - 1, S_BASE + S_COUNT]
SYLLABLES = range(S_BASE, S_BASE + S_COUNT)
AFTER_SYLLABLE = [0x11A7, 0x11A8, 0x11C2, 0x11C3, 0x1160, 0x1161, 0x1175, 0x1176]


def parts(ids, eot):
    out = [[]]
    for i in ids:
        if i == eot:
            out.append([])
        else:
            out[-1].append(i)
    return out


def differing(tok, args, probes):
    """The indices of the probes whose ids differ."""
    eot = tok.token_to_id(SEP)
    out, k = [], 0
    while k < len(probes):
        end, size = k, 0
        while end < len(probes) and size < PIECE:
            size += len(probes[end].encode()) + len(SEP)
            end += 1
        text = SEP.join(probes[k:end])
        got = subprocess.run([args.bin, "tokenize", "--tokenizer", args.tokenizer, "-"],
                             input=text.encode(), capture_output=True, check=True).stdout
        g = parts(list(map(int, got.split())), eot)
        w = parts(tok.encode(text, add_special_tokens=False).ids, eot)
        out += [k + i for i in range(end - k) if i >= len(g) or g[i] != w[i]]
        k = end
    return out


def codepoint_probes():
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    return cps, ["a%s%s'o 1%s\u0301" % ((chr(cp),) * 3) for cp in cps]


def newer_marks():
    """The code points of ref/nfc_unicode9.h (newer than Unicode 9.0, normalized by utf8proc)."""
    path = os.path.join(os.path.dirname(__file__), "..", "ref", "nfc_unicode9.h")
    with open(path) as f:
        pairs = re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+)\}", f.read())
    return [cp for lo, hi in pairs for cp in range(int(lo, 16), int(hi, 16) + 1)]


def hangul_probes():
    c = chr
    out = [c(l) + c(v) for l in L for v in V]
    out += [c(l) + c(v) + c(t) for l in L for v in V for t in T]
    out += [c(s) + c(t) for s in LV for t in T] + [c(s) + c(v) for s in LV for v in V]
    out += [c(s) + c(x) for s in SYLLABLES for x in AFTER_SYLLABLE]
    out += [c(s) + c(0x11A7) + c(t) for s in LV for t in (0x11A7, 0x11A8, 0x11C2)]
    out += [c(l) + c(0x0301) + c(v) for l in L for v in V] + [c(s) + c(0x0301) + c(t) for s in LV for t in T]
    out += [c(l) + c(v) + c(0x11A7) + c(0x0301) for l in L for v in V]
    return out


def mark_probes():
    marks = sorted({cp for cp in range(0x110000) if unicodedata.combining(chr(cp))} | set(newer_marks()))
    by_class = {}
    for m in marks:
        by_class.setdefault(unicodedata.combining(chr(m)), m)
    reps = [chr(m) for m in by_class.values()]  # one mark a class (newer ones: class 0 here)
    out = [base + chr(m) for base in ("a", "e", "\u11a7") for m in marks]
    out += ["e" + x + y for x in reps for y in reps]
    out += ["a" + x + y + z for x in reps for y in reps for z in reps]
    pairs, composed = [], []
    for cp in range(0x110000):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<"):
            composed.append(chr(cp))
            if len(d.split()) == 2:
                pairs.append([chr(int(x, 16)) for x in d.split()])
    out += [s + m + t for s, t in pairs for m in reps] + [s + t + m for s, t in pairs for m in reps]
    out += [x + m for x in composed for m in reps]
    return out


def report(what, items, bad, name):
    first = " ".join(name(items[i]) for i in bad[:10])
    print(f"{len(items)} {what}, {len(bad)} differ {first}".rstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    tok = hf_tokenizer.load(args.tokenizer)
    cps, probes = codepoint_probes()
    report("code points", cps, differing(tok, args, probes), lambda cp: "U+%04X" % cp)
    probes = hangul_probes() + mark_probes()
    report("composition sequences", probes, differing(tok, args, probes),
           lambda s: "+".join("%04X" % ord(ch) for ch in s))


if __name__ == "__main__":
    main()
