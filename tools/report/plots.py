"""The report's figures, each with its caption. Every figure draws an arm in
the same colour, has one legend, and labels its axes with their units; means
are over the seeds of an arm that trained (trained.py), and arms none of whose
runs trained are left out (and named in the caption).
"""
import io
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from .readings import ablated, ablation_blocks, interaction, paired_differences, quadruples, trained  # noqa: E402
from .files import write_atomic  # noqa: E402
from .runs import CLASSES  # noqa: E402
from .stats import CONFIDENCE  # noqa: E402

DPI = 120
CLASS_NAMES = {"window_start": "window start", "separator": "separator", "after_separator": "after separator",
               "structural": "structural", "ordinary": "ordinary"}
CLASS_COLORS = {k: c for k, c in zip(CLASSES, ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#7f7f7f"))}


def colors(study):
    """One colour per arm, the same in every figure."""
    cmap = plt.get_cmap("tab10" if len(study.arms) <= 10 else "tab20")
    return {a.name: cmap(i % cmap.N) for i, a in enumerate(study.arms)}


def tokens_label(v, _=None):
    """200k, 1.18M: training tokens on an axis."""
    if v == 0:
        return "0"
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:g}"


def plain_log(ax, axis="y"):
    """A log axis with plain numbers (0.1, 6); minor ticks labelled too (2, 3, 5
    x 10^k; fewer the more decades the data span, none beyond four)."""
    a = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if lo > 0 and hi / lo < 1e4:
        some = (2, 3, 5) if hi / lo < 100 else (2, 5) if hi / lo < 1000 else (3,)
        a.set_minor_formatter(FuncFormatter(
            lambda v, _: f"{v:g}" if round(v / 10 ** math.floor(math.log10(v))) in some else ""))
    else:
        a.set_minor_formatter(NullFormatter())


def mean_curve(runs, get):
    """[(x, mean y, extra)] over the runs at the x values of the first run that
    every run has; get(run) -> [(x, y, extra)]."""
    series = [get(r) for r in runs]
    series = [s for s in series if s]
    if not series:
        return []
    out = []
    for x, _, extra in series[0]:
        ys = [next((y for xx, y, _ in s if xx == x), None) for s in series]
        if all(y is not None for y in ys):
            out.append((x, sum(ys) / len(ys), extra))
    return out


def failed_arms(study):
    return [a.name for a in study.arms if not trained(a)]


def left_out(study):
    names = failed_arms(study)
    return f" Not drawn (no run trained): {', '.join(names)}." if names else ""


def growth_marks(ax, study, y_frac=1.0):
    """A grey dotted line at each growth (the tokens of the growth records of
    the arms' first trained runs), labelled with the depth grown to."""
    at = {}
    for a in study.arms:
        runs = trained(a)
        for _, tokens, depth in runs[0].growths if runs else []:
            at.setdefault(tokens, set()).add(depth)
    for tokens, depths in sorted(at.items()):
        ax.axvline(tokens, color="0.45", linestyle=":", linewidth=1.2, zorder=0)
        ax.annotate("grow →" + "/".join(map(str, sorted(depths))), (tokens, y_frac),
                    xycoords=("data", "axes fraction"), xytext=(3, -12), textcoords="offset points",
                    color="0.3", fontsize="small", annotation_clip=True)
    return sorted(at)


def save(fig, out_dir, name):
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    write_atomic(os.path.join(out_dir, name), png.getvalue())


def spread_labels(ys, gap):
    """Label heights near ys (sorted ascending) at least gap apart."""
    out = []
    for y in ys:
        out.append(max(y, out[-1] + gap) if out else y)
    return out


# ---------------------------------------------------------------- figures

def val_ce(study, out_dir):
    color = colors(study)
    fig, (full, end) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [3, 2]})
    curves = {}
    for a in study.arms:
        c = mean_curve(trained(a), lambda r: [(e.tokens, e.ce, None) for e in r.evals])
        if c:
            curves[a.name] = c
    teacher = [e.teacher_ce for a in study.arms for r in trained(a) for e in r.evals[-1:] if e.teacher_ce is not None]
    order = sorted(curves, key=lambda n: curves[n][-1][1])
    for ax in (full, end):
        for name in order:
            xs, ys, _ = zip(*curves[name])
            ax.plot(xs, ys, marker=".", markersize=4, color=color[name],
                    label=f"{name}: {ys[-1]:.4f}")
        if teacher:
            ax.axhline(sum(teacher) / len(teacher), color="black", linestyle="--", linewidth=1,
                       label=f"teacher: {sum(teacher) / len(teacher):.4f}")
        ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
        ax.grid(alpha=0.3)
        ax.set_xlabel("training tokens")
    full.set_ylabel("validation CE (nats/token)")
    growth_marks(full, study)
    full.set_title("Over training")
    if curves:
        ends = [c[-1][0] for c in curves.values()]
        last, x0 = max(ends), 0.75 * min(ends)
        tail = [y for c in curves.values() for x, y, _ in c if x >= x0]
        tail += [sum(teacher) / len(teacher)] if teacher else []
        lo, hi = min(tail), max(tail)
        pad = (hi - lo) * 0.06 or 0.01
        label_x = last + 0.08 * (last - x0)
        end.set_xlim(x0 - 0.02 * (last - x0), last + 0.55 * (last - x0))
        end.set_ylim(lo - pad, hi + pad)
        growth_marks(end, study)
        finals = sorted((curves[n][-1][1], curves[n][-1][0], n) for n in curves)
        heights = spread_labels([y for y, _, _ in finals], (hi - lo + 2 * pad) * 0.05)
        for (y, x, n), h in zip(finals, heights):
            end.annotate(f"{n} {y:.4f}", (x, y), xytext=(label_x, h), textcoords="data", color=color[n],
                         fontsize="small", va="center",
                         arrowprops={"arrowstyle": "-", "color": color[n], "linewidth": 0.6, "alpha": 0.7})
    end.set_title("The end of training, each arm labelled with its final CE")
    handles, labels = full.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False,
               title="final validation CE,\nlowest first (mean over seeds)", title_fontsize="small")
    fig.suptitle("Validation cross-entropy over training (mean over seeds)")
    fig.tight_layout()
    save(fig, out_dir, "val_ce.png")
    return ("Validation CE over training tokens",
            "Validation CE (nats per token) over training tokens, one line per arm (mean over seeds at each "
            "evaluation); the legend lists the arms by final CE, lowest first. Dashed black: the teacher's CE on "
            "the same batches. Grey dotted lines: growth steps, labelled with the depth grown to. Right: the end "
            "of training (from three quarters of the shortest arm's tokens), each line labelled with its final "
            "CE." + left_out(study))


def spread_curve(r, kind):
    """[(tokens, std, depth)] at hidden.L (kind hidden) or res2.L of each evaluation."""
    if not r.diag:
        return []
    return [(d.tokens, d.hidden_std if kind == "hidden" else d.res2_std, d.depth) for d in r.diag
            if kind == "hidden" or r.block_output_norm(d.depth, d.depth)]


def rms_std(study, out_dir):
    color = colors(study)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    drawn = []
    for a in study.arms:
        for kind, style in (("hidden", "-"), ("res2", "--")):
            c = mean_curve(trained(a), lambda r: spread_curve(r, kind))
            # one segment per depth: hidden.L is another block's output after a growth
            segments = []
            for x, y, depth in c:
                if not segments or segments[-1][0] != depth:
                    segments.append((depth, []))
                segments[-1][1].append((x, y))
            for _, pts in segments:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, linestyle=style, marker=".", color=color[a.name])
            if c and a.name not in drawn:
                drawn.append(a.name)
    if drawn:
        plain_log(ax)
        growth = growth_marks(ax, study)
        ends = {e.tokens for a in study.arms for r in trained(a) for e in r.evals[-1:]}
        ticks = sorted(set(growth) | ends)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
        handles = [Line2D([], [], color=color[n], label=n) for n in drawn]
        handles += [Line2D([], [], color="black", label="hidden.L (last block's output)"),
                    Line2D([], [], color="black", linestyle="--", label="res2.L (before its norm)")]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    else:
        ax.text(0.5, 0.5, "no diag.jsonl in any run", transform=ax.transAxes, ha="center", color="gray")
    ax.set(title="Spread of the residual RMS at the last block over training (mean over seeds)",
           xlabel="training tokens (ticks: the growth steps and where the arms end)",
           ylabel="std over tokens of per-token RMS (log)")
    ax.grid(alpha=0.3, which="both")
    save(fig, out_dir, "rms_std.png")
    return ("Std of per-token RMS at hidden.L over training",
            "Standard deviation over tokens of the per-token residual RMS at hidden.L (solid; the last block's "
            "output, L the depth at that evaluation) over training tokens, per arm (mean over seeds); arms whose "
            "last block ends in a norm also at res2.L (dashed), the sum before that norm. A line breaks at each "
            "growth, where L becomes a new block; the x ticks are the growth steps and the arms' ends. Log scale." + left_out(study))


def grid_shape(n):
    """Columns and rows for n panels with at most one empty cell (kept for the legend)."""
    for cols in (3, 4, 2, 5):
        rows = math.ceil(n / cols)
        if rows * cols - n <= 1:
            return cols, rows
    return 3, math.ceil(n / 3) + (1 if n % 3 == 0 else 0)


def rms_by_class(study, out_dir):
    arms = [a for a in study.arms if any(r.final for r in trained(a))]
    n = max(len(arms), 1)
    cols, rows = grid_shape(n) if n > 1 else (1, 1)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharey=True)
    for ax, a in zip(axes.flat, arms):
        runs = [r for r in trained(a) if r.final]
        L = max(r.final.depth for r in runs)
        for kind, style in (("hidden", "-"), ("res2", "--")):
            if kind == "res2" and not a.first.output_norms:
                continue
            for k in CLASSES:
                ys = []
                for l in range(L + 1):
                    v = [(r.final.res2_class_mean if kind == "res2" else r.final.hidden_class_mean)[l][k]
                         for r in runs if l <= r.final.depth]
                    ys.append(sum(v) / len(v) if v else math.nan)
                ax.plot(range(L + 1), ys, marker=".", linestyle=style, color=CLASS_COLORS[k])
        ax.set_title(f"{a.name} ({a.first.title}, {len(runs)} seed{'s' if len(runs) > 1 else ''})", fontsize="medium")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, which="both")
    for i, ax in enumerate(axes.flat):
        if i < len(arms) and i + cols >= len(arms):  # the lowest panel of its column
            ax.set_xlabel("layer l (0: embeddings)")
    for ax in axes[:, 0]:
        ax.set_ylabel("mean per-token RMS (log)")
    if arms:
        plain_log(axes.flat[0])
    handles = [Line2D([], [], color=CLASS_COLORS[k], label=CLASS_NAMES[k]) for k in CLASSES]
    handles += [Line2D([], [], color="black", label="hidden.l"),
                Line2D([], [], color="black", linestyle="--", label="res2.l (blocks with an output norm)")]
    spare = list(axes.flat)[len(arms):]
    for ax in spare:
        ax.set_axis_off()
    if spare:
        spare[0].legend(handles=handles, loc="center", frameon=False, title="token class")
        fig.tight_layout()
    else:
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize="small", frameon=False)
    if not arms:
        axes[0, 0].text(0.5, 0.5, "no diag_final.json in any run", transform=axes[0, 0].transAxes,
                        ha="center", color="gray")
    fig.suptitle("Residual RMS per layer by token class at the end (diag_final.json, mean over seeds)", y=1.01)
    save(fig, out_dir, "rms_by_class.png")
    return ("Mean RMS per layer by token class",
            "Mean per-token RMS at hidden.l for each layer l (0: the embeddings) by token class (first position "
            "of a window, separator, first token after a separator, structural, ordinary), from diag_final.json, "
            "one panel per arm (mean over seeds), all on one y scale; blocks with an output norm also show res2.l "
            "(dashed). Log scale." + left_out(study))


def rms_readings(study, out_dir):
    color = colors(study)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    drawn = set()
    for a in study.arms:
        runs = trained(a)
        first = next((r for r in runs if r.growth_inputs), None)
        if first:
            for attr, style in (("hidden_std", "-"), ("res2_std", "--")):
                xs, ys = [], []
                for i, g in enumerate(first.growth_inputs):
                    v = [r.growth_inputs[i] for r in runs if i < len(r.growth_inputs)]
                    v = [getattr(x, attr) for x in v if attr == "hidden_std" or runs[0].block_output_norm(x.block - 1, x.depth)]
                    if v:
                        xs.append(g.step)
                        ys.append(sum(v) / len(v))
                if xs and not all(math.isnan(y) for y in ys):
                    left.plot(xs, ys, linestyle=style, marker="o", color=color[a.name])
                    drawn.add(a.name)
        finals = [r for r in runs if r.final]
        if finals:
            L = max(r.final.depth for r in finals)
            for kind, style in (("hidden", "-"), ("res2", "--")):
                ys = []
                for l in range(L + 1):
                    v = [(r.final.res2_std if kind == "res2" else r.final.hidden_std)[l] for r in finals if l <= r.final.depth]
                    ys.append(sum(v) / len(v) if v else math.nan)
                if not all(math.isnan(y) for y in ys):
                    right.plot(range(L + 1), ys, linestyle=style, marker="o", color=color[a.name])
                    drawn.add(a.name)
    for ax, empty in ((left, "no growth record in any diag.jsonl"), (right, "no diag_final.json in any run")):
        if ax.lines:
            plain_log(ax)
        else:
            ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", color="gray")
        ax.grid(alpha=0.3, which="both")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    steps = sorted({x for line in left.lines for x in line.get_xdata()})
    if steps:
        left.xaxis.set_major_locator(FixedLocator(steps))
        left.set_xlim(steps[0] - 0.1 * (steps[-1] - steps[0] or 1), steps[-1] + 0.1 * (steps[-1] - steps[0] or 1))
    left.set(title="At each new block's input, at its growth", xlabel="training step of the growth",
             ylabel="std over tokens of per-token RMS (log)")
    right.set(title="Per layer at the end", xlabel="layer l (0: embeddings)",
              ylabel="std over tokens of per-token RMS (log)")
    handles = [Line2D([], [], color=color[a.name], label=a.name) for a in study.arms if a.name in drawn]
    handles += [Line2D([], [], color="black", label="hidden"), Line2D([], [], color="black", linestyle="--",
                                                                      label="res2 (before the norm)")]
    fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.05 + 0.04 * math.ceil(len(handles) / 5), 1, 1))
    save(fig, out_dir, "rms_readings.png")
    return ("Std of per-token RMS at each new block's input and per layer",
            "Left: the standard deviation over tokens of the per-token RMS of the stream each new block starts "
            "from, at each growth (the growth records of diag.jsonl), per arm (mean over seeds). Right: the same "
            "at each layer of the final model (diag_final.json). Solid: hidden; dashed (blocks with an output "
            "norm): res2, before the norm. Log scale." + left_out(study))


def ablation(study, out_dir):
    color = colors(study)
    arms = [a for a in study.arms if any(r.final and r.final.ablation for r in trained(a))]
    blocks = ablation_blocks(arms)
    bars = []  # (arm, which, {block: mean ΔCE})
    for a in arms:
        for which in (0, 1) if a.first.output_norms else (0,):
            v = {}
            for b in blocks:
                xs = [x for x in (ablated(r, b, which) for r in trained(a)) if x is not None]
                if xs:
                    v[b] = sum(xs) / len(xs)
            bars.append((a, which, v))
    fig, ax = plt.subplots(figsize=(max(8, min(16, 0.18 * len(blocks) * len(bars) + 4)), 5.5))
    width = 0.8 / max(len(bars), 1)
    for i, (a, which, v) in enumerate(bars):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j, b in enumerate(blocks) if b in v]
        ys = [v[b] for b in blocks if b in v]
        ax.bar(xs, ys, width, color=color[a.name], hatch="///" if which else None, edgecolor="black", linewidth=0.4)
    if bars:
        ax.set_yscale("symlog", linthresh=0.01, linscale=0.6)
        ax.yaxis.set_major_locator(FixedLocator([-1, -0.1, -0.01, 0, 0.01, 0.03, 0.1, 0.3, 1, 3, 10]))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        top = max(y for _, _, v in bars for y in v.values() if math.isfinite(y))
        bottom = min(0.0, min(y for _, _, v in bars for y in v.values() if math.isfinite(y)))
        ax.set_ylim(bottom * 1.5 if bottom < 0 else 0, top * 1.6)
        ax.set_xticks(range(len(blocks)), [str(b) for b in blocks])
        ax.axhline(0, color="black", linewidth=0.8)
        handles = [Patch(facecolor=color[a.name], edgecolor="black", label=a.name) for a in arms]
        if any(which for _, which, _ in bars):
            handles += [Patch(facecolor="white", edgecolor="black", label="skip (block and norms removed)"),
                        Patch(facecolor="white", edgecolor="black", hatch="///",
                              label="norms_only (F zeroed, norms kept)")]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    else:
        ax.text(0.5, 0.5, "no ablation in any diag_final.json", transform=ax.transAxes, ha="center", color="gray")
    ax.set(title="Block-removal ablation (mean over seeds)", xlabel="removed block",
           ylabel="ΔCE vs intact model (nats/token, symmetric log)")
    ax.grid(alpha=0.3, axis="y")
    save(fig, out_dir, "ablation.png")
    return ("ΔCE per removed block",
            "ΔCE when one block is removed, per block and arm (mean over seeds): skip (plain bars) and, for blocks "
            "with an output norm, norms_only (hatched bars). The y axis is linear within ±0.01 and logarithmic "
            "beyond, so that removals costing 0.01 (a block close to an identity) and 1 nats both show."
            + left_out(study))


def paired_plot(study, out_dir):
    pct = round(CONFIDENCE * 100)
    rows = [(f"{a.name} − {b.name}", p) for a, b, p in paired_differences(study) if p is not None]
    rows += [(f"interaction, {q[0].first.title} vs Pre-Norm", interaction(q)[0]) for q in quadruples(study)]
    rows = [(n, p) for n, p in rows if p is not None]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.28 * max(len(rows), 1)))
    for i, (name, p) in enumerate(rows):
        y = len(rows) - 1 - i
        c = "black" if p.excludes_zero else "0.55"
        if p.n > 1:
            ax.plot([p.lo, p.hi], [y, y], color=c, linewidth=2)
        ax.plot([p.mean], [y], marker="o" if p.n > 1 else "x", color=c)
    ax.axvline(0, color="#d62728", linewidth=1)
    n_inter = sum(1 for n, _ in rows if n.startswith("interaction"))
    if n_inter and n_inter < len(rows):  # the interactions below a line
        ax.axhline(n_inter - 0.5, color="0.3", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [n for n, _ in reversed(rows)], fontsize="small")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set(title=f"Paired differences in final validation CE, {pct}% intervals over seeds",
           xlabel="A − B, final validation CE (nats/token; negative: A ends lower)")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(handles=[Line2D([], [], color="black", marker="o", label="interval excludes 0"),
                       Line2D([], [], color="0.55", marker="o", label="interval includes 0"),
                       Line2D([], [], color="0.55", marker="x", linestyle="", label="1 seed: no interval")],
              loc="lower center", bbox_to_anchor=(0.5, 1.0 + 0.6 / max(len(rows), 1)), ncol=3, fontsize="small",
              frameon=False)
    if not rows:
        ax.text(0.5, 0.5, "no pair of arms with a seed in common", transform=ax.transAxes, ha="center", color="gray")
    save(fig, out_dir, "paired_differences.png")
    return ("Paired differences with their intervals",
            f"Each pair of arms' paired difference in final validation CE (mean over the seeds both trained) with "
            f"its {pct}% t interval, and each placement's interaction with Pre-Norm (grown difference minus joint "
            "difference); black: the interval excludes 0; x: one seed, no interval.")


FIGURES = (("val_ce.png", val_ce), ("rms_std.png", rms_std), ("rms_by_class.png", rms_by_class),
           ("rms_readings.png", rms_readings), ("ablation.png", ablation),
           ("paired_differences.png", paired_plot))


def draw(study, out_dir):
    """Draws every figure into out_dir: [(file, alt text, caption)]."""
    return [(file, *make(study, out_dir)) for file, make in FIGURES]
