#!/usr/bin/env python3
"""Inputs of the differential fuzz target tokenizer_hf, made by Hugging Face `tokenizers`.

    tools/tokenizer_hf_cases.py --out tests/fuzz/regress/tokenizer_hf

Each case is a tokenizer.json (the first 600 ids of Qwen3's, kept in
tests/fuzz/regress/tokenizer/qwen3-first-600, as it is or edited), a text, and what the
package makes of them: "<hash> refused" when it refuses the file, "<hash> ids ..." with
the text's ids, or "<hash> unsupported" for a file it takes and normgrow refuses by name
(a feature normgrow does not implement). The hash is the FNV-1a 64 of the first two
parts (tests/fuzz/fuzz_tokenizer_hf.c). A lone surrogate in a file's text stands for a
byte that is not UTF-8 (surrogateescape). Bytes that are not valid UTF-8 reach the
package through bytes.decode("utf-8", "replace"). Needs the `tokenizers` package.
"""
import argparse
import json
import os

import tokenizers

SEP = b"\n--normgrow-fuzz-part--\n"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BASE = open(os.path.join(ROOT, "tests/fuzz/regress/tokenizer/qwen3-first-600"),
            "rb").read().split(SEP)[0].decode()


def edit(old, new):
    """The base file with its first `old` replaced by `new`."""
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def regex(pattern):
    """The base file with the Split regex `pattern`."""
    d = json.loads(BASE)
    d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern
    return json.dumps(d, ensure_ascii=False)


def edited(change):
    """The base file after change(d) of its parsed JSON d."""
    d = json.loads(BASE)
    change(d)
    return json.dumps(d, ensure_ascii=False)


def drop_last_token(d):
    """Without model.vocab's id 599 (and the merge that makes it): 599 entries."""
    key = next(k for k, i in d["model"]["vocab"].items() if i == 599)
    del d["model"]["vocab"][key]
    d["model"]["merges"] = [m for m in d["model"]["merges"] if "".join(m) != key]


def renumber_last_token(d):
    """model.vocab's id 599 as 600: 600 entries, 600 taken."""
    key = next(k for k, i in d["model"]["vocab"].items() if i == 599)
    d["model"]["vocab"][key] = 600


def added(content, special=True, at=None):
    """A change that adds an added token (id 9999 in the file) at `at` (None: last)."""
    def change(d):
        token = {"id": 9999, "content": content, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": special}
        d["added_tokens"].insert(len(d["added_tokens"]) if at is None else at, token)
    return change


MIXED = "Hello world, the sun <|endoftext|> it's 123 caf\u00e9 e\u0301 \u4e2d\u6587\n\n  x"

# (name, tokenizer.json, text (str or bytes), whether normgrow refuses a file the package takes)
CASES = [
    ("qwen3-small-mixed", BASE, MIXED, False),
    ("qwen3-small-empty-text", BASE, "", False),
    ("qwen3-small-invalid-utf8", BASE, b"ok \x80 \xff \xe4\xbd \xed\xa0\x80 end \xe2\x82", False),
    ("qwen3-small-specials", BASE, "<|im_start|>user\nhi<|im_end|><|endoftext|><|endoftext|"
     "<|object_ref_start|>", False),
    ("qwen3-small-hangul-t-index-0", BASE, "\uac00\u11a7 \u1100\u1161\u11a7 \ud7a3\u11a7 "
     "\uac00\u11a7\u11a8 \u11a7\u0301", False),
    ("qwen3-small-nfc", BASE, "e\u0301 \u1e9b\u0323 A\u030a \u212b \u0958 e\u1dfa\u0301", False),
    ("qwen3-small-whitespace-past-a-piece", BASE, "x" + " " * 70000 + "y\n\n\n \t", False),
    # Empty matches split the text between matches, but right after a match.
    ("regex-empty", regex(""), "ab c\u00e9", False),
    ("regex-empty-matches", regex("x*"), "ab xab axxb", False),
    ("regex-lookahead-only", regex("(?=a)"), "baab a", False),
    # Oniguruma's constructs, as normgrow translates them: \h is a hexadecimal digit, \v the
    # vertical tab alone, \uHHHH a code point; \P{L}, \p{^N}, classes, lazy quantifiers.
    ("regex-h-hex-digit", regex("\\h+|[\\h ]"), "ab12fg  x DEAD beef", False),
    ("regex-h-not-hex-digit", regex("\\H+"), "ab12fg  x", False),
    ("regex-v-vertical-tab", regex("\\v"), "a\x0bb\nc\x85 \u2028d\x0c", False),
    ("regex-u-escape", regex("\\u0061+|\\x{62}|\\x63"), "baabcc", False),
    ("regex-not-letter-digit", regex("\\P{L}+|\\p{^N}"), "ab12 x,y\u0661", False),
    ("regex-class-negated", regex("[^\\s\\p{L}]+|\\s"), "ab12 x,\u00a0\u180e\u3000.", False),
    ("regex-lazy-lookbehind", regex("a+?b|(?<=a)c|."), "aaab acbc\n", False),
    ("regex-caseless", regex("(?i:'s|'t|'re|ab)"), "it's IT'S 'ſ AB aB \u212a", False),
    # What Oniguruma reads otherwise, and normgrow does not translate: refused by name.
    ("regex-p-without-braces", regex("\\pL"), "xpLy aL", True),
    ("regex-caseless-ss", regex("(?i:ss)"), " \u00df ss", True),
    ("regex-caret", regex("^a"), "aa\na", True),
    ("regex-dollar", regex("a$"), "aa\na", True),
    ("regex-d", regex("\\d"), "1 \u0661", True),
    ("regex-w", regex("\\w+"), "ab_c \u203f", True),
    ("regex-brace-from-0", regex("a{,2}"), "aaa", True),
    ("regex-brace-plus", regex("a{2}+"), "aaaaa", True),
    ("regex-nested-class", regex("[a[b]]"), "ab]", True),
    ("regex-class-not-space", regex("[\\S]+"), "a\u180eb", True),
    ("regex-p-lu", regex("\\p{Lu}"), "aB", True),
    # Added tokens get the id tokenizers gives them, not the file's: the id of a token with
    # that content (added before, or a key of model.vocab), else the next after model.vocab's
    # entries and the added ids so far.
    ("added-id-700", edit('{"id": 600,', '{"id": 700,'), MIXED, False),
    ("added-id-5", edit('{"id": 600,', '{"id": 5,'), MIXED, False),
    ("added-new-first", edited(added("<new>", at=0)), "a<new>b<|endoftext|><|im_end|>", False),
    ("added-content-in-vocab", edited(added("he", special=False)), "hello the he<|im_start|>",
     False),
    ("added-content-byte-level", edited(added("\u0120t")), "a\u0120t at \u0120", False),
    ("added-content-twice", edited(added("<|endoftext|>", special=False)),
     "x<|endoftext|>y<|im_end|>", False),
    ("added-after-599-entries", edited(drop_last_token), MIXED + "<|im_end|>", False),
    ("added-id-taken", edited(renumber_last_token), MIXED, True),
    # What tokenizers' reader refuses, normgrow's refuses.
    ("added-special-null", edit('"special": true', '"special": null'), MIXED, False),
    ("added-special-missing", edit(', "special": true', ''), MIXED, False),
    ("added-lstrip-null", edit('"lstrip": false', '"lstrip": null'), MIXED, False),
    ("added-tokens-null", edited(lambda d: d.update(added_tokens=None)), MIXED, False),
    ("added-id-fraction", edit('{"id": 600,', '{"id": 600.0,'), MIXED, False),
    ("vocab-id-fraction", edit('"!": 0,', '"!": 0.0,'), MIXED, False),
    ("vocab-control-character", edit('"!": 0,', '"!\x01": 700, "!": 0,'), MIXED, False),
    ("vocab-invalid-utf8", edit('"!": 0,', '"!\udcff": 700, "!": 0,'), MIXED, False),
    ("fuse-unk-1", edit('"fuse_unk": false', '"fuse_unk": 1'), MIXED, False),
    ("fuse-unk-true", edit('"fuse_unk": false', '"fuse_unk": true'), MIXED, False),
    ("dropout-false", edit('"dropout": null', '"dropout": false'), MIXED, False),
    ("unk-token-false", edit('"unk_token": null', '"unk_token": false'), MIXED, False),
    ("byte-level-prefix-null", edit('"add_prefix_space": false', '"add_prefix_space": null'),
     MIXED, False),
    ("byte-level-trim-missing", edit('"trim_offsets": false, ', ''), MIXED, False),
    ("byte-level-use-regex-null", edit('"use_regex": false', '"use_regex": null'), MIXED,
     False),
    ("split-invert-missing", edit(', "invert": false', ''), MIXED, False),
    ("truncation-false", edit('"truncation": null', '"truncation": false'), MIXED, False),
    ("version-2", edit('"version": "1.0"', '"version": "2.0"'), MIXED, False),
    ("top-key-unknown", edit('"version": "1.0"', '"version": "1.0", "extra": 1'), MIXED, False),
    ("merges-mixed", edit('"merges": [["\u0120", "\u0120"]', '"merges": ["\u0120 \u0120"'),
     MIXED, False),
    ("text-after-json", BASE + "x", MIXED, False),
    # What tokenizers takes and normgrow refuses by name.
    ("post-use-regex-missing", edit(', "use_regex": false}, "decoder"', '}, "decoder"'), MIXED,
     False),
    ("pre-use-regex-missing", edit(', "use_regex": false}]}', '}]}'), MIXED, True),
    ("dropout-0", edit('"dropout": null', '"dropout": 0'), MIXED, True),
    ("unk-token-empty", edit('"unk_token": null', '"unk_token": ""'), MIXED, True),
    ("vocab-nul-key", edit('"!": 0,', '"!\\u0000x": 700, "!": 0,'), MIXED, True),
    ("vocab-key-twice", edit('"!": 0,', '"!": 0, "!": 0,'), MIXED, True),
]


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def verdict(js, raw, unsupported):
    try:
        tok = tokenizers.Tokenizer.from_buffer(js.encode(errors="surrogateescape"))
    except Exception:  # a refusal, whatever the package calls it
        assert not unsupported, "the package refuses a file marked unsupported"
        return "refused"
    if unsupported:
        return "unsupported"
    ids = tok.encode(raw.decode("utf-8", "replace"), add_special_tokens=False).ids
    return "ids" + "".join(" %d" % i for i in ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, js, text, unsupported in CASES:
        raw = text if isinstance(text, bytes) else text.encode()
        head = js.encode(errors="surrogateescape") + SEP + raw
        line = "%016x %s\n" % (fnv1a64(head), verdict(js, raw, unsupported))
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(head + SEP + line.encode())
    print(f"{len(CASES)} cases -> {args.out} (tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
