"""report.md: the introduction, every reading's table, the figures with
their captions."""
from .table import Num


def listing(items):
    return ", ".join(f"`{x}`" for x in items)


def intro(study):
    n_arms, n_runs = len(study.arms), len(study.runs)
    out = [f"# normgrow report\n\nThis report compares {n_arms} arm{'s' if n_arms != 1 else ''} from {n_runs} "
           f"run director{'ies' if n_runs != 1 else 'y'}: "]
    for i, a in enumerate(study.arms):
        sep = "" if i == 0 else " and " if i + 1 == n_arms else ", "
        seeds = ", ".join(f"{r.seed}{'' if r.failed is None else ' (did not train)'}" for r in a.runs)
        out.append(f"{sep}`{a.name}` ({a.first.title}, {a.first.schedule}, {a.first.mode}, "
                   f"seed{'s' if len(a.runs) > 1 else ''} {seeds})")
    out.append(". Final values are those of the last evaluation record of each run's metrics.jsonl. Where an "
               "arm has several seeds, a value is their mean, shown ± their sample standard deviation (n − 1) "
               "in the arms table. Runs that did not train (below) are left out of every mean. CE is in nats per "
               "token; stages are numbered from 1.\n\nRun directories: " + listing(r.dir for r in study.runs) + ".\n")
    if study.eval_differs:
        out.append("\n**Warning: the runs were not evaluated alike.** They differ in "
                   + ", ".join(study.eval_differs) + ", so their validation CE (and KD, and the teacher's CE) are "
                   "measured on different data or windows and are not comparable as they stand.\n")
    failed = [r for r in study.runs if r.failed is not None]
    if failed:
        out.append("\n**Did not train** (left out of every mean and difference; their last values are in the "
                   "last table):\n\n" + "".join(f"- `{r.dir}` (`{r.name}` seed {r.seed}): {r.failed}.\n"
                                                 for r in failed))
    unknown = [r for r in study.runs if r.entropy is None]
    if unknown:
        out.append("\nThe unigram entropy of the validation data of " + listing(r.dir for r in unknown)
                   + " is unknown (data.val not found: " + listing(sorted({str(r.val_shard) for r in unknown}))
                   + "), so whether they sit at the unigram plateau was not tested.\n")
    missing = [("diag.jsonl", [r.dir for r in study.runs if r.diag is None]),
               ("diag_final.json", [r.dir for r in study.runs if r.final is None]),
               ("an ablation in diag_final.json", [r.dir for r in study.runs if r.final and r.final.ablation is None])]
    missing = [(what, dirs) for what, dirs in missing if dirs]
    if missing:
        out.append("\nMissing files (their readings are n/a, and the runs are left out of those means): "
                   + "; ".join(f"no {what} in {listing(dirs)}" for what, dirs in missing) + ".\n")
    if study.skipped:
        out.append("\nNot run directories (no run config.json), left out: " + listing(study.skipped) + ".\n")
    return "".join(out)


def table_md(t):
    header = [str(h) for h in t.header]
    rows = [[str(c) for c in r] for r in t.rows]
    align = "l" * t.left + "r" * (len(header) - t.left)
    out = [f"\n## {t.title}\n"]
    if t.text:
        out.append(f"\n{t.text}\n")
    if t.rows:
        out.append("\n| " + " | ".join(header) + " |\n|" + "".join("---:|" if a == "r" else "---|" for a in align) + "\n")
        out += ["| " + " | ".join(r) + " |\n" for r in rows]
    out += [f"\n{n}\n" for n in t.notes]
    return "".join(out)


def figures_md(figures, skipped):
    out = ["\n## Plots\n"]
    if skipped:
        out.append(f"\nThe plots were skipped: {skipped}.\n")
    for file, alt, caption in figures:
        out.append(f"\n![{alt}]({file})\n\n*{file}: {caption}*\n")
    return "".join(out)


def report_md(study, tables, figures, plots_skipped):
    return intro(study) + "".join(table_md(t) for t in tables) + figures_md(figures, plots_skipped)

