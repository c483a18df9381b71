"""The README's numbers, made from run directories.

    PYTHONPATH=tools python3 -m report.readme README.md --runs LABEL=DIR... (--check | --out FILE [--force])

A block of the README whose numbers come from runs sits between two markers:

    <!-- numbers KIND LABEL... -->
    (the block: made by this module, never by hand)
    <!-- /numbers -->

KIND says what the block is (KINDS below); each LABEL names a set of runs,
given on the command line as LABEL=DIR, DIR holding one run directory per
arm and seed as `make demo` writes them (ARM for seed 1, ARM-seedN, and
`teacher`); a LABEL given several times names the union of its DIRs (the
entries of each; a name in two of them is refused). A block whose labels are
all given is made anew; the others are left as they are and named on stderr. --check exits 1 when a block made anew
differs from the README's (naming it); --out writes the README with the
blocks made anew (an existing FILE only with --force).
"""
import argparse
import hashlib
import json
import os
import re
import sys

from .readings import (Study, excludes, final_ces, grown, interaction, interval, joint_of, last_block_dce,
                       min_block_dce, over, quadruples, rms_spread_table)
from .runs import PLACEMENTS, Arm, ReportError, group_arms, is_run, load_run
from .stats import lowest_mean, paired, summary
from .trained import classify

BLOCK = re.compile(r"<!-- numbers ([a-z0-9-]+)((?: [A-Za-z0-9_.-]+)+) -->\n(.*?)<!-- /numbers -->\n", re.S)
# The demo's arms in the order the README gives them, and the paired
# differences its claims rest on (A − B).
ARMS = ("joint-pre", "joint-post", "grow-pre", "grow-post",
        "control-extra-tokens", "control-layer-tokens", "control-lr-restarts")
PAIRS = (("grow-post", "joint-post"), ("grow-pre", "joint-pre"), ("grow-post", "grow-pre"),
         ("joint-post", "joint-pre"), ("control-layer-tokens", "grow-post"),
         ("control-lr-restarts", "grow-post"), ("control-extra-tokens", "grow-post"))
STEP = 96  # the growing arm's early evaluation the README quotes (after the first growth)


class Runs:
    """The runs under one or more directories (a label given several times
    names the union of their entries; an entry in two of them is refused):
    every arm's seeds, and the teacher (read when a block first asks for them)."""

    def __init__(self, label, roots):
        roots = [roots] if isinstance(roots, str) else list(roots)
        self.label, self.roots = label, roots
        self.where = f"{label}={'+'.join(roots)}"
        for root in roots:
            if not os.path.isdir(root):
                raise ReportError(f"readme: {label}={root}: not a directory")
        self._arms = None

    def entries(self, keep):
        """{name: path} of the entries of the directories for which keep(name,
        path) holds; such a name in two of them is refused."""
        out = {}
        for root in self.roots:
            for name in os.listdir(root):
                path = os.path.join(root, name)
                if not keep(name, path):
                    continue
                if name in out:
                    raise ReportError(f"readme: {self.where}: {name} is in both {os.path.dirname(out[name])} "
                                      f"and {root}")
                out[name] = path
        return out

    def load(self):
        if self._arms is None:
            runs = [load_run(d) for d in sorted(self.entries(lambda _, d: is_run(d)).values())]
            if not runs:
                raise ReportError(f"readme: {self.where}: no run directory in it")
            classify(runs)
            self._teacher = next((r for r in runs if r.mode == "pretrain"), None)
            self._arms = {a.name: a for a in group_arms([r for r in runs if r.mode != "pretrain"])}

    @property
    def arms(self):
        self.load()
        return self._arms

    @property
    def teacher(self):
        self.load()
        return self._teacher

    def arm(self, name):
        if name not in self.arms:
            raise ReportError(f"readme: {self.where}: no run of arm {name}")
        return self.arms[name]

    def find(self, name, seed):
        """The run of the arm's seed, None when there is none."""
        return next((r for r in self.arms[name].runs if r.seed == seed), None) if name in self.arms else None

    def seed(self, name, seed):
        r = self.find(name, seed)
        if r is None:
            raise ReportError(f"readme: {self.where}: arm {name} has no seed {seed}")
        return r


def ce(r):
    """A run's last validation CE, or why it has none to quote."""
    return "did not train" if r.failed is not None else "%.4f" % r.last.ce


def machine(r):
    """The first record of the run's backend.jsonl (backend, precision,
    threads, OpenBLAS kernels and how they were chosen)."""
    path = os.path.join(r.dir, "backend.jsonl")
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.loads(f.readline())
    except (OSError, ValueError):
        raise ReportError(f"readme: {path}: no backend record to name the machine") from None
    return rec


def backend_words(rec):
    precision, threads = rec.get("precision", "fp32"), rec.get("threads")
    return (f"backend {rec.get('backend')} {precision}, {threads} thread{'' if threads == 1 else 's'}, "
            f"OpenBLAS kernels {rec.get('blas_kernels')} ({rec.get('blas_kernels_origin')})")


# ---------------------------------------------------------------- kinds of block

def minutes(r):
    """Wall minutes from the run's first step record to its last (a resumed
    run's pause included)."""
    times = [rec["time"] for rec in r.steps if isinstance(rec.get("time"), (int, float))]
    return (times[-1] - times[0]) / 60 if len(times) > 1 else None


def seed1(src):
    """One `make demo`: seed 1 of every arm, the teacher, grow-post early, and
    how long each took."""
    t = src.teacher
    if t is None:
        raise ReportError(f"readme: {src.where}: no teacher run")
    runs = [src.seed(a, 1) for a in ARMS]
    early = next((e.ce for e in runs[ARMS.index("grow-post")].evals if e.step == STEP), None)
    took = [m for m in map(minutes, runs) if m is not None]
    teacher_took = minutes(t)
    on_students = runs[ARMS.index("grow-post")].last.teacher_ce
    return (f"teacher {ce(t)} on its own batches"
            + (f" and {on_students:.4f} on the students'" if on_students is not None else "") + "; "
            + ", ".join(f"{a} {ce(r)}" for a, r in zip(ARMS, runs))
            + (f" (grow-post at step {STEP}: {early:.4f})" if early is not None else "")
            + f". Run with {backend_words(machine(runs[0]))}"
            + (f"; the teacher took {teacher_took:.1f} min" if teacher_took is not None else "")
            + (f", an arm {min(took):.1f} to {max(took):.1f} min" if took else "") + ".\n")


def ce_cell(s):
    """"mean ± std" of a summary over seeds ("mean" alone for one seed)."""
    return "%.4f" % s.mean + (" ± %.4f" % s.std if s.n > 1 else "")


def arm_rows(src):
    """The arms' final validation CE over seeds and the ablation of each."""
    out = ["| arm | final val CE | seeds | tokens | layer-tokens | ΔCE removing the last block "
           "| smallest ΔCE of any block |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ARMS:
        a = src.arm(name)
        s = over(a, lambda r: r.last.ce)
        if s is None:
            out.append(f"| {name} | did not train | {len(a.runs)} | | | | |")
            continue
        cell = ce_cell(s)
        first = next(r for r in a.runs if r.failed is None).last
        last = over(a, last_block_dce)
        low = min_block_dce(a)
        out.append(f"| {name} | {cell} | {s.n} | {first.tokens / 1e3:.0f} k | {first.layer_tokens / 1e6:.2f} M | "
                   f"{'%+.4f' % last.mean if last and last.n else 'n/a'} | "
                   f"{'%+.4f (block %d)' % low if low else 'n/a'} |")
    return "\n".join(out) + "\n"


def paired_rows(src):
    """The interaction of placement and growth, and the paired differences the
    README's claims rest on, each with its 95% interval over the seeds."""
    out = ["| paired difference | seeds | mean | 95% interval | excludes 0 |", "|---|---:|---:|---:|---|"]
    for q in quadruples(study_of(src)):
        p = interaction(q)[0]
        out.append(f"| interaction: ({q[0].name} − {q[1].name}) − ({q[2].name} − {q[3].name}) | "
                   f"{p.n if p else 0} | {'%+.4f' % p.mean if p else 'n/a'} | {interval(p)} | {excludes(p)} |")
    for a, b in PAIRS:
        p = paired(final_ces(src.arm(a)), final_ces(src.arm(b)))
        out.append(f"| {a} − {b} | {p.n if p else 0} | {'%+.4f' % p.mean if p else 'n/a'} | "
                   f"{interval(p)} | {excludes(p)} |")
    return "\n".join(out) + "\n"


def study_of(src):
    arms = [src.arm(a) for a in ARMS]
    return Study([r for a in arms for r in a.runs], arms)


def spread(src):
    """The report's residual-RMS spread table (mean over seeds), as rows."""
    t = rms_spread_table(study_of(src))
    out = ["| " + " | ".join(t.header) + " |", "|" + "---|" * t.left + "---:|" * (len(t.header) - t.left)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in t.rows]
    return "\n".join(out) + "\n"


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def weights(r):
    """The first 12 hex digits of the sha256 of the run's final weights."""
    path = os.path.join(r.dir, "final.safetensors")
    return digest(path)[:12] if os.path.exists(path) else "none"


def compare(a, b):
    """Seed 1 of every arm (and the teacher) that both sets of runs hold: both
    final validation CEs, B − A, and a digest of each one's final weights
    (equal digests: the same bytes; runs elsewhere compare theirs with these).
    Arms that one set lacks are named below the table."""
    if a.teacher is None or b.teacher is None:
        raise ReportError(f"readme: {a.label if a.teacher is None else b.label}: no teacher run")
    out = [f"| run | {a.label} | {b.label} | {b.label} − {a.label} | final weights, sha256: {a.label} | {b.label} |",
           "|---|---:|---:|---:|---|---|"]
    pairs = [("teacher", a.teacher, b.teacher)] + [(n, a.find(n, 1), b.find(n, 1)) for n in ARMS]
    worst, same, missing, students = 0.0, [], [], 0
    for name, ra, rb in pairs:
        if ra is None or rb is None:
            missing.append(name)
            continue
        d = rb.last.ce - ra.last.ce
        if name != "teacher":
            worst, students = max(worst, abs(d)), students + 1
        wa, wb = weights(ra), weights(rb)
        if wa == wb != "none":
            same.append(name)
        out.append(f"| {name} | {ce(ra)} | {ce(rb)} | {d:+.2e} | {wa} | {wb} |")
    if not students:
        raise ReportError(f"readme: {a.label} and {b.label}: no student arm in both")
    out.append("")
    out.append(f"{a.label}: {backend_words(machine(a.teacher))}; {b.label}: {backend_words(machine(b.teacher))}. "
               f"Largest |{b.label} − {a.label}| over the {students} students: {worst:.2e} nats; "
               f"the same final weights: {', '.join(same) if same else 'none'}"
               + (f"; not run in both: {', '.join(missing)}." if missing else "."))
    return "\n".join(out) + "\n"


def topk(src):
    """tools/topk_study.sh's runs (exact/config/seedS, kK/config/seedS): the
    exact teacher and each top-k cache over the seeds, mean ± std of the final
    validation CE, and each cache against the exact teacher paired by seed
    (the same initialisation and, sampling by epoch, the same batches), with
    its 95% interval."""
    entries = src.entries(lambda g, gd: (g == "exact" or re.fullmatch(r"k[0-9]+", g)) and os.path.isdir(gd))

    def sweep(d):
        runs = os.path.join(entries.get(d, ""), "config")
        dirs = [os.path.join(runs, s) for s in sorted(os.listdir(runs))] if os.path.isdir(runs) else []
        dirs = [x for x in dirs if is_run(x)]
        if not dirs:
            raise ReportError(f"readme: {src.where}: no runs in {d}/config (tools/topk_study.sh)")
        return [load_run(x) for x in dirs]
    ks = sorted(int(d[1:]) for d in entries if d != "exact")
    rows = [("exact", sweep("exact"))] + [(f"top-{k} cache", sweep(f"k{k}")) for k in ks]
    classify([r for _, runs in rows for r in runs])
    exact = rows[0][1]
    out = ["| teacher | seeds | final val CE | − exact | 95% interval |", "|---|---:|---:|---:|---:|"]
    for name, runs in rows:
        cells = "— | —" if runs is exact else difference_cells(runs, exact)
        out.append(f"| {name} | {len(runs)} | {mean_std(runs)} | {cells} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- tools/calibrate.sh's runs

def calibrate_runs(src):
    """{group: [run]} of tools/calibrate.sh's directory: GROUP/SETTING/seedS for
    the groups joint-P (the sweep of placement P's joint arm), warmup-P (its
    sweep over the warmup at the calibrated peak, --warmups), grow-P (its grown
    arm at the calibrated setting), control-NAME, hybrid-PREFIX-NEW,
    divergence-P-NAME and intervention-NAME; every run classified."""
    groups = {}
    sweeps = src.entries(lambda g, gd: re.fullmatch(
        r"(joint|warmup|grow|control|hybrid|divergence|intervention)-[a-z-]+", g)
                         and os.path.isdir(gd))
    for g, gd in sorted(sweeps.items()):
        dirs = sorted(os.path.join(gd, s, d) for s in os.listdir(gd) if os.path.isdir(os.path.join(gd, s))
                      for d in os.listdir(os.path.join(gd, s)))
        groups[g] = [load_run(d) for d in dirs if is_run(d)]
    if not any(g.startswith("joint-") for g in groups):
        raise ReportError(f"readme: {src.where}: no joint-PLACEMENT sweep in it (tools/calibrate.sh)")
    classify([r for runs in groups.values() for r in runs])
    return groups


def peak(r):
    return float(r.settings["lr.peak"])


def warmup(r):
    return int(r.settings["lr.warmup_tokens"])


def by_peak(runs):
    """{peak LR: [runs]}, in increasing order of the rate."""
    out = {}
    for r in sorted(runs, key=peak):
        out.setdefault(peak(r), []).append(r)
    return out


def mean_std(runs):
    """"mean ± std" over the runs that trained, and how many did of how many."""
    ces = [r.last.ce for r in runs if r.failed is None]
    if not ces:
        return f"did not train (0 of {len(runs)})"
    s = summary(ces)
    cell = ce_cell(s)
    return cell + ("" if len(ces) == len(runs) else f" ({len(ces)} of {len(runs)} trained)")


def calibrated_peak(runs):
    """The rate of the lowest mean final validation CE among the rates all of
    whose seeds trained (report.stats.lowest_mean, the sweep's rule too), None
    when there is none."""
    return lowest_mean({lr: [(r.last.ce, r.failed) for r in rs] for lr, rs in by_peak(runs).items()})


def placements_of(groups):
    return [p for p in PLACEMENTS if f"joint-{p}" in groups]


def calibration(src):
    """Each placement's joint arm over the peak learning rates: mean ± std of
    the final validation CE over the seeds, the calibrated rate in bold."""
    groups = calibrate_runs(src)
    ps = placements_of(groups)
    lrs = sorted({peak(r) for p in ps for r in groups[f"joint-{p}"]})
    out = ["| joint arm | " + " | ".join(f"peak LR {lr:g}" for lr in lrs) + " | calibrated peak LR |",
           "|---|" + "---:|" * (len(lrs) + 1)]
    for p in ps:
        rates, best = by_peak(groups[f"joint-{p}"]), calibrated_peak(groups[f"joint-{p}"])
        cells = [("**%s**" if lr == best else "%s") % mean_std(rates[lr]) if lr in rates else "not run" for lr in lrs]
        out.append(f"| {PLACEMENTS[p]} | " + " | ".join(cells) + f" | {'%g' % best if best else 'none'} |")
    seeds = sorted({r.seed for p in ps for r in groups[f"joint-{p}"]})
    out += ["", f"Seeds {', '.join(map(str, seeds))}; run with {backend_words(machine(groups[f'joint-{ps[0]}'][0]))}."]
    return "\n".join(out) + "\n"


def by_warmup(groups, p, lr):
    """{warmup: [runs]} of placement P's joint arm at peak LR: joint-P's (the
    set's warmup) first, then warmup-P's in increasing order."""
    out = {}
    for r in groups[f"joint-{p}"] + sorted(groups.get(f"warmup-{p}", []), key=warmup):
        if peak(r) == lr:
            out.setdefault(warmup(r), []).append(r)
    return out


def calibrated_setting(groups, p):
    """Placement P's calibrated (peak LR, warmup) as tools/calibrate.sh decides
    them: the peak of joint-P's sweep (calibrated_peak), then at that peak the
    warmup by the same rule among the set's (joint-P's runs) and warmup-P's, a
    tie to the set's; None when no peak qualifies."""
    lr = calibrated_peak(groups[f"joint-{p}"])
    if lr is None:
        return None
    runs = by_warmup(groups, p, lr)
    return lr, lowest_mean({w: [(r.last.ce, r.failed) for r in rs] for w, rs in runs.items()})


def set_warmup(groups):
    """The set's own warmup: that of the peak sweeps' runs."""
    return warmup(next(r for g, runs in groups.items() if g.startswith("joint-") for r in runs))


def rate(r, set_w):
    """A run's peak LR, and its warmup where it is not the set's."""
    return f"{peak(r):g}" + ("" if warmup(r) == set_w else f", warmup {warmup(r)}")


def at_peaks(groups):
    """{group: its runs at their calibrated setting}: joint-P (from joint-P and
    warmup-P) and grow-P at P's, the controls at Post-Norm's, hybrid-PREFIX-NEW at
    the prefix's, divergence-P-NAME at P's, the interventions at Pre-Norm's; a
    group of a placement with no calibrated rate is left out."""
    setting = {p: calibrated_setting(groups, p) for p in placements_of(groups)}
    out = {}
    for g, runs in groups.items():
        kind, _, rest = g.partition("-")
        if kind == "warmup":
            continue
        p = {"joint": rest, "grow": rest, "control": "post", "hybrid": rest.split("-")[0],
             "divergence": rest.split("-")[0], "intervention": "pre"}[kind]
        if setting.get(p) is not None:
            pool = runs + groups.get(f"warmup-{p}", []) if kind == "joint" else runs
            out[g] = [r for r in pool if (peak(r), warmup(r)) == setting[p]]
    return out


def warmups(src):
    """Each placement with a warmup sweep: its joint arm at its calibrated peak
    over the warmups (the set's from the peak sweep), mean ± std of the final
    validation CE over the seeds, the calibrated warmup in bold."""
    groups = calibrate_runs(src)
    ps = [p for p in placements_of(groups) if groups.get(f"warmup-{p}")]
    if not ps:
        raise ReportError(f"readme: {src.where}: no warmup-PLACEMENT sweep in it (tools/calibrate.sh --warmups)")
    setting = {p: calibrated_setting(groups, p) for p in ps}
    runs = {p: by_warmup(groups, p, setting[p][0]) for p in ps if setting[p]}
    ws = sorted({w for p in runs for w in runs[p]})
    out = ["| joint arm | peak LR | " + " | ".join(f"warmup {w}" for w in ws) + " | calibrated warmup |",
           "|---|" + "---:|" * (len(ws) + 2)]
    for p in ps:
        if not setting[p]:
            out.append(f"| {PLACEMENTS[p]} | none | " + " | ".join("not run" for _ in ws) + " | none |")
            continue
        lr, best = setting[p]
        cells = [("**%s**" if w == best else "%s") % mean_std(runs[p][w]) if w in runs[p] else "not run" for w in ws]
        out.append(f"| {PLACEMENTS[p]} | {lr:g} | " + " | ".join(cells) + f" | {best if best is not None else 'none'} |")
    seeds = sorted({r.seed for p in ps for r in groups[f"warmup-{p}"]})
    out += ["", f"Warmups in tokens; the set's ({set_warmup(groups)}) from the peak sweep. Seeds "
            f"{', '.join(map(str, seeds))}; run with {backend_words(machine(groups[f'warmup-{ps[0]}'][0]))}."]
    return "\n".join(out) + "\n"


def calibrated_study(groups):
    """The calibrated joint arms, the grown arms and the controls of
    tools/calibrate.sh's directory (at_peaks' groups) as one Study."""
    runs = [r for p in PLACEMENTS for g in (f"joint-{p}", f"grow-{p}") for r in groups.get(g, [])]
    runs += [r for g in sorted(groups) if g.startswith("control-") for r in groups[g]]
    arms = group_arms(runs)
    return Study([r for a in arms for r in a.runs], arms)


def calibrated(src):
    """At each placement's calibrated rate: the joint and grown arms, grown −
    joint and the interaction with Pre-Norm, each paired over the seeds with its
    95% interval; each placement against Pre-Norm, joint and grown; then each
    control against grown Post-Norm."""
    every = calibrate_runs(src)
    study, set_w = calibrated_study(at_peaks(every)), set_warmup(every)
    grown_arms = {a.first.placement: a for a in study.arms if grown(a)}
    quads = {q[0].first.placement: q for q in quadruples(study)}
    out = ["| placement | peak LR | joint | grown | grown − joint | 95% interval | interaction with Pre-Norm "
           "| 95% interval |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in PLACEMENTS:
        g = grown_arms.get(p)
        j = g and joint_of(study, g)
        if j is None:
            continue
        d = paired(final_ces(g), final_ces(j))
        q = quads.get(p)
        i = interaction(q)[0] if q else None
        out.append(f"| {PLACEMENTS[p]} | {rate(j.first, set_w)} | {mean_std(j.runs)} | {mean_std(g.runs)} | "
                   f"{'%+.4f' % d.mean if d else 'n/a'} | {interval(d)} | "
                   f"{('%+.4f' % i.mean) if i else ('—' if p == 'pre' else 'n/a')} | "
                   f"{interval(i) if i else ('—' if p == 'pre' else 'n/a')} |")
    if quads:
        out += ["", "| placement P | P − Pre-Norm, joint | 95% interval | P − Pre-Norm, grown | 95% interval |",
                "|---|---:|---:|---:|---:|"]
        for p in PLACEMENTS:
            if p in quads:
                _, growth, joint_d = interaction(quads[p])
                out.append(f"| {PLACEMENTS[p]} | {'%+.4f' % joint_d.mean} | {interval(joint_d)} | "
                           f"{'%+.4f' % growth.mean} | {interval(growth)} |")
    controls = [a for a in study.arms if a.name.startswith("control-")]
    g = grown_arms.get("post")
    if controls and g is not None:
        out += ["", f"| control (Post-Norm, peak LR {rate(g.first, set_w)}) | final val CE | control − grown Post-Norm "
                "| 95% interval |", "|---|---:|---:|---:|"]
        for c in controls:
            d = paired(final_ces(c), final_ces(g))
            out.append(f"| {c.name.split('@')[0]} | {mean_std(c.runs)} | {'%+.4f' % d.mean if d else 'n/a'} | "
                       f"{interval(d)} |")
    return "\n".join(out) + "\n"


def seed_ces(runs):
    """{seed: final validation CE} of the runs that trained."""
    return final_ces(Arm(runs))


def difference_cells(a, b):
    """"mean | [lo, hi]" of A − B paired over the seeds both trained."""
    d = paired(seed_ces(a), seed_ces(b))
    return f"{'%+.4f' % d.mean if d else 'n/a'} | {interval(d)}"


def groups_needed(src, groups, names, option):
    for g in names:
        if not groups.get(g):
            raise ReportError(f"readme: {src.where}: no runs in {g} (tools/calibrate.sh {option})")


DIVERGENCES = (("grow-{}", "forward KL"), ("divergence-{}-reverse-kl", "reverse KL"), ("divergence-{}-jsd", "JSD"))


def divergences(src):
    """The grown Pre- and Post-Norm arms under each KD divergence (the set's
    forward KL, reverse KL, JSD), each at its placement's calibrated setting:
    each against the same placement's forward KL, then grown Post − Pre under
    each divergence and its change from forward KL's, paired over the seeds
    with 95% intervals."""
    every = calibrate_runs(src)
    groups, set_w = at_peaks(every), set_warmup(every)
    name = {(p, d): g.format(p) for p in ("pre", "post") for g, d in DIVERGENCES}
    groups_needed(src, groups, name.values(), "--divergences")
    out = ["| placement | divergence | peak LR | final val CE | − forward KL | 95% interval |",
           "|---|---|---:|---:|---:|---:|"]
    for p in ("pre", "post"):
        fkl = groups[name[p, "forward KL"]]
        for _, d in DIVERGENCES:
            runs = groups[name[p, d]]
            cells = "— | —" if d == "forward KL" else difference_cells(runs, fkl)
            out.append(f"| {PLACEMENTS[p]} | {d} | {rate(runs[0], set_w)} | {mean_std(runs)} | {cells} |")
    out += ["", "| divergence | seeds | grown Post − grown Pre | 95% interval | change from forward KL's "
            "| 95% interval |", "|---|---:|---:|---:|---:|---:|"]
    post_pre = {}
    for _, d in DIVERGENCES:
        post, pre = seed_ces(groups[name["post", d]]), seed_ces(groups[name["pre", d]])
        post_pre[d] = {s: post[s] - pre[s] for s in set(post) & set(pre)}
        g = paired(post_pre[d], dict.fromkeys(post_pre[d], 0.0))
        c = None if d == "forward KL" else paired(post_pre[d], post_pre["forward KL"])
        out.append(f"| {d} | {g.n if g else 0} | {'%+.4f' % g.mean if g else 'n/a'} | {interval(g)} | "
                   + ("— | — |" if d == "forward KL" else f"{'%+.4f' % c.mean if c else 'n/a'} | {interval(c)} |"))
    return "\n".join(out) + "\n"


INTERVENTIONS = (("intervention-rescale-stream", "the stream rescaled at each growth"),
                 ("intervention-depth-scaled-init", "depth-scaled init of the new blocks"),
                 ("intervention-layer-scale", "LayerScale, 0.1"))


def interventions(src):
    """The grown Pre-Norm arm with each intervention on the stream's scale, at
    Pre-Norm's calibrated setting: each against grown Pre-Norm and against
    grown Post-Norm (at its own), paired over the seeds with 95% intervals;
    then LayerScale, which acts in every step, in the joint arm too: its
    effect there and its interaction with growth."""
    every = calibrate_runs(src)
    groups, set_w = at_peaks(every), set_warmup(every)
    groups_needed(src, groups, ["grow-pre", "grow-post", "joint-pre", "intervention-joint-layer-scale"]
                  + [g for g, _ in INTERVENTIONS], "--interventions")
    pre, post = groups["grow-pre"], groups["grow-post"]
    out = ["| grown Pre-Norm | peak LR | final val CE | − grown Pre-Norm | 95% interval | − grown Post-Norm "
           f"({rate(post[0], set_w)}) | 95% interval |", "|---|---:|---:|---:|---:|---:|---:|",
           f"| without | {rate(pre[0], set_w)} | {mean_std(pre)} | — | — | {difference_cells(pre, post)} |"]
    for g, what in INTERVENTIONS:
        runs = groups[g]
        out.append(f"| {what} | {rate(runs[0], set_w)} | {mean_std(runs)} | {difference_cells(runs, pre)} | "
                   f"{difference_cells(runs, post)} |")
    joint, joint_ls, grown_ls = (seed_ces(groups[g]) for g in ("joint-pre", "intervention-joint-layer-scale",
                                                                "intervention-layer-scale"))
    grown_ce = seed_ces(pre)
    seeds = set(joint) & set(joint_ls) & set(grown_ls) & set(grown_ce)
    ls_joint = {s: joint_ls[s] - joint[s] for s in seeds}
    ls_grown = {s: grown_ls[s] - grown_ce[s] for s in seeds}
    i = paired(ls_grown, ls_joint)
    out += ["", "| Pre-Norm | without LayerScale | with LayerScale, 0.1 | with − without | 95% interval |",
            "|---|---:|---:|---:|---:|",
            f"| joint | {mean_std(groups['joint-pre'])} | {mean_std(groups['intervention-joint-layer-scale'])} | "
            f"{difference_cells(groups['intervention-joint-layer-scale'], groups['joint-pre'])} |",
            f"| grown | {mean_std(pre)} | {mean_std(groups['intervention-layer-scale'])} | "
            f"{difference_cells(groups['intervention-layer-scale'], pre)} |",
            f"| grown − joint (interaction) | | | {'%+.4f' % i.mean if i else 'n/a'} | {interval(i)} |"]
    return "\n".join(out) + "\n"


def hybrid(src):
    """The grown arms of both placements beside the hybrid growths (the other
    placement's blocks grown on each prefix), and the paired differences that
    separate the new blocks' placement from the prefix's, with 95% intervals:
    four between arms, then the two main effects of the 2 x 2 design."""
    every = calibrate_runs(src)
    groups, set_w = at_peaks(every), set_warmup(every)
    names = (("grow-pre", "Pre", "Pre"), ("grow-post", "Post", "Post"),
             ("hybrid-pre-post", "Pre", "Post"), ("hybrid-post-pre", "Post", "Pre"))
    groups_needed(src, groups, [g for g, _, _ in names], "--hybrid")
    ces = {g: seed_ces(groups[g]) for g, _, _ in names}
    out = ["| arm | prefix | new blocks | peak LR | final val CE |", "|---|---|---|---:|---:|"]
    out += [f"| {g} | {pre} | {new} | {rate(groups[g][0], set_w)} | {mean_std(groups[g])} |" for g, pre, new in names]
    out += ["", "| paired difference | seeds | mean | 95% interval | excludes 0 |", "|---|---:|---:|---:|---|"]
    rows = [(f"{a} − {b}", paired(ces[a], ces[b])) for a, b in (
        ("hybrid-pre-post", "grow-pre"), ("hybrid-post-pre", "grow-post"),
        ("hybrid-pre-post", "hybrid-post-pre"), ("grow-post", "grow-pre"))]
    # The four arms as a 2 x 2 design: each factor's effect (Post − Pre) averaged
    # over the other factor's two levels, seed by seed.
    seeds = set.intersection(*(set(c) for c in ces.values()))
    pre_pre, post_post = ces["grow-pre"], ces["grow-post"]
    pre_post, post_pre = ces["hybrid-pre-post"], ces["hybrid-post-pre"]
    new_blocks = {s: (pre_post[s] - pre_pre[s] + post_post[s] - post_pre[s]) / 2 for s in seeds}
    prefix = {s: (post_pre[s] - pre_pre[s] + post_post[s] - pre_post[s]) / 2 for s in seeds}
    zero = {s: 0.0 for s in seeds}
    rows += [("new blocks Post − Pre, mean over the two prefixes", paired(new_blocks, zero)),
             ("prefix Post − Pre, mean over the two kinds of new blocks", paired(prefix, zero))]
    for name, p in rows:
        out.append(f"| {name} | {p.n if p else 0} | {'%+.4f' % p.mean if p else 'n/a'} | {interval(p)} | "
                   f"{excludes(p)} |")
    return "\n".join(out) + "\n"


KINDS = {"seed1": (seed1, 1), "topk": (topk, 1), "arms": (arm_rows, 1), "paired": (paired_rows, 1), "spread": (spread, 1),
         "compare": (compare, 2), "calibration": (calibration, 1), "calibrated": (calibrated, 1), "hybrid": (hybrid, 1),
         "warmups": (warmups, 1), "divergences": (divergences, 1), "interventions": (interventions, 1)}


# ---------------------------------------------------------------- the README

def remake(text, sources, say):
    """(new text, [names of blocks made anew that differ])."""
    differ = []

    def one(m):
        kind, labels, old = m.group(1), m.group(2).split(), m.group(3)
        if kind not in KINDS:
            raise ReportError(f"readme: a block of kind \"{kind}\": none of {', '.join(KINDS)}")
        make, n = KINDS[kind]
        if len(labels) != n:
            raise ReportError(f"readme: block \"{kind}\" takes {n} label(s), has {len(labels)}")
        missing = [l for l in labels if l not in sources]
        if missing:
            say(f"readme: block {kind} {' '.join(labels)}: left as it is (no runs for {', '.join(missing)})")
            return m.group(0)
        new = make(*(sources[l] for l in labels))
        if new != old:
            differ.append(f"{kind} {' '.join(labels)}")
        return f"<!-- numbers {kind} {' '.join(labels)} -->\n{new}<!-- /numbers -->\n"

    return BLOCK.sub(one, text), differ


def parse(argv):
    p = argparse.ArgumentParser(prog="python3 -m report.readme",
                                description=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("readme")
    p.add_argument("--runs", action="append", default=[], metavar="LABEL=DIR")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--check", action="store_true")
    how.add_argument("--out", metavar="FILE")
    p.add_argument("--force", action="store_true")
    return p.parse_args(argv)


def to_stderr(line):
    print(line, file=sys.stderr)


def main(argv=None, say=to_stderr):
    from .files import write_atomic
    from .runs import read_text
    a = parse(sys.argv[1:] if argv is None else argv)
    try:
        roots = {}
        for spec in a.runs:
            label, sep, root = spec.partition("=")
            if not sep or not label or not root:
                raise ReportError(f"readme: --runs {spec}: expected LABEL=DIR")
            roots.setdefault(label, []).append(root)
        sources = {label: Runs(label, r) for label, r in roots.items()}
        text = read_text(a.readme)
        new, differ = remake(text, sources, say)
        if a.check:
            for d in differ:
                say(f"readme: {a.readme}: block {d} differs from what its runs give")
            return 1 if differ else 0
        if os.path.exists(a.out) and not a.force:
            raise ReportError(f"readme: {a.out} exists: --force replaces it")
        write_atomic(a.out, new)
        return 0
    except ReportError as e:
        say(str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
