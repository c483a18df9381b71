"""The readings of the report: each a pure function from the study (its arms
and runs) to one Table. Means are over the runs of an arm that trained
(trained.py); an arm none of whose runs trained reads "did not train".
"""
import math
from dataclasses import dataclass, field
from itertools import combinations

from . import seed_study
from .runs import CLASSES, canonical
from .stats import CONFIDENCE, paired, summary
from .trained import PLATEAU_MARGIN
from .table import DID_NOT_TRAIN, Num, Table, finite_cell, mean_cell, summary_cell

G4 = "%.4g"


@dataclass
class Study:
    runs: list  # every Run, in the order given
    arms: list  # Arm
    skipped: list = field(default_factory=list)  # arguments that are not run directories
    eval_differs: list = field(default_factory=list)  # eval settings in which the runs differ


def trained(arm):
    return [r for r in arm.runs if r.failed is None]


def over(arm, get):
    """Summary over the arm's trained runs of get(run) (None: the run has no
    value); None when no run of the arm trained."""
    runs = trained(arm)
    return summary([get(r) for r in runs]) if runs else None


def cell(arm, get, make=mean_cell, fmt="%.4f"):
    s = over(arm, get)
    return DID_NOT_TRAIN if s is None else make(s, fmt)


def excluded_note(study):
    """The line under each table that names the runs left out of its means."""
    out = [f"`{r.name}` seed {r.seed}" for r in study.runs if r.failed is not None]
    return [f"Left out of the means (did not train, see above): {', '.join(out)}."] if out else []


def diff_cell(p, fmt="%+.4f"):
    return Num(p.mean, fmt)


def interval(p):
    """"[lo, hi]", or why there is none."""
    if p is None:
        return "no seed in common"
    if p.n < 2:
        return "1 seed: no interval"
    return f"[{p.lo:+.4f}, {p.hi:+.4f}]"


def excludes(p):
    if p is None or p.n < 2:
        return "—"
    return "yes" if p.excludes_zero else "no"


def final_ces(arm):
    """{seed: last validation CE} of the arm's trained runs."""
    return {r.seed: r.last.ce for r in trained(arm)}


def seeds_cell(arm):
    return ", ".join(f"{r.seed}{'' if r.failed is None else ' (did not train)'}" for r in arm.runs)


# ---------------------------------------------------------------- final values

def arms_table(study):
    kd = any(r.last.kd is not None for r in study.runs)
    t = Table("Arms", "", ["arm", "placement", "schedule", "seeds", "final val CE"]
              + (["final val KD", "teacher CE"] if kd else []) + ["tokens", "layer-tokens", "FLOPs"], left=4)
    for a in study.arms:
        row = [a.name, a.first.title, a.first.schedule, seeds_cell(a), cell(a, lambda r: r.last.ce, summary_cell)]
        if kd:
            row += [cell(a, lambda r: r.last.kd, summary_cell), cell(a, lambda r: r.last.teacher_ce, summary_cell)]
        e = (trained(a) or a.runs)[0].last
        row += [Num(e.tokens, "%.0f"), Num(e.layer_tokens, "%.0f"), Num(e.flops, sci=True)]
        t.rows.append(row)
    t.notes = ["Tokens, layer-tokens (tokens times active blocks, summed over steps) and FLOPs are the "
               "training totals of one run of the arm (its first seed that trained) at its final evaluation. "
               "LR restarts name the stages that start the learning-rate schedule anew."] + excluded_note(study)
    return t


def accounting_reference(study):
    """Of the fixed-depth arms with a run that trained, the first with the
    fewest tokens (the joint arm among the study's); None without one."""
    ref = None
    for a in study.arms:
        s = over(a, lambda r: r.last.tokens)
        if a.first.schedule.startswith("fixed") and s is not None and (ref is None or s.mean < ref[1]):
            ref = (a, s.mean)
    return ref[0] if ref else None


def accounting_table(study):
    ref = accounting_reference(study)
    if ref is None:
        ref = next((a for a in study.arms if trained(a)), study.arms[0])
        which = "the first arm that trained: no arm of a fixed depth trained"
    else:
        which = "of the arms of a fixed depth, the one with the fewest tokens"
    t = Table("Token accounting",
              "Training totals at each arm's final evaluation (mean over seeds), and each as a multiple of "
              f"the reference arm's, `{ref.name}` ({ref.first.schedule}): {which}. Layer-tokens: tokens times "
              "the blocks they pass through, summed over steps. FLOPs: forward and backward of the student "
              "plus the teacher's forward where the teacher runs (not from a top-k cache), by the rule of "
              "`normgrow plan` (plan.h); evaluation and diagnostics are not counted. Reading A: every arm has "
              "the same tokens, so growth has fewer layer-tokens and FLOPs than joint training; reading B: each "
              "growth stage has the joint arm's tokens, so growth has more, and the controls are sized to it.",
              ["arm", "schedule", "tokens", "tokens / ref", "layer-tokens", "layer-tokens / ref", "FLOPs",
               "FLOPs / ref", "FLOPs per token"], left=2)
    gets = (lambda r: r.last.tokens, lambda r: r.last.layer_tokens, lambda r: r.last.flops)
    for a in study.arms:
        row = [a.name, a.first.schedule]
        s = [over(a, g) for g in gets]
        r = [over(ref, g) for g in gets]
        if s[0] is None:
            row += [DID_NOT_TRAIN] * 7
        else:
            for k in range(3):
                row += [Num(s[k].mean, "%.0f", sci=k == 2), Num(s[k].mean / r[k].mean if r[k] else math.nan, "%.2f")]
            row.append(Num(s[2].mean / s[0].mean, sci=True))
        t.rows.append(row)
    t.notes = excluded_note(study)
    return t


def pairwise_table(study):
    several = any(len(trained(a)) > 1 for a in study.arms)
    t = Table("Differences in final validation CE",
              "Row arm minus column arm, of the mean final validation CE over seeds (negative: the row arm "
              "ends lower)." + (" Where an arm has several seeds: the larger of the two arms' standard "
                                "deviations over seeds." if several else "")
              + " The paired differences and their intervals are in the next table.",
              ["row − column"] + [a.name for a in study.arms])
    for a in study.arms:
        row = [a.name]
        for b in study.arms:
            ra, rb = over(a, lambda r: r.last.ce), over(b, lambda r: r.last.ce)
            if a is b:
                row.append("—")
            elif ra is None or rb is None:
                row.append(DID_NOT_TRAIN)
            else:
                out = "%+.4f" % (ra.mean - rb.mean)
                if ra.n > 1 or rb.n > 1:
                    stds = [s for s in (ra.std, rb.std) if not math.isnan(s)]
                    out += " (max std %.4f)" % (max(stds) if stds else math.nan)
                row.append(out)
        t.rows.append(row)
    t.notes = excluded_note(study)
    return t


def paired_differences(study):
    """[(a, b, Paired or None)] for every pair of arms, in the order given."""
    return [(a, b, paired(final_ces(a), final_ces(b))) for a, b in combinations(study.arms, 2)]


def paired_table(study):
    pct = round(CONFIDENCE * 100)
    t = Table("Paired differences in final validation CE",
              "For each pair of arms, the difference of their final validation CE seed by seed (the runs of "
              "the same seed of both arms, both trained), then over those seeds: the mean, its standard error "
              f"(the std of the differences over sqrt(n)) and its {pct}% confidence interval (Student's t with "
              "n − 1 degrees of freedom). Pairing by seed removes what the seeds share (data order, "
              "initialisation). An interval that excludes zero says which arm ends lower beyond the spread of "
              "the seeds; one that includes zero says the seeds do not tell them apart.",
              ["A − B", "seeds", "mean", "standard error", f"{pct}% interval", "excludes 0"], left=2)
    lower = []
    for a, b, p in paired_differences(study):
        name = f"{a.name} − {b.name}"
        if p is None:
            t.rows.append([name, "none", "n/a", "n/a", interval(p), excludes(p)])
            continue
        t.rows.append([name, ", ".join(map(str, p.seeds)), Num(p.mean, "%+.4f"),
                       Num(p.se if p.n > 1 else None, "%.4f"), interval(p), excludes(p)])
        if p.excludes_zero:
            lower.append(f"`{a.name}` ends {'below' if p.mean < 0 else 'above'} `{b.name}` "
                         f"({p.mean:+.4f}, {interval(p)})")
    t.notes = [("Intervals that exclude zero: " + "; ".join(lower) + ". Every other pair is within the "
                "spread of its seeds." if lower else
                "No interval excludes zero: no pair of arms is told apart by its seeds.")] + excluded_note(study)
    return t


# ---------------------------------------------------------------- arms by their configs

# A placement's keys: its name and the settings that only it reads (DeepNorm's alpha and beta
# init, Mix-LN's Post-Norm blocks).
PLACEMENT_KEYS = ("model.norm_placement", "model.deepnorm_alpha", "init.deepnorm_beta", "model.mixln_post_layers")
IDENTITY_KEYS = ("name", "run_dir", "seed")


def differs_only(a, b, prefixes):
    """Whether two arms' configs agree but in the keys that start with one of
    the prefixes (and name, run_dir, seed)."""
    sa, sb = a.first.settings, b.first.settings
    for k in set(sa) | set(sb):
        if k in IDENTITY_KEYS or k.startswith(prefixes):
            continue
        if (canonical(sa[k]) if k in sa else None) != (canonical(sb[k]) if k in sb else None):
            return False
    return True


def total_tokens(arm):
    return sum(s["tokens"] for s in arm.first.config["stages"])


def grown(arm):
    return arm.first.schedule.startswith("grow")


def joint_of(study, g):
    """The joint arm of a grown one: of a fixed depth, its final depth, its
    tokens, without LR restarts, and otherwise its config."""
    return next((a for a in study.arms if a.first.schedule == f"fixed {g.first.depth}"
                 and total_tokens(a) == total_tokens(g) and differs_only(a, g, ("stages", "growth"))), None)


def controls_of(study, g):
    """The fixed-depth arms of a grown arm's config but for their stages and
    growth settings (the joint arm and the controls), without the joint arm."""
    j = joint_of(study, g)
    return [a for a in study.arms if a is not j and not grown(a) and a.first.depth == g.first.depth
            and differs_only(a, g, ("stages", "growth"))]


LR_KEYS = ("lr.",)


def other_placement(study, arm, placement):
    """The arm of the same config in another placement; else, where the study has
    exactly one, the arm of the same config in that placement at its own learning
    rate (placements each at their calibrated rate: tools/calibrate.sh)."""
    same = [a for a in study.arms if a is not arm and a.first.placement == placement and grown(a) == grown(arm)]
    exact = [a for a in same if differs_only(a, arm, PLACEMENT_KEYS)]
    if exact:
        return exact[0]
    calibrated = [a for a in same if differs_only(a, arm, PLACEMENT_KEYS + LR_KEYS)]
    return calibrated[0] if len(calibrated) == 1 else None


def lr_differences(a, b):
    """The learning-rate settings in which two arms differ, "key value" joined
    for each ("" for both when they agree)."""
    sa, sb = a.first.settings, b.first.settings
    keys = sorted(k for k in set(sa) | set(sb) if k.startswith(LR_KEYS) and sa.get(k) != sb.get(k))
    return tuple(", ".join(f"{k} {s.get(k)}" for k in keys) for s in (sa, sb))


def quadruples(study):
    """(grown P, grown Pre, joint P, joint Pre) for every placement P but Pre
    whose four arms are in the study."""
    out = []
    for g in study.arms:
        if not grown(g) or g.first.placement == "pre":
            continue
        g0 = other_placement(study, g, "pre")
        j, j0 = joint_of(study, g), g0 and joint_of(study, g0)
        if g0 and j and j0:
            out.append((g, g0, j, j0))
    return out


def interaction(quad):
    """Over the seeds all four arms trained: per seed (grown P − grown Pre) −
    (joint P − joint Pre) as Paired (None without such a seed), and the two
    differences' own Paired over the same seeds."""
    g, g0, j, j0 = (final_ces(a) for a in quad)
    seeds = set(g) & set(g0) & set(j) & set(j0)
    growth = {s: g[s] - g0[s] for s in seeds}
    joint = {s: j[s] - j0[s] for s in seeds}
    return paired(growth, joint), paired(growth, dict.fromkeys(seeds, 0.0)), paired(joint, dict.fromkeys(seeds, 0.0))


def interaction_table(study):
    pct = round(CONFIDENCE * 100)
    t = Table("Interaction of placement and growth",
              "The study's claim is an interaction: a placement's lead over Pre-Norm when the student is grown, "
              "minus its lead when all blocks train jointly. Per seed (the four arms' runs of that seed, all "
              "trained): (grown P − grown Pre) − (joint P − joint Pre); negative: growth favours P more than "
              f"joint training does. Then the mean over seeds, its standard error and its {pct}% interval "
              "(t, n − 1 degrees of freedom). The arms are found by their configs: the grown arm of placement P, "
              "the grown Pre-Norm arm of the same config but for the placement (where there is none, the only one "
              "that differs also in its learning rate: placements each at a calibrated rate), and each one's joint arm (a "
              "fixed depth, its final depth and tokens, no LR restart, the same config but for the stages).",
              ["placement P", "arms (grown P, grown Pre, joint P, joint Pre)", "seeds", "grown P − grown Pre",
               "joint P − joint Pre", "interaction", "standard error", f"{pct}% interval", "excludes 0"], left=3)
    for quad in quadruples(study):
        p, growth, joint = interaction(quad)
        row = [quad[0].first.title, ", ".join(a.name for a in quad)]
        if p is None:
            row += ["none", "n/a", "n/a", "n/a", "n/a", interval(p), excludes(p)]
        else:
            row += [", ".join(map(str, p.seeds)), Num(growth.mean, "%+.4f"), Num(joint.mean, "%+.4f"),
                    Num(p.mean, "%+.4f"), Num(p.se if p.n > 1 else None, "%.4f"), interval(p), excludes(p)]
        t.rows.append(row)
        lr_p, lr_pre = lr_differences(quad[0], quad[1])
        if lr_p:
            t.notes.append(f"{quad[0].name} and {quad[2].name} train at {lr_p}; {quad[1].name} and "
                           f"{quad[3].name} at {lr_pre}: each placement at its own (calibrated) learning rate.")
    if not t.rows:
        t.notes = ["No placement has its grown and joint arms beside grown and joint Pre-Norm arms here."]
    t.notes += excluded_note(study)
    return t


# ---------------------------------------------------------------- the seed study

def spread_range(r, kind="hidden"):
    """(first, last, smallest, largest) std over tokens of the per-token RMS
    at hidden.L (or res2.L) over the run's evaluations; None without records."""
    v = [d.hidden_std if kind == "hidden" else d.res2_std for d in r.diag or []
         if kind == "hidden" or r.block_output_norm(d.depth, d.depth)]
    return (v[0], v[-1], min(v), max(v)) if v else None


def ranged(arm, k):
    return over(arm, lambda r: spread_range(r)[k] if spread_range(r) else None)


def last_block_dce(r):
    f = r.final
    return f.ablation[f.depth][0] if f and f.ablation and f.depth in f.ablation else None


def min_block_dce(arm):
    """The smallest mean skip ΔCE over the arm's blocks, and its block."""
    best = None
    for b in ablation_blocks([arm]):
        s = over(arm, lambda r: ablated(r, b, 0))
        if s and s.n and math.isfinite(s.mean) and (best is None or s.mean < best[0]):
            best = (s.mean, b)
    return best


def with_interval(p):
    if p is None:
        return "no seed in common"
    return f"{p.mean:+.4f} ({interval(p)})"


def seed_study_rows(study, quad):
    g, g0, j, j0 = quad
    s = seed_study
    rows = []
    jp = paired(final_ces(j), final_ces(j0))
    agree = "no interval" if jp is None or jp.n < 2 else \
        ("agrees: the interval includes 0" if not jp.excludes_zero else "differs: the interval excludes 0")
    rows.append(["joint Post − joint Pre, final val CE", f"{s.JOINT_DIFFERENCE:.4f} (a tie; its sign is not "
                 "given)", with_interval(jp), f"{j.name} − {j0.name}", agree])
    gp = paired(final_ces(g), final_ces(g0))
    rows.append(["grown Post − grown Pre, final val CE", f"{s.GROWTH_DIFFERENCE:+.4f}", with_interval(gp),
                 f"{g.name} − {g0.name}", sign_agreement(gp and gp.mean, s.GROWTH_DIFFERENCE, gp)])
    ce = over(g, lambda r: r.last.ce)
    rows.append(["grown Post-Norm, final val CE", f"{s.GROWN_POST_CE:.4f}",
                 DID_NOT_TRAIN if ce is None else str(summary_cell(ce)), g.name,
                 "— (other data, teacher and scale)"])
    controls = controls_of(study, g)
    if controls:
        ds = [(c, paired(final_ces(c), final_ces(g))) for c in controls]
        above = sum(1 for _, p in ds if p is not None and p.mean > 0)
        rows.append(["each fixed-depth control − grown Post, final val CE", "> 0 for every control",
                     "; ".join(f"{c.name} {with_interval(p)}" for c, p in ds), ", ".join(c.name for c in controls),
                     f"{'agrees' if above == len(ds) else 'differs'}: {above} of {len(ds)} above"])
    first, last = ranged(g0, 0), ranged(g0, 1)
    if first and first.n:
        rows.append(["grown Pre-Norm: RMS spread at hidden.L, first → last evaluation",
                     "%.2f → %.2f (rises)" % s.GROWN_PRE_RMS_STD, "%.4g → %.4g" % (first.mean, last.mean), g0.name,
                     sign_agreement(last.mean - first.mean, 1.0)])
    lo, hi, pre_lo = ranged(g, 2), ranged(g, 3), ranged(g0, 2)
    if lo and lo.n:
        below = pre_lo is not None and pre_lo.n and hi.mean < pre_lo.mean
        res2 = [over(g, lambda r, k=k: spread_range(r, "res2")[k] if spread_range(r, "res2") else None) for k in (2, 3)]
        ours = "hidden.L %.4g to %.4g" % (lo.mean, hi.mean)
        if res2[0] and res2[0].n:
            ours += "; res2.L %.4g to %.4g" % (res2[0].mean, res2[1].mean)
        rows.append(["grown Post-Norm: RMS spread at the last block over training (hidden.L; res2.L, before its norm)",
                     "%.2f to %.2f" % s.GROWN_POST_RMS_STD, ours, g.name,
                     ("agrees: below grown Pre-Norm's smallest" if below else
                      "differs: not below grown Pre-Norm's smallest") if pre_lo and pre_lo.n else "—"])
    last_dce = over(g0, last_block_dce)
    post_min = min_block_dce(g)
    if last_dce and last_dce.n:
        rows.append(["grown Pre-Norm: ΔCE removing the last block", f"{s.GROWN_PRE_LAST_BLOCK_DCE:.2f}",
                     "%+.4f" % last_dce.mean, g0.name,
                     ("agrees: below grown Post-Norm's smallest" if last_dce.mean < post_min[0] else
                      "differs: not below grown Post-Norm's smallest") if post_min else "—"])
    if post_min:
        rows.append(["grown Post-Norm: smallest ΔCE of removing any block", f"at least {s.GROWN_POST_MIN_BLOCK_DCE:.2f}",
                     "%+.4f (block %d)" % post_min, g.name,
                     ("agrees: above grown Pre-Norm's last block" if post_min[0] > last_dce.mean else
                      "differs: not above grown Pre-Norm's last block") if last_dce and last_dce.n else "—"])
    return rows


def sign_agreement(ours, theirs, p=None):
    if ours is None or math.isnan(ours):
        return "—"
    same = (ours > 0) == (theirs > 0) and ours != 0
    out = "same sign" if same else "opposite sign"
    if p is not None and p.n > 1:
        out += ", interval excludes 0" if p.excludes_zero else ", interval includes 0"
    return out


def seed_study_table(study):
    t = Table("The seed study beside normgrow",
              f"Each number of {seed_study.SOURCE} beside normgrow's reading of the same thing on these runs, "
              "and whether they agree in sign (the scale and data differ, so sizes are not comparable; the "
              "signs and orderings are the claim). normgrow's differences are paired over seeds with their "
              f"{round(CONFIDENCE * 100)}% interval (see the paired differences); RMS spreads and ΔCE are means "
              "over seeds. The arms are the grown and joint Pre- and Post-Norm arms of the interaction table.",
              ["reading", "seed study", "normgrow", "arms", "agreement"], left=5)
    quad = next((q for q in quadruples(study) if q[0].first.placement == "post"), None)
    if quad is None:
        t.notes = ["These runs lack the grown and joint Pre- and Post-Norm arms of one config: nothing to set "
                   "beside the seed study."]
    else:
        t.rows = seed_study_rows(study, quad)
    t.notes += excluded_note(study)
    return t


# ---------------------------------------------------------------- stages

def stage_ends(r):
    """[(step of the last evaluation of a stage, step of the first of the next)]."""
    return [(a.step, b.step) for a, b in zip(r.evals, r.evals[1:]) if b.stage > a.stage]


def ce_at(r, step):
    return next((e.ce for e in r.evals if e.step == step), None)


def stage_table(study):
    marks = {}
    for r in study.runs:
        if r.failed is None:
            for end, after in stage_ends(r):
                marks.setdefault(end, set()).add("end")
                marks.setdefault(after, set()).add("after")
    if not marks:
        return None
    steps = sorted(marks)
    t = Table("Validation CE where stages change",
              "Validation CE of every arm (mean over seeds, ± std where it has several) at the steps where a "
              "staged arm's stage ends (end: the stage's last evaluation, before its growth or LR restart) and "
              "at the first evaluation of the next stage (after). n/a: the arm has no evaluation at that step.",
              ["arm"] + [f"step {s} ({', '.join(sorted(marks[s]))})" for s in steps])
    for a in study.arms:
        t.rows.append([a.name] + [cell(a, lambda r, s=s: ce_at(r, s), summary_cell) for s in steps])
    t.notes = excluded_note(study)
    return t


# ---------------------------------------------------------------- the residual RMS spread

def rms_spread_table(study):
    t = Table("Residual RMS spread",
              "Standard deviation over tokens of the per-token RMS (all tokens) at hidden.L, the output of the "
              "last block (L: the depth at that evaluation), at the first and the last evaluation of diag.jsonl; "
              "for arms whose last block ends in a norm (post, deepnorm, mixln while L <= P, hybrid growth while "
              "block L is post) also at res2.L, the sum before that norm (hidden.L is pinned by the norm, res2.L is not). Mean over seeds.",
              ["arm", "placement", "L first → last", "hidden.L first", "hidden.L last", "res2.L first", "res2.L last"],
              left=3)
    for a in study.arms:
        d = next((r for r in trained(a) if r.diag), None)
        row = [a.name, a.first.title, f"{d.diag[0].depth} → {d.diag[-1].depth}" if d else
               "n/a" if trained(a) else DID_NOT_TRAIN]
        for k in range(4):
            def get(r, k=k):
                v = [e.hidden_std for e in r.diag or []] if k < 2 else \
                    [e.res2_std for e in r.diag or [] if r.block_output_norm(e.depth, e.depth)]
                return (v[-1] if k % 2 else v[0]) if v else None
            row.append(cell(a, get, fmt=G4))
        t.rows.append(row)
    t.notes = excluded_note(study)
    return t


def class_means_table(study):
    t = Table("Residual RMS by token class",
              "Mean per-token RMS at hidden.L, the last block's output (diag_final.json, L the final depth), by "
              "token class, mean over seeds; Post-Norm arms also at res2.L, before the last norm. Classes: "
              "window_start, the first position of each window (where attention sinks sit); the document "
              "separator; the first token after one; structural (the config's structural_tokens); ordinary. "
              "n/a: no token of the class, or a file without it.",
              ["arm", "point"] + list(CLASSES), left=2)
    for a in study.arms:
        runs = trained(a)
        L = max((r.final.depth for r in runs if r.final), default=None)
        if not runs:
            t.rows.append([a.name, "—"] + [DID_NOT_TRAIN] * len(CLASSES))
            continue
        if L is None or L == 0:
            continue
        for kind in ("hidden", "res2") if a.first.output_norms else ("hidden",):
            def get(r, k, kind=kind):
                if not r.final or r.final.depth < L:
                    return None
                return (r.final.res2_class_mean if kind == "res2" else r.final.hidden_class_mean)[L][k]
            t.rows.append([a.name, f"{kind}.{L}"] + [cell(a, lambda r, k=k: get(r, k), finite_cell, G4)
                                                     for k in CLASSES])
    t.notes = excluded_note(study)
    return t


def growth_inputs_table(study):
    t = Table("RMS spread of the stream each new block receives",
              "At each growth, the standard deviation over tokens of the per-token RMS of the stream a new block b "
              "starts from: hidden.(b−1) of the grown model before any step at its new depth (the growth records "
              "of diag.jsonl); for Post-Norm arms also res2.(b−1), the same stream before the norm that ends block "
              "b−1 (none for b = 1, whose input is the embedding); and the mean per-token RMS of hidden.(b−1), the "
              "scale the spread is relative to. Where new blocks are stacked, the higher one's input is the lower "
              "one's output (the same stream while the lower one's growth gate is 0; its res2 is then that "
              "block's own sum, which the gate leaves out). Mean over seeds. The same spread at the last block's "
              "output over training is the table above and rms_std.png.",
              ["arm", "placement", "step", "tokens", "depth", "new block", "hidden std", "res2 std", "hidden mean"],
              left=2)
    for a in study.arms:
        first = next((r for r in trained(a) if r.growth_inputs), None)
        if not trained(a) and grown(a):
            t.rows.append([a.name, a.first.title] + [DID_NOT_TRAIN] * 7)
        for i, g in enumerate(first.growth_inputs if first else []):
            def get(r, attr, i=i):
                if i >= len(r.growth_inputs):
                    return None
                x = r.growth_inputs[i]
                return None if attr == "res2_std" and not r.block_output_norm(x.block - 1, x.depth) else getattr(x, attr)
            t.rows.append([a.name, a.first.title, str(g.step), str(g.tokens), str(g.depth), str(g.block)]
                          + [cell(a, lambda r, at=at: get(r, at), fmt=G4)
                             for at in ("hidden_std", "res2_std", "hidden_mean")])
    t.notes = ["Arms that do not grow, or whose diag.jsonl has no growth record, have no row."] + excluded_note(study)
    return t


def layer_spreads_table(study):
    n = max((r.final.depth + 1 for r in study.runs if r.final and r.failed is None), default=0)
    t = Table("RMS spread per layer at the end",
              "Standard deviation over tokens of the per-token RMS at each layer's output (hidden.l; l = 0: the "
              "embeddings) of the final model (diag_final.json), and for Post-Norm arms at res2.l, the sum before "
              "the norm that ends block l. Mean over seeds.",
              ["arm", "point"] + [f"layer {l}" for l in range(n)], left=2)
    for a in study.arms:
        for kind in ("hidden", "res2") if a.first.output_norms else ("hidden",):
            def get(r, l, kind=kind):
                f = r.final
                if not f or l > f.depth or (kind == "res2" and not r.block_output_norm(l)):
                    return None
                return (f.res2_std if kind == "res2" else f.hidden_std)[l]
            t.rows.append([a.name, f"{kind}.l"] + [cell(a, lambda r, l=l: get(r, l), fmt=G4) for l in range(n)])
    t.notes = excluded_note(study)
    return t


def pooled(c, without=None):
    """Over the classes with tokens but `without`: (tokens, mean, population
    variance) of the per-token RMS, from each class's count, mean and std."""
    ks = [k for k in CLASSES if k != without and c.count[k] > 0]
    n = sum(c.count[k] for k in ks)
    if not n:
        return 0.0, math.nan, math.nan
    mean = sum(c.count[k] * c.mean[k] for k in ks) / n
    return n, mean, sum(c.count[k] * (c.std[k] ** 2 + (c.mean[k] - mean) ** 2) for k in ks) / n


def class_value(c, k, what):
    """What the class table shows of class k (None: all tokens): its std, its
    share of the variance over all tokens, the std over the other classes' tokens."""
    if k is not None and not c.count[k] > 0:
        return math.nan
    if what == "std":
        return c.std[k] if k is not None else math.sqrt(pooled(c)[2])
    if what == "share":
        if k is None:
            return 1.0
        n, mean, var = pooled(c)
        return c.count[k] * (c.std[k] ** 2 + (c.mean[k] - mean) ** 2) / (n * var)
    return math.nan if k is None else math.sqrt(pooled(c, k)[2])


def class_record(r, kind, when):
    """The classes at hidden.L or res2.L of the first evaluation record (when
    0) or of the last that has the point (when 1); None without one."""
    recs = [d.res2_classes if kind == "res2" else d.hidden_classes for d in r.diag or []]
    if not recs:
        return None
    if when == 0:
        return recs[0]
    return next((c for c in reversed(recs) if c is not None), None)


def class_spreads_table(study):
    t = Table("RMS spread by token class",
              "Where the spread at the last block's output sits, at the first and the last evaluation of diag.jsonl "
              "(hidden.L; Post-Norm also res2.L). Per token class: the std over its tokens of the per-token RMS; "
              "its share of the variance over all tokens (n_k (std_k² + (mean_k − mean)²) / (n var), the shares "
              "sum to 1); and the std over the tokens of the other classes, the spread without it. The all-tokens "
              "row is pooled from the classes' counts, means and stds. The last column, the spread without the "
              "class over the spread with it at the last evaluation, is one number for how much of the spread the "
              "class carries (near 0: nearly all of it; 1: none). Mean over seeds.",
              ["arm", "point", "class", "std first", "std last", "share first", "share last", "std without first",
               "std without last", "without / all, last"], left=3)
    for a in study.arms:
        for kind in ("hidden", "res2") if a.first.output_norms else ("hidden",):
            for k in (None,) + CLASSES:
                def get(r, when, what, k=k, kind=kind):
                    c = class_record(r, kind, when)
                    v = math.nan if c is None else class_value(c, k, what)
                    return v if math.isfinite(v) else None
                row = [a.name, f"{kind}.L", "all tokens" if k is None else k]
                for what, fmt in (("std", G4), ("share", "%.3f"), ("without", G4)):
                    row += [cell(a, lambda r, w=w, what=what: get(r, w, what), fmt=fmt) for w in (0, 1)]
                without, everything = over(a, lambda r: get(r, 1, "without")), over(a, lambda r: get(r, 1, "std", k=None))
                if without is None:
                    row.append(DID_NOT_TRAIN)
                else:
                    row.append(Num(without.mean / everything.mean if without.n and everything.n else None, "%.3f"))
                t.rows.append(row)
    t.notes = excluded_note(study)
    return t


# ---------------------------------------------------------------- the ablation

def ablation_blocks(arms):
    return sorted({b for a in arms for r in trained(a) if r.final and r.final.ablation for b in r.final.ablation})


def ablated(r, block, which):
    """ΔCE of removing block `block` of run r (which 0: skip, 1: norms_only)."""
    f = r.final
    if not f or not f.ablation or block not in f.ablation or (which and not r.block_output_norm(block)):
        return None
    return f.ablation[block][which]


def ablation_table(study):
    blocks = ablation_blocks(study.arms)
    t = Table("Block-removal ablation",
              "ΔCE: validation CE with one block removed minus the intact model's (diag_final.json), mean over "
              "seeds. The two removals differ for blocks with an output norm (post, deepnorm, mixln's post "
              "blocks), whose norms act on the residual stream itself:\n\n"
              "- **skip**: the block is skipped together with its norms (the block becomes the identity).\n"
              "- **norms_only** (blocks with an output norm only): the block's attention and MLP are zeroed and "
              "its norms kept, so the block still returns Norm(alpha Norm(alpha x)) (alpha 1 but for deepnorm).\n\n"
              "min over blocks: the smallest ΔCE of the row (mean over seeds) and its block: the least any one "
              "block's removal costs.",
              ["arm", "removal", "intact CE"] + [f"block {b}" for b in blocks] + ["min over blocks"], left=2)
    for a in study.arms:
        for which in (0, 1) if a.first.output_norms else (0,):
            row = [a.name, "norms_only (F zeroed, norms kept)" if which else "skip (block and norms removed)",
                   cell(a, lambda r: r.final.intact_ce if r.final and r.final.ablation is not None else None)]
            best = None
            for b in blocks:
                s = over(a, lambda r, b=b: ablated(r, b, which))
                row.append(DID_NOT_TRAIN if s is None else Num(s.mean if s.n else None, "%+.4f"))
                if s and s.n and math.isfinite(s.mean) and (best is None or s.mean < best[0]):
                    best = (s.mean, b)
            row.append(DID_NOT_TRAIN if not trained(a) else "%+.4f (block %d)" % best if best else "n/a")
            t.rows.append(row)
    t.notes = excluded_note(study)
    return t


# ---------------------------------------------------------------- runs that did not train

def failed_table(study):
    failed = [r for r in study.runs if r.failed is not None]
    if not failed:
        return None
    t = Table("Runs that did not train",
              "Runs left out of every mean and difference above, with the reason: a run that diverged (its "
              "metrics.jsonl ends with the record of the step that stopped it), a last validation CE that is "
              f"not finite, one within {PLATEAU_TEXT} of the unigram entropy of the run's validation data (or "
              "above it: the plateau of a model that predicts each token from the token frequencies alone), or a "
              "metrics.jsonl that stops before the run's last step (or before its first evaluation). Their own "
              "last values:",
              ["run", "arm", "seed", "reason", "last val CE", "unigram entropy"], left=4)
    for r in failed:
        t.rows.append([f"`{r.dir}`", r.name, str(r.seed), r.failed, Num(r.last.ce) if r.evals else "none",
                       Num(r.entropy) if r.entropy is not None else "unknown"])
    return t


PLATEAU_TEXT = f"{PLATEAU_MARGIN:g} nats"

# Every reading in the order of the report (None: the reading has nothing to show).
READINGS = (arms_table, accounting_table, pairwise_table, paired_table, interaction_table, seed_study_table,
            stage_table, rms_spread_table, class_means_table, growth_inputs_table, layer_spreads_table,
            class_spreads_table, ablation_table, failed_table)
