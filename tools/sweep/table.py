"""The sweep's table: the final validation CE of every run, and per setting
the mean, sample standard deviation and range over the seeds that trained.

Which runs trained is the report's rule (report.trained: a run that diverged,
a non-finite CE, a run that stops before its last step, or one at the unigram
plateau of its validation data), applied to the runs as the report reads them
(report.runs); a run whose directory the report cannot read, or that has no run
yet, did not train either. Such runs are marked with their reason and left out of the means.
"""
import math
import os
from dataclasses import dataclass

from report.files import write_atomic
from report.runs import ReportError, is_run, load_records
from report.stats import lowest_mean, summary
from report.trained import PLATEAU_MARGIN, classify


@dataclass
class Cell:
    """One run of the sweep: a setting's seed."""
    seed: int
    dir: str
    ce: float = math.nan  # its last validation CE (NaN when none was read)
    failed: str = None  # why it did not train; None when it trained


@dataclass
class Row:
    setting: tuple  # ((key, value), ...)
    label: str
    cells: list  # [Cell], in seed order
    best: bool = False

    @property
    def trained(self):
        return [c for c in self.cells if c.failed is None]


def read_rows(plan):
    """plan: [(setting, label, [(seed, dir)])] -> [Row], each run read and
    classified."""
    rows, loaded = [], []
    for setting, label, runs in plan:
        row = Row(setting, label, [Cell(seed, d) for seed, d in runs])
        for cell in row.cells:
            if not is_run(cell.dir):
                cell.failed = "not run (no config.json in its directory)"
                continue
            try:
                run = load_records(cell.dir)
            except ReportError as e:
                cell.failed = f"unreadable: {e}"
                continue
            loaded.append((cell, run))
        rows.append(row)
    classify([run for _, run in loaded])
    for cell, run in loaded:
        cell.ce, cell.failed = run.last.ce, run.failed
    best = lowest_mean({i: [(c.ce, c.failed) for c in r.cells] for i, r in enumerate(rows)})
    if best is not None:
        rows[best].best = True
    return rows


def number(v, digits=4):
    return "—" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def row_stats(row):
    ces = [c.ce for c in row.trained]
    s = summary(ces)
    return s, (min(ces) if ces else math.nan), (max(ces) if ces else math.nan)


def markdown(config, keys, seeds, rows):
    n_runs = sum(len(r.cells) for r in rows)
    failed = [(r, c) for r in rows for c in r.cells if c.failed is not None]
    out = [f"# Sweep of {config}", "",
           f"{len(rows)} setting{'s' if len(rows) != 1 else ''} x {len(seeds)} seed{'s' if len(seeds) != 1 else ''} "
           f"({n_runs} runs). Final validation CE (nats per token) of each run; per setting the mean, "
           "the sample standard deviation (std) and the range over the seeds that trained. A run that "
           "did not train (the report's rule: a run that diverged, a non-finite CE, a run that stops "
           "before its last step, "
           f"or a CE within {PLATEAU_MARGIN} nats of the unigram entropy of its validation data) is "
           "marked ✗ and left out; its reason is listed below the table. **best**: the lowest mean "
           "among the settings all of whose seeds trained.", ""]
    head = [f"`{k}`" for k in keys] + ["trained", "mean CE", "std", "min", "max"] + \
        [f"seed {s}" for s in seeds] + [""]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s, lo, hi = row_stats(r)
        cells = [f"`{v}`" for _, v in r.setting] + [f"{len(r.trained)}/{len(r.cells)}", number(s.mean),
                                                    number(s.std), number(lo), number(hi)]
        cells += [number(c.ce) if c.failed is None else f"✗ {number(c.ce)}" for c in r.cells]
        cells.append("**best**" if r.best else "")
        out.append("| " + " | ".join(cells) + " |")
    if failed:
        out += ["", "Runs that did not train:", ""]
        out += [f"- {r.label}, seed {c.seed} (`{c.dir}`): {c.failed}" for r, c in failed]
    return "\n".join(out) + "\n"


def finite(v):
    return v if v is not None and math.isfinite(v) else None


def as_json(config, keys, seeds, rows):
    settings = []
    for r in rows:
        s, lo, hi = row_stats(r)
        settings.append({
            "setting": dict(r.setting), "label": r.label, "trained": len(r.trained), "runs": len(r.cells),
            "mean_ce": finite(s.mean), "std_ce": finite(s.std), "min_ce": finite(lo), "max_ce": finite(hi),
            "best": r.best,
            "seeds": [{"seed": c.seed, "dir": c.dir, "val_ce": finite(c.ce), "trained": c.failed is None,
                       "why_not": c.failed} for c in r.cells]})
    return {"config": config, "keys": keys, "seeds": seeds, "settings": settings}


def write_table(out, config, keys, seeds, rows):
    """OUT/sweep.md and OUT/sweep.json, each written whole."""
    import json
    write_atomic(os.path.join(out, "sweep.md"), markdown(config, keys, seeds, rows))
    write_atomic(os.path.join(out, "sweep.json"),
                 json.dumps(as_json(config, keys, seeds, rows), indent=1, allow_nan=False) + "\n")
