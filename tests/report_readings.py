#!/usr/bin/env python3
"""Recomputes, from the run directories' files alone, the report's table of
validation CE where stages change, the rows of its sections on the residual
RMS spread (the stream each new block receives, the spread per layer at the
end, the spread by token class) and the ablation's "min over blocks" column,
and compares them with report.md.

    report_readings.py REPORT.md RUN_DIR...

Reads config.json ("name", "model.norm_placement"), metrics.jsonl, diag.jsonl
and diag_final.json with the json module only; shares none of normgrow's code.
Prints one "ok ..." or "FAIL ..." line per section.
"""
import json
import math
import os
import sys

CLASSES = ["window_start", "separator", "after_separator", "structural", "ordinary"]
TITLE = {"pre": "Pre-Norm", "post": "Post-Norm", "lns": "LNS"}


def load(run_dir):
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(run_dir, "diag.jsonl"), encoding="utf-8") as f:
        diag = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(run_dir, "diag_final.json"), encoding="utf-8") as f:
        final = json.load(f)
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    placement = config["model"]["norm_placement"]
    return {"name": config["name"], "placement": placement, "post": placement == "post",
            "ce_at": [(m["step"], m.get("stage", 0), m["val_ce"]) for m in metrics if m["event"] == "eval"],
            "evals": [d for d in diag if "event" not in d],
            "growths": [d for d in diag if d.get("event") == "growth"], "final": final}


def point(record, name):
    return next(p for p in record["points"] if p["name"] == name)


def num(v):
    return math.nan if v is None else v


def mean_over_seeds(values):
    """The mean of the values that exist (not None), or None when none does."""
    have = [v for v in values if v is not None]
    if not have:
        return None
    total = 0.0
    for v in have:
        total += v
    return total / len(have)


def fmt(spec, v):
    return "n/a" if v is None else spec % v


def section_header(md, title):
    """The header row of the table under '## title', as a list of cells (None: no table)."""
    inside = False
    for line in md.splitlines():
        if line.startswith("## "):
            inside = line == "## " + title
        elif inside and line.startswith("|"):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    return None


def section_rows(md, title):
    """The table rows (not header or rule) under '## title', as lists of cells."""
    rows, inside, seen_header = [], False, False
    for line in md.splitlines():
        if line.startswith("## "):
            inside, seen_header = line == "## " + title, False
            continue
        if inside and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not seen_header:
                seen_header = True
            elif not set(line) <= set("|-: "):
                rows.append(cells)
    return rows


def arms_of(runs):
    arms = {}
    for r in runs:
        arms.setdefault(r["name"], []).append(r)
    return list(arms.values())


def mean_std(values):
    """'mean ± std' (sample std) of the values, the mean alone for one, 'n/a' for none."""
    if not values:
        return "n/a"
    mean = mean_over_seeds(values)
    if len(values) == 1:
        return "%.4f" % mean
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return "%.4f ± %.4f" % (mean, std)


def stage_table(arms):
    """Header and rows of 'Validation CE where stages change': every step where a
    run's stage ends (its last evaluation of a stage) or where the next stage's
    first evaluation is; each arm's val CE there over its seeds."""
    marks = {}
    for runs in arms:
        for r in runs:
            evals = r["ce_at"]
            for (step0, stage0, _), (step1, stage1, _) in zip(evals, evals[1:]):
                if stage1 > stage0:
                    marks.setdefault(step0, set()).add("end")
                    marks.setdefault(step1, set()).add("after")
    steps = sorted(marks)
    header = ["arm"] + ["step %d (%s)" % (st, ", ".join(sorted(marks[st]))) for st in steps]
    rows = [[runs[0]["name"]] + [mean_std([ce for r in runs for step, _, ce in r["ce_at"] if step == st])
                                 for st in steps] for runs in arms]
    return (header, rows) if steps else (None, [])


def growth_rows(arms):
    rows = []
    for runs in arms:
        first = next((r for r in runs if r["growths"]), None)
        if not first:
            continue
        entries = [[(g, b) for g in r["growths"] for b in g["new_blocks"]] for r in runs]
        for i, (g, b) in enumerate(entries[runs.index(first)]):
            hidden, res2, mean = [], [], []
            for r, e in zip(runs, entries):
                if i >= len(e):
                    continue
                rec, blk = e[i]
                hidden.append(num(point(rec, f"hidden.{blk - 1}")["rms"]["all"]["std"]))
                mean.append(num(point(rec, f"hidden.{blk - 1}")["rms"]["all"]["mean"]))
                if r["post"] and blk > 1:
                    res2.append(num(point(rec, f"res2.{blk - 1}")["rms"]["all"]["std"]))
            rows.append([first["name"], TITLE[first["placement"]], str(g["step"]), "%.0f" % g["tokens"],
                         str(g["depth"]), str(b), fmt("%.4g", mean_over_seeds(hidden)),
                         fmt("%.4g", mean_over_seeds(res2)), fmt("%.4g", mean_over_seeds(mean))])
    return rows


def layer_rows(arms):
    n_layers = max(r["final"]["depth"] + 1 for runs in arms for r in runs)
    rows = []
    for runs in arms:
        for kind in ["hidden", "res2"] if runs[0]["post"] else ["hidden"]:
            row = [runs[0]["name"], kind + ".l"]
            for l in range(n_layers):
                vs = [num(point(r["final"], f"{kind}.{l}")["rms"]["all"]["std"]) for r in runs
                      if l <= r["final"]["depth"] and (kind == "hidden" or l > 0)]
                row.append(fmt("%.4g", mean_over_seeds(vs)))
            rows.append(row)
    return rows


def pooled(stats, without):
    """Mean and population variance over the tokens of the classes with tokens but `without`."""
    n = total = 0.0
    for k in CLASSES:
        if k != without and stats[k]["count"] > 0:
            n += stats[k]["count"]
            total += stats[k]["count"] * stats[k]["mean"]
    if n == 0:
        return None, None, None
    mean = total / n
    sq = 0.0
    for k in CLASSES:
        if k != without and stats[k]["count"] > 0:
            s = stats[k]
            sq += s["count"] * (s["std"] ** 2 + (s["mean"] - mean) ** 2)
    return n, mean, sq / n


def class_value(stats, k, what):
    """k None: all tokens. what: std, share or without; None when there is none."""
    if k is not None and not stats[k]["count"] > 0:
        return None
    if what == "std":
        return stats[k]["std"] if k is not None else math.sqrt(pooled(stats, None)[2])
    if what == "share":
        if k is None:
            return 1.0
        n, mean, var = pooled(stats, None)
        s = stats[k]
        return s["count"] * (s["std"] ** 2 + (s["mean"] - mean) ** 2) / (n * var)
    if k is None:
        return None
    var = pooled(stats, k)[2]
    return None if var is None else math.sqrt(var)


def class_rows(arms):
    rows = []
    for runs in arms:
        for kind in ["hidden", "res2"] if runs[0]["post"] else ["hidden"]:
            def stats(r, when):
                rec = r["evals"][0 if when == "first" else -1]
                rms = point(rec, f"{kind}.{rec['depth']}")["rms"]
                return {k: rms.get(k, {"count": 0}) for k in CLASSES}  # a class the file predates: no tokens
            for k in [None] + CLASSES:
                row = [runs[0]["name"], kind + ".L", "all tokens" if k is None else k]
                for what, spec in (("std", "%.4g"), ("share", "%.3f"), ("without", "%.4g")):
                    for when in ("first", "last"):
                        row.append(fmt(spec, mean_over_seeds([class_value(stats(r, when), k, what) for r in runs])))
                without = mean_over_seeds([class_value(stats(r, "last"), k, "without") for r in runs])
                everything = mean_over_seeds([class_value(stats(r, "last"), None, "std") for r in runs])
                row.append("n/a" if without is None or everything is None else "%.3f" % (without / everything))
                rows.append(row)
    return rows


def ablation_min(arms):
    """{(arm, removal): '+x.xxxx (block b)'}."""
    out = {}
    for runs in arms:
        kinds = ["skip", "norms_only"] if runs[0]["post"] else ["skip"]
        blocks = sorted({b["block"] for r in runs for b in r["final"]["ablation"]["blocks"]})
        for kind in kinds:
            best = None
            for blk in blocks:
                vs = [num(b[kind]["dce"]) for r in runs for b in r["final"]["ablation"]["blocks"] if b["block"] == blk]
                m = mean_over_seeds(vs)
                if m is not None and not math.isnan(m) and (best is None or m < best[0]):
                    best = (m, blk)
            out[(runs[0]["name"], kind)] = "n/a" if best is None else "%+.4f (block %d)" % best
    return out


def compare(what, want, got):
    if want == got and want:
        print(f"ok report readings: {what}: {len(want)} rows recomputed from the run files")
    else:
        print(f"FAIL report readings: {what}: recomputed {want} but report.md has {got}")


def main(argv):
    if len(argv) < 3:
        print("usage: report_readings.py REPORT.md RUN_DIR...", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        md = f.read()
    arms = arms_of([load(d) for d in argv[2:]])
    header, rows = stage_table(arms)
    title = "Validation CE where stages change"
    compare("validation CE where stages change", [header] + sorted(rows),
            [section_header(md, title)] + sorted(section_rows(md, title)))
    compare("the stream each new block receives", growth_rows(arms),
            section_rows(md, "RMS spread of the stream each new block receives"))
    compare("the spread per layer at the end", layer_rows(arms), section_rows(md, "RMS spread per layer at the end"))
    compare("the spread by token class", class_rows(arms), section_rows(md, "RMS spread by token class"))
    want = ablation_min(arms)
    got = {(row[0], row[1].split()[0]): row[-1] for row in section_rows(md, "Block-removal ablation")}
    compare("the ablation's min over blocks", sorted(want.items()), sorted(got.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
