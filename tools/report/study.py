"""The study of a report: its runs, which trained, their arms; and its tables."""
from .readings import READINGS, Study
from .runs import ReportError, eval_differences, group_arms, is_run, load_run
from .trained import classify


def load_study(paths, say=print):
    """The study of the run directories among paths (the others are noted
    with say and left out)."""
    runs, skipped = [], []
    for p in paths:
        if is_run(p):
            runs.append(load_run(p))
        else:
            skipped.append(p)
            say(f"report: {p} is not a run directory (no run config.json): left out")
    if not runs:
        raise ReportError("report: no run directory (one with a run's config.json) among the arguments")
    classify(runs)
    return Study(runs, group_arms(runs), skipped, eval_differences(runs))


def tables(study):
    return [t for t in (reading(study) for reading in READINGS) if t is not None]
