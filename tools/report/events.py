"""TensorBoard event files of runs, so that `tensorboard --logdir LOGDIR`
shows every arm side by side: one directory per run, LOGDIR/<name>/seed<S>,
with the training step as TensorBoard's step.

Scalars: val/ce, val/kd, val/teacher_ce (eval records of metrics.jsonl),
train/loss, train/ce, train/kd, train/lr, train/grad_norm (step records),
depth (growth records), rms_std/hidden.L and rms_std/res2.L (the evaluation
records of diag.jsonl: the std over tokens of the per-token RMS at the last
block's output, and before its norm). Each growth is also a text marker
("growth" tag): the step, the depths and the validation CE before and after.
Values that are not finite are left out.

Written with tensorboardX (PyPI; tools/tensorboard_venv.sh makes a venv with it).
"""
import glob
import json
import math
import os
import shutil
import time

from .runs import ReportError, is_run, load_config, run_file

STEP_SCALARS = {"loss": "train/loss", "ce": "train/ce", "kd": "train/kd", "lr": "train/lr",
                "grad_norm": "train/grad_norm"}
EVAL_SCALARS = {"val_ce": "val/ce", "val_kd": "val/kd", "teacher_ce": "val/teacher_ce"}


def check_writer():
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise ReportError("report: --tensorboard needs the Python package tensorboardX, which is not installed "
                          "(pip install tensorboardX, or NG_PYTHON=$(tools/tensorboard_venv.sh))") from None


def run_logdir(logdir, run):
    return os.path.join(logdir, run.name, f"seed{run.seed}")


def clear(path, force):
    """Refuses a directory that already holds event files, unless force (then removes it)."""
    if glob.glob(os.path.join(path, "events.out.tfevents.*")):
        if not force:
            raise ReportError(f"{path} already holds TensorBoard event files: choose another LOGDIR, "
                              "or replace them with --force")
        shutil.rmtree(path)


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class RunEvents:
    """The event file of one run, fed the records of its logs as they come."""

    def __init__(self, run, logdir):
        from tensorboardX import SummaryWriter
        self.run = run
        self.writer = SummaryWriter(logdir=run_logdir(logdir, run), flush_secs=5)
        self.offsets = {"metrics": 0, "diag": 0}
        self.finished = False

    def metrics(self, rec):
        step, event = rec.get("step"), rec.get("event")
        if not finite(step):
            return
        names = STEP_SCALARS if event == "step" else EVAL_SCALARS if event == "eval" else {}
        for key, tag in names.items():
            if finite(rec.get(key)):
                self.writer.add_scalar(tag, rec[key], int(step))
        if event == "growth" and finite(rec.get("depth")):
            self.writer.add_scalar("depth", rec["depth"], int(step))
            ce = ", ".join(f"{rec[k]:.4f} {when}" for k, when in (("val_ce_before", "before"), ("val_ce_after", "after"))
                           if finite(rec.get(k)))
            self.writer.add_text("growth", f"step {int(step)}: depth {rec.get('depth_before')} → {rec['depth']}"
                                 + (f" (validation CE {ce})" if ce else ""), int(step))
        if event == "eval":
            self.finished = int(step) == self.run.steps_total
        elif event == "diverged":
            self.writer.add_text("diverged", f"step {int(step)}: {rec.get('why')}", int(step))
            self.finished = True  # it ended there: nothing follows until a resume cuts the record
        elif event in ("step", "growth"):
            self.finished = False

    def diag(self, rec):
        if "event" in rec or not finite(rec.get("step")) or not finite(rec.get("depth")):
            return
        depth = int(rec["depth"])
        for kind in ("hidden", "res2"):
            p = next((p for p in rec.get("points") or [] if p.get("name") == f"{kind}.{depth}"), None)
            std = ((p or {}).get("rms") or {}).get("all", {}).get("std")
            if finite(std):
                self.writer.add_scalar(f"rms_std/{kind}.L", std, int(rec["step"]))

    def poll(self):
        """Writes what the logs gained since the last call (whole lines only)."""
        for name, fn in (("metrics", self.metrics), ("diag", self.diag)):
            path = run_file(self.run.dir, name)
            try:
                with open(path, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    if f.tell() < self.offsets[name]:  # cut back by a resume: read again
                        self.offsets[name] = 0
                    f.seek(self.offsets[name])
                    data = f.read()
            except FileNotFoundError:
                continue
            done = data.rfind(b"\n") + 1
            for line in data[:done].split(b"\n"):
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        raise ReportError(f"{path}: a line that is not JSON") from None
                    if isinstance(rec, dict):
                        fn(rec)
            self.offsets[name] += done
        self.writer.flush()

    def close(self):
        self.writer.close()


def write_once(runs, logdir, force):
    for r in runs:
        clear(run_logdir(logdir, r), force)
    for r in runs:
        ev = RunEvents(r, logdir)
        ev.poll()
        ev.close()


def follow(paths, logdir, force, poll_seconds):
    """Writes the runs' events as they train, until every run has ended (finished, or diverged)."""
    runs = []
    for p in paths:
        if not is_run(p):
            print(f"report: {p} is not a run directory (no run config.json): left out")
            continue
        runs.append(load_config(run_file(p, "config"), p))
    if not runs:
        raise ReportError("report: no run directory (one with a run's config.json) among the arguments")
    for r in runs:
        clear(run_logdir(logdir, r), force)
    events = [RunEvents(r, logdir) for r in runs]
    print(f"report: following {len(runs)} runs into {logdir} (Ctrl-C stops)", flush=True)
    try:
        while True:
            for e in events:
                e.poll()
            if all(e.finished for e in events):
                print(f"report: every run has ended (finished, or diverged); events in {logdir}")
                return 0
            time.sleep(poll_seconds)
    finally:
        for e in events:
            e.close()
