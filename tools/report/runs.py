"""Run directories as the report reads them: config.json, metrics.jsonl,
diag.jsonl and diag_final.json (docs/runs.md), one Run each, and the arms
they form.

Files written by older versions are read as they are: an eval record without
"stage" is in stage 1, a metrics file without "teacher_ce" beside "val_kd"
(a top-k teacher cache) has no teacher CE, a diag file without a token class
("window_start" came later) has no tokens of that class. A value written as
null (not finite when it was written) reads as NaN. Anything else that is not
what docs/runs.md says stops the report with one line naming the file, the
line and the field (ReportError).
"""
import json
import math
import os
from dataclasses import dataclass, field

PLACEMENTS = {"pre": "Pre-Norm", "post": "Post-Norm", "lns": "LNS", "sandwich": "Sandwich",
              "deepnorm": "DeepNorm", "mixln": "Mix-LN"}
CLASSES = ("window_start", "separator", "after_separator", "structural", "ordinary")
# The settings that decide what a validation CE measures: runs that differ in
# them are flagged atop the report.
EVAL_SETTINGS = ("data.val", "data.seq", "data.batch", "eval.batches", "teacher_cache.val")
MAX_DEPTH = 1 << 16
# The files of a run directory that the report reads, by what they hold
# (docs/runs.md "The files of a run directory" lists every file of a run;
# include/normgrow/rundir.h names the same).
RUN_FILES = {"config": "config.json", "metrics": "metrics.jsonl", "diag": "diag.jsonl",
             "diag_final": "diag_final.json"}


class ReportError(Exception):
    """Bad input: one line naming the file (and line, and field)."""


def run_file(run_dir, what):
    """The path of a run's file, what one of the keys of RUN_FILES."""
    return os.path.join(run_dir, RUN_FILES[what])


# ---------------------------------------------------------------- JSON fields

def dig(obj, *keys):
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def number(v, where):
    """A number, or null as NaN."""
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ReportError(f"{where}: expected a number")
    return float(v)


def whole(v, where):
    """A whole number in [0, 2^53]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 2 ** 53) or v != math.floor(v):
        raise ReportError(f"{where}: expected a whole number >= 0")
    return int(v)


def text(v, where):
    if not isinstance(v, str):
        raise ReportError(f"{where}: expected a string")
    return v


def read_text(path):
    """The file's text; a ReportError naming it when it cannot be read (UnicodeDecodeError passes)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ReportError(f"{path}: {e.strerror}") from None


def read_json(path):
    try:
        obj = json.loads(read_text(path))
    except ValueError:  # UnicodeDecodeError too
        obj = None
    if not isinstance(obj, dict):
        raise ReportError(f"{path}: not a valid JSON object")
    return obj


def read_jsonl(path):
    """(where, record) for each non-blank line; where is "path:LINE"."""
    try:
        lines = read_text(path).split("\n")
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not UTF-8 text") from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            raise ReportError(f"{where}: not a valid JSON object")
        yield where, rec


def flatten(obj, prefix=""):
    """config.json as {"loss.kd_weight": value}: objects walked, the rest leaves."""
    out = {}
    for k, v in obj.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def canonical(v):
    """A leaf as compact JSON, integral floats as integers (2.0 reads as 2)."""
    def norm(x):
        if isinstance(x, float) and x.is_integer():
            return int(x)
        if isinstance(x, list):
            return [norm(y) for y in x]
        if isinstance(x, dict):
            return {k: norm(y) for k, y in x.items()}
        return x
    return json.dumps(norm(v), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- a run

@dataclass
class Eval:
    step: int
    stage: int
    tokens: int
    ce: float
    kd: object  # None without a teacher
    teacher_ce: object  # None when the teacher did not run (a top-k cache)
    layer_tokens: float
    flops: float


@dataclass
class ClassSpread:
    """Count, mean and (population) std of the per-token RMS of each token
    class at one point of one diag record; count 0 for a class without tokens."""
    count: dict
    mean: dict
    std: dict


@dataclass
class GrowthInput:
    """The stream a new block starts from (diag.jsonl's growth records)."""
    step: int
    tokens: int
    depth: int
    block: int
    hidden_std: float
    res2_std: float  # NaN when block-1 has no output norm
    hidden_mean: float


@dataclass
class DiagEval:
    """One evaluation record of diag.jsonl, at the last block's output."""
    step: int
    tokens: int
    depth: int
    hidden_std: float
    res2_std: float  # NaN when block L has no output norm
    hidden_classes: ClassSpread
    res2_classes: object  # ClassSpread, or None


@dataclass
class Final:
    """diag_final.json: per layer l = 0..depth."""
    depth: int
    hidden_std: list  # [l]
    res2_std: list  # [l], NaN where block l has no output norm
    hidden_class_mean: list  # [l] {class: mean RMS}, NaN where absent
    res2_class_mean: list
    intact_ce: float = math.nan
    ablation: dict = None  # {block: (skip dCE, norms_only dCE or NaN)}, None without


@dataclass
class Run:
    dir: str
    config: dict
    name: str
    seed: int
    mode: str
    placement: str
    depth: int  # at the end
    mixln_post_layers: int
    schedule: str
    steps_total: int
    grown_placement: str = None  # growth.new_block_placement: new blocks' placement (hybrid growth)
    last_step: int = 0
    finished: bool = False
    diverged: str = None  # why, when its records end with a "diverged" one (at last_step)
    evals: list = field(default_factory=list)  # [Eval]
    growths: list = field(default_factory=list)  # [(step, tokens, depth after)]
    steps: list = field(default_factory=list)  # metrics step records as they are
    diag: list = None  # [DiagEval]; None without diag.jsonl
    growth_inputs: list = field(default_factory=list)  # [GrowthInput]
    final: Final = None  # None without diag_final.json
    settings: dict = field(default_factory=dict)  # flattened config.json
    # hybrid growth: {depth: placement of each block}, the first stage's from the
    # config, each grown model's from its growth record's block_placements
    block_placements: dict = field(default_factory=dict)

    def block_output_norm(self, block, depth=None):
        """Whether block `block` (from 1) of the model of depth `depth` (default
        the final one) ends in a norm: post, deepnorm, mix-LN's first
        mixln_post_layers blocks, and the post blocks of a hybrid growth."""
        if block < 1:
            return False
        if self.grown_placement is not None:
            at = self.block_placements.get(self.depth if depth is None else depth, ())
            return block <= len(at) and at[block - 1] == "post"
        if self.placement in ("post", "deepnorm"):
            return True
        return self.placement == "mixln" and block - 1 < self.mixln_post_layers

    @property
    def output_norms(self):
        """Whether some block ends in a norm (and so has res2 points)."""
        return any(self.block_output_norm(b) for b in range(1, self.depth + 1))

    @property
    def last(self):
        """The last evaluation; for a run with none (stopped before its first),
        one with a NaN CE at its last step record (its tokens, layer-tokens and
        FLOPs; 0 without a step record)."""
        if self.evals:
            return self.evals[-1]
        s = self.steps[-1] if self.steps else {}
        return Eval(step=self.last_step, stage=s.get("stage", 0), tokens=s.get("tokens", 0), ce=math.nan, kd=None,
                    teacher_ce=None, layer_tokens=s.get("layer_tokens", 0), flops=s.get("flops", 0))

    @property
    def title(self):
        if self.grown_placement is not None:
            return f"{PLACEMENTS[self.placement]}, grown {PLACEMENTS[self.grown_placement]}"
        return PLACEMENTS[self.placement]


def schedule_of(stages, path):
    """"grow 2→4→6 (LR restarts at stages 2, 3)" or "fixed 6"."""
    if not isinstance(stages, list) or not stages:
        raise ReportError(f"{path}: stages: expected a non-empty array")
    depths = [whole(dig(s, "depth"), f"{path}: stages[{i}].depth") for i, s in enumerate(stages)]
    restarts = [i + 1 for i, s in enumerate(stages) if i > 0 and dig(s, "restart_lr") is True]
    out = "fixed" if depths[0] == depths[-1] else "grow"
    out += " " + "→".join(str(d) for i, d in enumerate(depths) if i == 0 or d != depths[i - 1])
    if restarts:
        many = len(restarts) > 1
        out += f" (LR restart{'s' if many else ''} at stage{'s' if many else ''} " + \
            ", ".join(map(str, restarts)) + ")"
    return out


def is_run(path):
    """A run directory holds config.json, and that file is not a JSON object
    without "stages" (as a Hugging Face directory's is). One that cannot be
    read counts as a run's, so that reading it names the problem."""
    config = run_file(path, "config")
    if not os.path.exists(config):
        return False
    try:
        with open(config, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return True
    return not isinstance(obj, dict) or "stages" in obj


def load_config(path, run_dir):
    c = read_json(path)
    model = dig(c, "model")
    if not isinstance(model, dict):
        raise ReportError(f"{path}: model: expected an object")
    placement = text(model.get("norm_placement"), f"{path}: model.norm_placement")
    if placement not in PLACEMENTS:
        raise ReportError(f"{path}: model.norm_placement: \"{placement}\" is none of "
                          + ", ".join(f'"{p}"' for p in PLACEMENTS))
    depth = whole(model.get("num_hidden_layers"), f"{path}: model.num_hidden_layers")
    if depth > MAX_DEPTH:
        raise ReportError(f"{path}: model.num_hidden_layers: {depth} is not plausible")
    post_layers = 0
    if placement == "mixln":
        post_layers = whole(model.get("mixln_post_layers"), f"{path}: model.mixln_post_layers")
    data = dig(c, "data")
    batch = whole(dig(data, "batch"), f"{path}: data.batch")
    seq = whole(dig(data, "seq"), f"{path}: data.seq")
    if batch < 1 or seq < 1:
        raise ReportError(f"{path}: data.batch and data.seq: expected at least 1")
    stages = c.get("stages")
    schedule = schedule_of(stages, path)
    tokens = sum(whole(dig(s, "tokens"), f"{path}: stages[{i}].tokens") for i, s in enumerate(stages))
    grown = dig(c, "growth", "new_block_placement")
    if grown is not None and (grown not in ("pre", "post") or placement not in ("pre", "post")):
        raise ReportError(f"{path}: growth.new_block_placement: \"{grown}\" on a {placement} model "
                          "(expected pre or post blocks on a pre or post model)")
    first = whole(dig(stages[0], "depth"), f"{path}: stages[0].depth")
    return Run(dir=run_dir, config=c, name=text(c.get("name"), f"{path}: name"),
               seed=whole(c.get("seed"), f"{path}: seed"), mode=text(c.get("mode"), f"{path}: mode"),
               placement=placement, depth=depth, mixln_post_layers=post_layers, schedule=schedule,
               steps_total=tokens // (batch * seq), settings=flatten(c), grown_placement=grown,
               block_placements={first: (placement,) * first} if grown is not None else {})


def read_metrics(path, r):
    for where, rec in read_jsonl(path):
        event = text(rec.get("event"), f"{where}: event")
        tokens = whole(rec.get("tokens"), f"{where}: tokens")
        step = whole(rec.get("step"), f"{where}: step")
        r.last_step = step
        r.finished = False
        r.diverged = text(rec.get("why"), f"{where}: why") if event == "diverged" else None
        if event == "eval":
            stage = whole(rec["stage"], f"{where}: stage") if "stage" in rec else 0
            r.evals.append(Eval(
                step=step, stage=stage, tokens=tokens, ce=number(rec.get("val_ce"), f"{where}: val_ce"),
                kd=number(rec["val_kd"], f"{where}: val_kd") if "val_kd" in rec else None,
                teacher_ce=number(rec["teacher_ce"], f"{where}: teacher_ce") if "teacher_ce" in rec else None,
                layer_tokens=number(rec.get("layer_tokens"), f"{where}: layer_tokens"),
                flops=number(rec.get("flops"), f"{where}: flops")))
            r.finished = step == r.steps_total
        elif event == "growth":
            depth = whole(rec.get("depth"), f"{where}: depth")
            r.growths.append((step, tokens, depth))
            if r.grown_placement is not None:
                at = rec.get("block_placements")
                if not (isinstance(at, list) and len(at) == depth and all(p in ("pre", "post") for p in at)):
                    raise ReportError(f"{where}: block_placements: expected \"pre\" or \"post\" for each "
                                      f"of the {depth} blocks")
                r.block_placements[depth] = tuple(at)
        elif event == "step":
            r.steps.append(rec)


def point(rec, name, where):
    for p in rec.get("points") or []:
        if isinstance(p, dict) and p.get("name") == name:
            return p
    raise ReportError(f"{where}: no point \"{name}\"")


def point_stat(rec, name, stat, where):
    return number(dig(point(rec, name, where), "rms", "all", stat), f"{where}: {name}: rms.all.{stat}")


def class_spread(rec, name, where):
    p = point(rec, name, where)
    count, mean, std = {}, {}, {}
    for k in CLASSES:
        if dig(p, "rms", k) is None:  # a file written before the class existed
            count[k], mean[k], std[k] = 0.0, math.nan, math.nan
            continue
        count[k], mean[k], std[k] = (number(dig(p, "rms", k, s), f"{where}: {name}: rms.{k}.{s}")
                                     for s in ("count", "mean", "std"))
    return ClassSpread(count, mean, std)


def growth_inputs(rec, where, r):
    if rec.get("event") != "growth":
        raise ReportError(f"{where}: event: expected \"growth\"")
    depth = whole(rec.get("depth"), f"{where}: depth")
    step = whole(rec.get("step"), f"{where}: step")
    tokens = whole(rec.get("tokens"), f"{where}: tokens")
    fresh = rec.get("new_blocks")
    if not isinstance(fresh, list):
        raise ReportError(f"{where}: new_blocks: expected an array")
    for b in fresh:
        b = whole(b, f"{where}: new_blocks")
        if not 1 <= b <= depth:
            raise ReportError(f"{where}: new_blocks: block {b} is not in 1..{depth}")
        r.growth_inputs.append(GrowthInput(
            step, tokens, depth, b, point_stat(rec, f"hidden.{b - 1}", "std", where),
            point_stat(rec, f"res2.{b - 1}", "std", where) if r.block_output_norm(b - 1, depth) else math.nan,
            point_stat(rec, f"hidden.{b - 1}", "mean", where)))


def read_diag(path, r):
    r.diag = []
    for where, rec in read_jsonl(path):
        if "event" in rec:
            growth_inputs(rec, where, r)
            continue
        depth = whole(rec.get("depth"), f"{where}: depth")
        tokens = whole(rec.get("tokens"), f"{where}: tokens")
        step = whole(rec["step"], f"{where}: step") if rec.get("step") is not None else -1
        post = r.block_output_norm(depth, depth)
        r.diag.append(DiagEval(
            step, tokens, depth, point_stat(rec, f"hidden.{depth}", "std", where),
            point_stat(rec, f"res2.{depth}", "std", where) if post else math.nan,
            class_spread(rec, f"hidden.{depth}", where),
            class_spread(rec, f"res2.{depth}", where) if post else None))


def read_final(path, r):
    d = read_json(path)
    depth = whole(d.get("depth"), f"{path}: depth")
    if depth > MAX_DEPTH:
        raise ReportError(f"{path}: depth {depth} is not plausible")
    f = Final(depth, [], [], [], [])
    for l in range(depth + 1):
        f.hidden_std.append(point_stat(d, f"hidden.{l}", "std", path))
        f.res2_std.append(point_stat(d, f"res2.{l}", "std", path) if r.block_output_norm(l) else math.nan)
        for kind, to in (("hidden", f.hidden_class_mean), ("res2", f.res2_class_mean)):
            means = dict.fromkeys(CLASSES, math.nan)
            p = next((p for p in d.get("points") or [] if isinstance(p, dict) and p.get("name") == f"{kind}.{l}"), None)
            for k in CLASSES:
                if p is not None and dig(p, "rms", k) is not None:
                    means[k] = number(dig(p, "rms", k, "mean"), f"{path}: {kind}.{l}: rms.{k}.mean")
            to.append(means)
    a = d.get("ablation")
    if a is not None:
        f.intact_ce = number(dig(a, "intact", "ce"), f"{path}: ablation.intact.ce")
        blocks = a.get("blocks") if isinstance(a, dict) else None
        if not isinstance(blocks, list):
            raise ReportError(f"{path}: ablation.blocks: expected an array")
        f.ablation = {}
        for i, b in enumerate(blocks):
            at = f"{path}: ablation.blocks[{i}]"
            block = whole(dig(b, "block"), f"{at}.block")
            norms = number(dig(b, "norms_only", "dce"), f"{at}.norms_only.dce") \
                if r.block_output_norm(block) else math.nan
            f.ablation[block] = (number(dig(b, "skip", "dce"), f"{at}.skip.dce"), norms)
    r.final = f


def load_records(path):
    """A run's config.json and metrics.jsonl, without its diagnostics: what
    says whether and how far it trained."""
    r = load_config(run_file(path, "config"), path)
    read_metrics(run_file(path, "metrics"), r)
    return r


def load_run(path):
    r = load_records(path)
    if os.path.exists(run_file(path, "diag")):
        read_diag(run_file(path, "diag"), r)
    if os.path.exists(run_file(path, "diag_final")):
        read_final(run_file(path, "diag_final"), r)
    return r


# ---------------------------------------------------------------- arms

@dataclass
class Arm:
    """The runs of one config "name": its seeds, in the order given."""
    runs: list

    @property
    def name(self):
        return self.runs[0].name

    @property
    def first(self):
        return self.runs[0]


def config_difference(a, b):
    """The keys but run_dir and seed in which two configs differ, as
    "key (a / b), ..." (three named, then a count); "" when none."""
    keys = list(a.settings) + [k for k in b.settings if k not in a.settings]
    diffs = []
    for k in keys:
        if k in ("run_dir", "seed"):
            continue
        va = canonical(a.settings[k]) if k in a.settings else None
        vb = canonical(b.settings[k]) if k in b.settings else None
        if va != vb:
            diffs.append(f"{k} ({(va or 'absent')[:40]} / {(vb or 'absent')[:40]})")
    out = ", ".join(diffs[:3])
    return out + (f" and {len(diffs) - 3} more" if len(diffs) > 3 else "")


def group_arms(runs):
    """Runs grouped by name in the order the names first appear. The seeds of
    an arm agree in everything but seed and run_dir, and each seed is given once."""
    arms = {}
    for r in runs:
        arm = arms.setdefault(r.name, Arm([]))
        for o in arm.runs:
            if o.placement != r.placement:
                raise ReportError(f"{r.dir}: arm \"{r.name}\" is {r.placement}-norm here but "
                                  f"{o.placement}-norm in {o.dir}")
            if o.seed == r.seed:
                raise ReportError(f"{r.dir}: arm \"{r.name}\" seed {r.seed} is also in {o.dir}")
        if arm.runs:
            diff = config_difference(arm.runs[0], r)
            if diff:
                raise ReportError(f"{arm.runs[0].dir} and {r.dir} are both arm \"{r.name}\" but not seeds "
                                  f"of one config: they differ in {diff} (give one another \"name\", "
                                  "or report them apart)")
        arm.runs.append(r)
    return list(arms.values())


def eval_differences(runs):
    """The validation settings in which the runs differ."""
    return [k for k in EVAL_SETTINGS
            if len({canonical(r.settings[k]) if k in r.settings else None for r in runs}) > 1]
