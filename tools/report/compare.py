"""Two report.md files compared cell by cell:

    PYTHONPATH=tools python3 -m report.compare OLD.md NEW.md

Tables are matched by their section title, rows by their leading text cells
(arm, point, class...), columns by their header. Two cells agree when they
hold the same numbers, each within half a unit of the last digit the coarser
of the two prints (so "1.523" and "1.5234" agree), or the same text. Prints
every cell that differs, the sections, rows and columns only one report has,
and a count; exits 1 when a shared cell differs.
"""
import re
import sys

NUMBER = re.compile(r"[-+−]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|nan|n/a", re.I)


def sections(md):
    """{title: (header, [row cells])} of every section with a table."""
    out, title, rows = {}, None, None
    for line in md.splitlines():
        if line.startswith("## "):
            title, rows = line[3:].strip(), None
        elif title and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if rows is None:
                rows = []
                out[title] = (cells, rows)
            elif not set(line) <= set("|-: "):
                rows.append(cells)
    return out


def numbers(cell):
    """[(value, half unit)] of the numbers in a cell, None for n/a."""
    out = []
    for m in NUMBER.finditer(cell):
        t = m.group(0).replace("−", "-")
        if t.lower() == "n/a":
            out.append((None, 0))
            continue
        if t.lower() == "nan":
            out.append((float("nan"), 0))
            continue
        mant, _, exp = t.lower().partition("e")
        decimals = len(mant.split(".")[1]) if "." in mant else 0
        out.append((float(t), 0.5 * 10 ** (-decimals + (int(exp) if exp else 0))))
    return out


def agree(a, b):
    na, nb = numbers(a), numbers(b)
    if not na and not nb:
        return a == b
    if len(na) != len(nb):
        return False
    for (x, hx), (y, hy) in zip(na, nb):
        if x is None or y is None:
            if x is not y:
                return False
        elif x != x or y != y:
            if not (x != x and y != y):
                return False
        elif abs(x - y) > max(hx, hy) * (1 + 1e-9) + 1e-15:
            return False
    return True


# The columns that name a row rather than hold a reading.
KEYS = {"arm", "point", "class", "removal", "row − column", "placement", "step", "tokens", "depth", "new block",
        "A − B", "run", "reading", "placement P"}


def key_width(header):
    """The leading columns that name a row."""
    k = 0
    while k < len(header) and header[k] in KEYS:
        k += 1
    return max(k, 1)


def compare(old_md, new_md, say=print):
    old, new = sections(old_md), sections(new_md)
    same = differ = 0
    for title in old:
        if title not in new:
            say(f"only in the old report: section \"{title}\"")
            continue
        (ho, ro), (hn, rn) = old[title], new[title]
        k = key_width(ho)
        index = {tuple(r[:k]): r for r in rn}
        for c in ho:
            if c not in hn:
                say(f"{title}: column \"{c}\" only in the old report")
        for c in hn:
            if c not in ho:
                say(f"{title}: column \"{c}\" only in the new report")
        seen = set()
        for r in ro:
            key = tuple(r[:k])
            if key not in index:
                say(f"{title}: row {' / '.join(key)} only in the old report")
                continue
            seen.add(key)
            other = index[key]
            for c, head in enumerate(ho):
                if c < k or head not in hn:
                    continue
                cn = other[hn.index(head)]
                if agree(r[c], cn):
                    same += 1
                else:
                    differ += 1
                    say(f"{title}: {' / '.join(key)}: {head}: old {r[c]!r}, new {cn!r}")
        for key in index:
            if key not in seen:
                say(f"{title}: row {' / '.join(key)} only in the new report")
    for title in new:
        if title not in old:
            say(f"only in the new report: section \"{title}\"")
    say(f"{same} cells agree, {differ} differ")
    return differ


def main(argv):
    if len(argv) != 3:
        print("usage: python3 -m report.compare OLD.md NEW.md", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f, open(argv[2], encoding="utf-8") as g:
        return 1 if compare(f.read(), g.read()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
