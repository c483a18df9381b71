"""normgrow report RUN_DIR... [--out DIR] [--force] [--tensorboard LOGDIR [--follow]]

Writes DIR/report.md and its figures (DIR defaults to dirname(RUN_DIR[0])/report;
an existing report.md is replaced only with --force). Runs whose config.json
has the same "name" are one arm (its seeds); their configs must agree but in
"seed" and "run_dir", else the report is refused, naming the difference. A
directory without a run's config.json is left out, with a note.

--tensorboard LOGDIR also writes TensorBoard event files of every run, one
directory per run (LOGDIR/<name>/seed<S>), for `tensorboard --logdir LOGDIR`;
with --follow it writes only those, and keeps adding what the runs append
until every run has finished (Ctrl-C stops it). Needs the tensorboardX package.
"""
import argparse
import os
import sys


class Refused(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """prog "normgrow COMMAND": a usage error is Refused with one line (the sweep's too)."""

    def error(self, message):  # one line, as every normgrow command
        raise Refused(f"{self.prog.split()[-1]}: {message} ({self.prog} --help shows its usage)")


def parse(argv):
    p = Parser(prog="normgrow report", description=__doc__.split("\n\n", 1)[1],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--force", action="store_true")
    p.add_argument("--tensorboard", metavar="LOGDIR")
    p.add_argument("--follow", action="store_true")
    p.add_argument("--poll", type=float, default=10.0, metavar="SECONDS", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.follow and not a.tensorboard:
        raise Refused("report: --follow writes TensorBoard events: it needs --tensorboard LOGDIR")
    return a


def out_dir(a):
    if a.out:
        return a.out
    first = a.runs[0].rstrip("/") or "/"
    return os.path.join(os.path.dirname(first) or ".", "report")


def run(a):
    from .study import load_study, tables
    from .files import write_atomic
    from .markdown import report_md

    if a.tensorboard:
        from .events import check_writer
        check_writer()
    if a.follow:
        from .events import follow
        return follow(a.runs, a.tensorboard, a.force, a.poll)
    study = load_study(a.runs)
    out = out_dir(a)
    md = os.path.join(out, "report.md")
    if os.path.exists(md) and not a.force:
        raise Refused(f"{md} already exists (a report): choose another output, or replace it with --force")
    if a.tensorboard:
        from .events import write_once
        write_once(study.runs, a.tensorboard, a.force)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise Refused(f"{out}: {e.strerror}") from None
    try:
        from . import plots
    except ImportError as e:
        figures, skipped = [], f"matplotlib is not installed for {sys.executable} ({e})"
    else:
        figures, skipped = plots.draw(study, out), None
    write_atomic(md, report_md(study, tables(study), figures, skipped))
    failed = sum(1 for r in study.runs if r.failed is not None)
    n_arms, n_runs = len(study.arms), len(study.runs)
    print(f"report: {n_arms} arm{'s' if n_arms != 1 else ''} from {n_runs} run{'s' if n_runs != 1 else ''} -> {md}"
          + (f"; plots skipped: {skipped}" if skipped else " and plots")
          + (f"; WARNING: evaluated differently in {', '.join(study.eval_differs)}" if study.eval_differs else "")
          + (f"; {failed} run{'s' if failed > 1 else ''} did not train (marked, left out of means)" if failed else "")
          + (f"; TensorBoard events in {a.tensorboard}" if a.tensorboard else ""))
    return 0


def main(argv=None):
    try:
        from .runs import ReportError
        import numpy  # noqa: F401
        import scipy.stats  # noqa: F401
    except ImportError as e:
        print(f"normgrow: report needs numpy and scipy for {sys.executable} ({e}; Debian: python3-numpy "
              "python3-scipy, which tools/bootstrap.sh installs)", file=sys.stderr)
        return 1
    try:
        return run(parse(sys.argv[1:] if argv is None else argv))
    except (Refused, ReportError) as e:
        print(f"normgrow: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("normgrow: report: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
