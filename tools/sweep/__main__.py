"""normgrow sweep RUN.json --out DIR [--set KEY=V1,V2,...]... [--seeds S1,S2,...] [--jobs J]
               [--threads N] [--backend NAME] [--precision fp32|bf16] [--stop-after STEP]

Trains RUN.json at every setting of the grid the --set options span (each
KEY=V1,V2,... is a key of the run config, as `normgrow train --set` takes it,
with the values to try), once per seed, J runs at a time (each on N threads;
default: the cores shared out), each run in its own directory
DIR/<setting>/seed<S> (<setting>: "k=v,k=v", "config" without --set) under the
name "<RUN.json's name>@<setting>". Every setting is checked first (`normgrow
train --check`): a key the run config does not know, or a value it refuses,
stops the sweep before anything trains, with one line. Run again, the sweep
keeps every finished run (one whose records end at its last step counts, its
weights gone or not: a sweep extracted from tools/archive_runs.sh's archive
grows as the original would), resumes every stopped one from its checkpoint and
starts the rest, so a grid may also grow by values or seeds; DIR holds the
config it swept (DIR/sweep-config.json) and refuses another. Each run's output goes
to its train.log. At the end (and after each run) DIR/sweep.md and
DIR/sweep.json hold the final validation CE of every run and per setting the
mean and spread over its seeds, runs that did not train marked (the report's
rule). A run that diverges (`normgrow train` exits 3: a NaN, an Inf or a
runaway CE stopped it, and its metrics.jsonl ends with a "diverged" record) is
a result, not a failure: marked as not trained, kept as it is when the sweep
runs again. --stop-after STEP is passed to each run (tests). Exits 1 when a run
failed (its log names why), 130 when interrupted (Ctrl-C, or SIGTERM: `kill`;
a sweep started in the background by a shell ignores SIGINT, as the shell
leaves it): the runs stop at a checkpoint, and the same command continues them.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

from report.__main__ import Parser, Refused

from .grid import GridError, label, parse_seeds, parse_sets, settings

EXIT_DIVERGED = 3  # `normgrow train`'s status for a run its sanity check stopped


def parse(argv):
    p = Parser(prog="normgrow sweep", description=__doc__.split("\n\n", 1)[1],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="RUN.json")
    p.add_argument("--out", metavar="DIR", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2,...")
    p.add_argument("--seeds", default="1", metavar="S1,S2,...")
    p.add_argument("--jobs", default="1", metavar="J")
    p.add_argument("--threads", metavar="N")
    p.add_argument("--backend", metavar="NAME")
    p.add_argument("--precision", metavar="P")
    p.add_argument("--stop-after", metavar="STEP")
    return p.parse_args(argv)


def count(text, what):
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise Refused(f"sweep: {what} {text}: expected a count >= 1")
    return int(text)


def say(start, text):
    print(f"[sweep {time.time() - start:5.0f}s] {text}", flush=True)


class Sweep:
    def __init__(self, a):
        self.a = a
        self.bin = os.environ.get("NG_BIN") or "normgrow"
        try:
            self.sets = parse_sets(a.set)
            self.seeds = parse_seeds(a.seeds)
            self.grid = [(s, label(s)) for s in settings(self.sets)]
        except GridError as e:
            raise Refused(f"sweep: {e}") from None
        self.jobs = count(a.jobs, "--jobs")
        self.threads = count(a.threads, "--threads") if a.threads else max(1, (os.cpu_count() or 1) // self.jobs)
        if a.stop_after:
            count(a.stop_after, "--stop-after")
        self.where = [x for k in ("backend", "precision") if getattr(a, k) for x in (f"--{k}", getattr(a, k))]
        self.tail = self.where + (["--stop-after", a.stop_after] if a.stop_after else [])

    def train(self, *args):
        return [self.bin, "--threads", str(self.threads), "train", *args]

    def set_args(self, setting):
        return [x for k, v in setting for x in ("--set", f"{k}={v}")]

    def check(self):
        """Every setting's config resolved by `normgrow train --check`; the
        first refusal ends the sweep with its line. Returns the config's name."""
        name = None
        for setting, lab in self.grid:
            p = subprocess.run(self.train(self.a.config, *self.set_args(setting), "--check"),
                               capture_output=True, text=True)
            if p.returncode != 0:
                lines = p.stderr.strip().splitlines() or [f"exit status {p.returncode}"]
                raise Refused(f"sweep: setting {lab}: {lines[-1].removeprefix('normgrow: ')}")
            if name is None:
                name = json.loads(p.stdout)["name"]
        return name

    def claim_out(self):
        """DIR/sweep-config.json: the config this sweep trains; another one is refused. (Not
        DIR/config.json, a run's file: `normgrow runs` would take DIR for a run that never
        started. A sweep from before keeps it there, and it is moved.)"""
        out = self.a.out
        try:
            with open(self.a.config, "rb") as f:
                text = f.read()
            os.makedirs(out, exist_ok=True)
        except OSError as e:
            raise Refused(f"sweep: {e.filename}: {e.strerror}") from None
        mine, before = os.path.join(out, "sweep-config.json"), os.path.join(out, "config.json")
        for path in (mine, before):
            if os.path.exists(path):
                with open(path, "rb") as f:
                    if f.read() != text:
                        raise Refused(f"sweep: {out} holds a sweep of another config ({path} differs "
                                      f"from {self.a.config}): choose another --out")
        if os.path.exists(before):
            os.replace(before, mine)
        elif not os.path.exists(mine):
            from report.files import write_atomic
            write_atomic(mine, text)

    def plan(self):
        """[(setting, label, [(seed, dir)])]"""
        return [(s, lab, [(seed, os.path.join(self.a.out, lab, f"seed{seed}")) for seed in self.seeds])
                for s, lab in self.grid]

    def command(self, name, setting, lab, seed, d):
        """What brings the run in d to its end, and what that is; None when it has ended
        (finished, or diverged)."""
        if os.path.exists(os.path.join(d, "final.safetensors")):
            return None, "finished, kept"
        end = recorded_end(d)
        if end == "diverged":
            return None, "diverged (did not train), kept"
        if os.path.exists(os.path.join(d, "checkpoint.safetensors")):
            return self.train("--resume", d, *self.tail), "resuming from its checkpoint"
        if end == "finished":
            return None, "finished (its records only, as an archive keeps them), kept"
        return (self.train(self.a.config, "--set", f"name={name}@{lab}", *self.set_args(setting),
                           "--seed", str(seed), "--run-dir", d, "--force", *self.tail), "starting")

    def run(self):
        start = time.time()
        name = self.check()
        self.claim_out()
        plan = self.plan()
        todo = []
        for setting, lab, runs in plan:
            for seed, d in runs:
                cmd, what = self.command(name, setting, lab, seed, d)
                if cmd is None:
                    say(start, f"{lab} seed {seed}: {what} ({d})")
                else:
                    todo.append((lab, seed, d, cmd, what))
        n = len(plan) * len(self.seeds)
        say(start, f"{len(plan)} settings x {len(self.seeds)} seeds: {n - len(todo)} finished, "
            f"{len(todo)} to train, {self.jobs} at a time on {self.threads} thread{'s' if self.threads > 1 else ''} each")
        failed = self.train_all(start, todo, plan)
        self.write(plan)
        say(start, f"table: {os.path.join(self.a.out, 'sweep.md')} and sweep.json")
        if failed:
            print(f"normgrow: sweep: {failed} run{'s' if failed > 1 else ''} failed (their train.log says why); "
                  "run the same command to continue", file=sys.stderr)
            return 1
        return 0

    def train_all(self, start, todo, plan):
        running, failed = {}, 0
        try:
            while todo or running:
                while todo and len(running) < self.jobs:
                    lab, seed, d, cmd, what = todo.pop(0)
                    os.makedirs(d, exist_ok=True)
                    with open(os.path.join(d, "train.log"), "ab") as log:
                        # a session of its own: a terminal's Ctrl-C reaches the sweep alone,
                        # which passes one SIGTERM on (a second would quit without a checkpoint)
                        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                    running[p] = (lab, seed, d)
                    say(start, f"{lab} seed {seed}: {what} ({d})")
                time.sleep(0.2)
                for p in [p for p in running if p.poll() is not None]:
                    lab, seed, d = running.pop(p)
                    if p.returncode == 0:
                        ended = os.path.exists(os.path.join(d, "final.safetensors"))
                        say(start, f"{lab} seed {seed}: " + ("done" if ended else "stopped (--stop-after)"))
                    elif p.returncode == EXIT_DIVERGED:
                        say(start, f"{lab} seed {seed}: diverged (did not train): {last_line(d)}")
                    else:
                        failed += 1
                        say(start, f"{lab} seed {seed}: FAILED (status {p.returncode}): {last_line(d)}")
                    self.write(plan)
        except KeyboardInterrupt:
            for p in running:
                p.send_signal(signal.SIGTERM)  # each run stops at a checkpoint
            for p in running:
                p.wait()
            raise
        return failed

    def write(self, plan):
        from .table import read_rows, write_table
        write_table(self.a.out, self.a.config, [k for k, _ in self.sets], self.seeds, read_rows(plan))


def recorded_end(d):
    """How the records in d (config.json, metrics.jsonl) end: "finished" with the evaluation
    at the run's last step, as `normgrow runs` calls a run finished (a run whose weights are
    gone, as tools/archive_runs.sh keeps none, but whose records are whole); "diverged" with
    the record of the step its sanity check stopped it at; else None."""
    from report.runs import ReportError, is_run, load_records
    try:
        r = load_records(d) if is_run(d) else None
    except (ReportError, OSError):
        return None
    if r is None:
        return None
    return "diverged" if r.diverged is not None else "finished" if r.finished else None


def last_line(d):
    try:
        with open(os.path.join(d, "train.log"), encoding="utf-8", errors="replace") as f:
            lines = [x for x in f.read().splitlines() if x.strip()]
    except OSError:
        return "(no train.log)"
    return lines[-1] if lines else "(train.log is empty)"


def interrupted(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    try:
        from report.runs import ReportError
    except ImportError as e:
        print(f"normgrow: sweep needs the report package (tools/report) and numpy, scipy ({e})", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, interrupted)
    try:
        return Sweep(parse(sys.argv[1:] if argv is None else argv)).run()
    except (Refused, ReportError) as e:
        print(f"normgrow: {e}", file=sys.stderr)
        return 2 if isinstance(e, Refused) else 1
    except KeyboardInterrupt:
        print("normgrow: sweep: interrupted; the runs stopped at a checkpoint: run the same command to continue",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
