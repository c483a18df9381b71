#!/usr/bin/env python3
"""Test vectors for normgrow's tokenizer, made by the Hugging Face `tokenizers` package.

    tools/tokenizer_vectors.py --tokenizer DIR_OR_JSON --out tests/fixtures/tokenizer/vectors.json

Each case is a text (as bytes, hex) and the ids `tokenizers` gives it. Bytes that are
not valid UTF-8 reach the package the only way they can, through
bytes.decode("utf-8", "replace"); normgrow repairs them the same way.
Needs the `tokenizers` package: run it with the python tools/tokenizer_venv.sh prints.
"""
import argparse
import json
import os
import random

import tokenizers

import hf_tokenizer

CASES = [
    ("empty", b""),
    ("english prose", "The quick brown fox jumps over the lazy dog. It wasn't the first time; "
     "she'd said so before, and they'll say it again.".encode()),
    ("contractions lower", b"it's don't they're we've I'm we'll he'd"),
    ("contractions upper", b"IT'S DON'T THEY'RE WE'VE I'M WE'LL HE'D"),
    ("contractions mixed case", b"It'S dOn'T tHeY'rE wE'Ve i'M We'Ll hE'D 'S 'LL 'll 'Ll"),
    ("contraction long s", "it'\u017f and '\u017fs".encode()),
    ("apostrophe alone", b"' '' ''' rock'n'roll 'tis"),
    ("python code", b"def f(x, y=2):\n    return {'a': x ** y}  # comment\n\n\nclass A:\n\tpass\n"),
    ("c code", b"int main(void) {\n  for (int i = 0; i < 10; i++) printf(\"%d\\n\", i);\r\n}\n"),
    ("chinese", "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002"
     "\u673a\u5668\u5b66\u4e60\u662f\u4eba\u5de5\u667a\u80fd\u7684\u4e00\u4e2a\u5206\u652f\u3002".encode()),
    ("japanese", "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01\u30ab\u30bf\u30ab\u30ca\u3068"
     "\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57\u3002".encode()),
    ("korean", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4! \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.".encode()),
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c "
     "\u0647\u0630\u0627 \u0646\u0635 \u0639\u0631\u0628\u064a \u0661\u0662\u0663.".encode()),
    ("devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e\u0964 "
     "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u0932\u093f\u0916\u093e \u0917\u092f\u093e "
     "\u0967\u0968\u0969".encode()),
    ("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e20\u0e32\u0e29\u0e32"
     "\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07".encode()),
    ("cyrillic greek", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u039a\u03b1\u03bb\u03b7"
     "\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5.".encode()),
    ("emoji zwj", "family \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 flag "
     "\U0001F3F3\uFE0F\u200D\U0001F308 skin \U0001F44B\U0001F3FD!".encode()),
    ("emoji runs", "\U0001F600\U0001F600\U0001F600 ok \u2764\uFE0F\u2764\uFE0F".encode()),
    ("nfc combining", "Cafe\u0301 re\u0301sume\u0301 n\u0303 A\u030a \u1e9b\u0323 \u0041\u0308\u0304".encode()),
    ("nfc hangul jamo", "\u1100\u1161\u11a8 \u1112\u1161\u11ab".encode()),
    # U+11A7 is Hangul's T index 0 ("no trailing consonant"), a vowel composing with nothing.
    ("nfc hangul t index 0", "\uac00\u11a7 \u1100\u1161\u11a7 \ud7a3\u11a7 \uac00\u11a7\u11a8 "
     "\ub098\u11a7\u1161 \u11a7\u0301".encode()),
    ("nfc already composed", "Caf\u00e9 r\u00e9sum\u00e9 \u00f1 \u00c5".encode()),
    ("nfc singletons", "\u212b \u2126 \u212a \u0958".encode()),
    # Marks newer than Unicode 9.0, which the package's NFC tables do not know.
    ("nfc marks after unicode 9", "e\u1dfa\u0301 \u08d3\u0eba a\u0301\u1dfa \u0c15\u0c3c\u0c4d "
     "o\u1ac1\u0308".encode()),
    # Letters and digits newer than PCRE2 10.42's Unicode 14.0, and U+180E (not White_Space
    # since Unicode 6.3), next to what splits words differently by them.
    ("letters after unicode 14", "1\U00031350'o a\U00011F04'o 1\U0002EBF0'o 1\U0001351e'o "
     "\U00011F50\U00011F51 x\u1c89y".encode()),
    ("mongolian vowel separator", "a\u180e\u180eb \u180e'o \u1828\u180e\u1820".encode()),
    ("digit runs", b"12345678901234567890 3.14159 1,000,000 2024-01-01 0x1F"),
    ("unicode digits", "\u0661\u0662\u0663 \u0967\u0968 \uff11\uff12 \u00bd \u2163".encode()),
    ("whitespace runs", b"a  b   c    d          e \n\n\n  f"),
    ("tabs", b"\tindented\t\ttabs\t \t mixed\t"),
    ("crlf", b"line one\r\nline two\r\n\r\nline four\r\n"),
    ("lone cr", b"a\rb\r\rc"),
    ("trailing spaces", b"trailing   \nspaces \n   "),
    ("only spaces", b"     "),
    ("only newlines", b"\n\n\n"),
    ("unicode spaces", "a\u00a0b\u2003c\u3000d\u2028e\u0085f\u200bg".encode()),
    ("special tokens", b"<|endoftext|>Doc one.<|endoftext|><|endoftext|>Doc two<|im_start|>user\n"
     b"hi<|im_end|>\n<think>x</think><tool_call>"),
    ("special token partial", b"<|endoftext| <|endoftext <|im_start|x <|fim_prefix|>a<|fim_pad|>"),
    ("special token in word", b"abc<|endoftext|>def  <|endoftext|>  ghi"),
    ("punctuation", b"Hello!!! What?! ... --- *** ((()))[[]] {}; @#$%^&* \"quoted\" 'single'"),
    ("urls", b"https://example.com/path?q=1&r=two#frag user@example.org"),
    ("markdown", b"# Title\n\n* item **bold** _it_ `code`\n\n| a | b |\n|---|---|\n"),
    ("invalid utf8 lone bytes", b"ok \x80 \xff \xfe \xc0\xaf end"),
    ("invalid utf8 truncated", b"trunc \xe4\xbd (two of three) \xf0\x9f\x98 (three of four)"),
    ("invalid utf8 surrogate", b"surrogate \xed\xa0\x80 and overlong \xe0\x80\x80 \xf4\x90\x80\x80"),
    ("invalid utf8 at end", b"ends badly \xe2\x82"),
    ("nul bytes", b"a\x00b\x00\x00c"),
    ("long word", b"Pneumonoultramicroscopicsilicovolcanoconiosis " + b"a" * 300),
    ("long whitespace", b"x" + b" " * 2000 + b"y" + b"\n" * 500),
    ("mixed scripts", "Tokyo \u6771\u4eac 2024\u5e74 \u0645\u0631\u062d\u0628\u0627 hello\u4e16\u754c".encode()),
]

# Fragments the random cases are made of: each kind of boundary the regex draws.
FRAGMENTS = [
    " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "'s", "'S", "'ll", "'LL", "'re", "'Ve",
    "'d", "'M", "'t", "'", "a", "Z", "word", " word", "WORD", "42", "7", "\u0661", "\u00bd", ".", ",",
    "!?", "...", "--", "(", ")", "\"", "#", "_", "-", "e\u0301", "\u0301", "\u00e9", "\u4e2d\u6587",
    "\u3042", "\uc548", "\u0627\u0644", "\u0928\u092e", "\u0e44\u0e17\u0e22", "\U0001F600", "\u200d",
    "\U0001F468\u200D\U0001F469", "\ufe0f", "<|endoftext|>", "<|im_start|>", "<think>", "<|", "|>",
    "\x00", "\u2028", "\u0085", "\u200b", "\u1100\u1161", "\u0301", "\u0323", "\u1dfa", "\u08d3",
    "\u0eba", "\U00031350", "\U00011F50", "\u180e",
]
BAD_BYTES = [b"\x80", b"\xff", b"\xe4\xbd", b"\xed\xa0\x80", b"\xc0\xaf"]


def random_cases(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        parts = []
        for _ in range(rng.randint(1, 24)):
            if rng.random() < 0.04:
                parts.append(rng.choice(BAD_BYTES))
            else:
                parts.append(rng.choice(FRAGMENTS).encode())
        out.append((f"random {i}", b"".join(parts)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json or a directory holding one")
    ap.add_argument("--out", required=True)
    ap.add_argument("--random", type=int, default=300, help="number of random cases")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    path = args.tokenizer
    tok = hf_tokenizer.load(path)
    cases = []
    for name, raw in CASES + random_cases(args.random, args.seed):
        text = raw.decode("utf-8", "replace")
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"name": name, "text_hex": raw.hex(), "ids": ids})
    with open(args.out + ".tmp", "w") as f:  # one case a line
        f.write('{"tokenizers_version": %s, "cases": [\n' % json.dumps(tokenizers.__version__))
        f.write(",\n".join(json.dumps(c, ensure_ascii=True) for c in cases))
        f.write("\n]}\n")
    os.replace(args.out + ".tmp", args.out)
    print(f"{len(cases)} cases -> {args.out} (tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
