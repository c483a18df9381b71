#!/usr/bin/env python3
"""The plots of `normgrow report`.

    plot_report.py DIR/report-data.json DIR

reads the series that `normgrow report` wrote (one object per arm, means over
seeds) and writes DIR/val_ce.png, DIR/rms_std.png, DIR/rms_by_class.png,
DIR/rms_readings.png and DIR/ablation.png. Exits with status 3 (printing why) when matplotlib is not
installed, so that the report is written without plots; any other failure is
an error.
"""
import json
import math
import os
import sys

SKIPPED = 3

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, MaxNLocator
except ImportError as e:
    print(f"matplotlib is not installed for {sys.executable} ({e})", file=sys.stderr)
    sys.exit(SKIPPED)

CLASSES = {
    "window_start": "window start",
    "separator": "separator",
    "after_separator": "after separator",
    "structural": "structural",
    "ordinary": "ordinary",
}
DPI = 120


def values(xs):
    """JSON nulls (values that were not finite) as NaN, which matplotlib leaves out."""
    return [math.nan if v is None else v for v in xs]


def label(arm):
    n = len(arm["seeds"])
    return f'{arm["name"]} ({arm["placement"]}-norm, {n} seed{"s" if n > 1 else ""})'


def colors(arms):
    return {a["name"]: f"C{i % 10}" for i, a in enumerate(arms)}


def no_data(ax, what):
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", color="gray")


def legend_below(ax, handles=None, labels=None, ncol=2):
    """The legend under the axes, clear of the lines and the growth labels."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=ncol,
              fontsize="small", frameon=False)


def log_y(ax):
    """A log y axis labelled with plain numbers (0.1, 6; not 10^-1, 6x10^0); when
    the data span under two decades, also 2, 3 and 5 times each power of ten."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    lo, hi = ax.get_ylim()
    if hi / lo < 100:
        def some(v, _):
            return f"{v:g}" if round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5) else ""
        ax.yaxis.set_minor_formatter(FuncFormatter(some))


def save(fig, out_dir, name):
    fig.savefig(os.path.join(out_dir, name), dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def plot_val_ce(arms, out_dir):
    fig, ax = plt.subplots(figsize=(8, 5))
    color = colors(arms)
    for i, a in enumerate(arms):
        s = a["val_ce"]
        ax.plot(s["tokens"], values(s["mean"]), marker=".", color=color[a["name"]], label=label(a))
        g = a["growth"]
        for t, depth in zip(g["tokens"], g["depth"]):
            ax.axvline(t, color=color[a["name"]], linestyle=":", linewidth=1.2)
            ax.annotate(f"→{depth:g}", (t, 1), xycoords=("data", "axes fraction"), xytext=(2, -12 - 10 * i),
                        textcoords="offset points", color=color[a["name"]], fontsize="small")
    handles, labels = ax.get_legend_handles_labels()
    if any(a["growth"]["tokens"] for a in arms):
        handles.append(Line2D([], [], color="gray", linestyle=":"))
        labels.append("growth to →depth (arm's colour)")
    legend_below(ax, handles, labels)
    ax.set(title="Validation cross-entropy over training (mean over seeds)",
           xlabel="training tokens", ylabel="validation CE (nats/token)")
    ax.grid(alpha=0.3)
    save(fig, out_dir, "val_ce.png")


def plot_rms_std(arms, out_dir):
    fig, ax = plt.subplots(figsize=(8, 5))
    color = colors(arms)
    drawn = False
    for a in arms:
        rms = a["rms_std"]
        for kind, style in (("hidden", "-"), ("res2", "--")):
            s = rms.get(kind)
            if s and s["tokens"]:
                ax.plot(s["tokens"], values(s["mean"]), linestyle=style, marker=".",
                        color=color[a["name"]], label=f'{label(a)}: {kind}.L')
                drawn = True
    if drawn:
        log_y(ax)
        legend_below(ax)
    else:
        no_data(ax, "no diag.jsonl in any run")
    ax.set(title="Spread of the residual RMS at the last block (hidden.L; res2.L before the last norm)",
           xlabel="training tokens", ylabel="std over tokens of per-token RMS")
    ax.grid(alpha=0.3, which="both")
    save(fig, out_dir, "rms_std.png")


def plot_rms_by_class(arms, out_dir):
    cols = min(len(arms), 3)
    rows = math.ceil(len(arms) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax, a in zip(axes.flat, arms):
        ax.set(title=label(a), xlabel="layer l (0: embeddings)", ylabel="mean per-token RMS")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        by = a["rms_by_class"]
        if by is None:
            no_data(ax, "no diag_final.json")
            continue
        for i, key in enumerate(CLASSES):
            for kind, style in (("hidden", "-"), ("res2", "--")):
                if kind in by:
                    ax.plot(by["layers"], values(by[kind][key]), marker=".", linestyle=style,
                            color=f"C{i}")
        log_y(ax)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(arms):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=f"C{i}", label=name) for i, name in enumerate(CLASSES.values())]
    handles += [Line2D([], [], color="black", label="hidden.l"),
                Line2D([], [], color="black", linestyle="--", label="res2.l (blocks with an output norm)")]
    fig.suptitle("Residual RMS per layer by token class (diag_final.json, mean over seeds)")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize="small")
    save(fig, out_dir, "rms_by_class.png")


def plot_rms_readings(arms, out_dir):
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    color = colors(arms)
    for ax, key, x_key, what in ((left, "rms_growth_inputs", "step", "growth records of diag.jsonl"),
                                 (right, "rms_layers", "layers", "diag_final.json")):
        drawn = False
        for a in arms:
            s = a.get(key)
            if not s:
                continue
            for kind, style in (("hidden", "-"), ("res2", "--")):
                if kind in s:
                    ax.plot(s[x_key], values(s[kind]), linestyle=style, marker="o", color=color[a["name"]],
                            label=f"{label(a)}: {kind}")
                    drawn = True
        if drawn:
            log_y(ax)
            legend_below(ax, ncol=1)
        else:
            no_data(ax, f"no {what} in any run")
        ax.grid(alpha=0.3, which="both")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set(title="At each new block's input, at its growth", xlabel="training step of the growth",
             ylabel="std over tokens of per-token RMS")
    right.set(title="Per layer at the end", xlabel="layer l (0: embeddings)",
              ylabel="std over tokens of per-token RMS")
    save(fig, out_dir, "rms_readings.png")


def plot_ablation(arms, out_dir):
    bars = []  # (label, color, hatch, {block: dce})
    color = colors(arms)
    for a in arms:
        ab = a["ablation"]
        if ab is None:
            continue
        for kind, hatch in (("skip", None), ("norms_only", "//")):
            if kind in ab:
                bars.append((f"{a['name']}: {kind}", color[a["name"]], hatch,
                             dict(zip(ab["blocks"], values(ab[kind])))))
    fig, ax = plt.subplots(figsize=(8, 6))
    blocks = sorted({b for _, _, _, v in bars for b in v})
    width = 0.8 / max(len(bars), 1)
    for i, (name, c, hatch, v) in enumerate(bars):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j, b in enumerate(blocks) if b in v]
        ys = [v[b] for b in blocks if b in v]
        ax.bar(xs, ys, width, color=c, hatch=hatch, edgecolor="black", linewidth=0.5, label=name)
    if bars:
        ax.set_xticks(range(len(blocks)), [str(b) for b in blocks])
        ax.axhline(0, color="black", linewidth=0.8)
        legend_below(ax)
    else:
        no_data(ax, "no ablation in any diag_final.json")
    ax.set(title="Block-removal ablation (mean over seeds)", xlabel="removed block",
           ylabel="ΔCE vs intact model (nats/token)")
    ax.grid(alpha=0.3, axis="y")
    save(fig, out_dir, "ablation.png")


def main(argv):
    if len(argv) != 3:
        print("usage: plot_report.py REPORT_DATA.json OUT_DIR", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        arms = json.load(f)["arms"]
    for plot in (plot_val_ce, plot_rms_std, plot_rms_by_class, plot_rms_readings, plot_ablation):
        plot(arms, argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
