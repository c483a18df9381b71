#!/usr/bin/env python3
"""Every Unicode code point through normgrow's tokenizer and Hugging Face `tokenizers`.

    tokenizer_codepoints.py --tokenizer DIR_OR_JSON --bin build/normgrow

Each code point X (surrogates aside) goes in the probe "aXX'o 1X" + U+0301, where its
class (letter, digit, space, mark, other) and its normalization decide the words. The
probes are joined by <|endoftext|> and encoded in 8 pieces by `normgrow tokenize` and by
the package. Prints "<N> code points, <D> differ" and the first few that do.
"""
import argparse
import subprocess

import hf_tokenizer

SEP = "<|endoftext|>"


def parts(ids, eot):
    out = [[]]
    for i in ids:
        if i == eot:
            out.append([])
        else:
            out[-1].append(i)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    path = args.tokenizer
    tok = hf_tokenizer.load(path)
    eot = tok.token_to_id(SEP)
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    step = (len(cps) + 7) // 8
    differ = []
    for k in range(0, len(cps), step):
        chunk = cps[k:k + step]
        text = SEP.join("a%s%s'o 1%s\u0301" % ((chr(cp),) * 3) for cp in chunk)
        got = subprocess.run([args.bin, "tokenize", "--tokenizer", args.tokenizer, "-"],
                             input=text.encode(), capture_output=True, check=True).stdout
        g = parts(list(map(int, got.split())), eot)
        w = parts(tok.encode(text, add_special_tokens=False).ids, eot)
        differ += [chunk[i] for i in range(len(chunk)) if i >= len(g) or g[i] != w[i]]
    first = " ".join("U+%04X" % cp for cp in differ[:10])
    print(f"{len(cps)} code points, {len(differ)} differ {first}".rstrip())


if __name__ == "__main__":
    main()
