"""Statistics over seeds: the mean and sample standard deviation of a value
over an arm's runs, and paired differences between arms with a t interval.
"""
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95


@dataclass
class Summary:
    mean: float  # NaN when n is 0
    std: float  # sample (n - 1), NaN below 2 values
    n: int  # runs that have the value


def summary(values):
    """Mean and sample std of the values that exist (None: the run has none).
    A NaN value (not finite in its file) makes both NaN."""
    have = np.array([v for v in values if v is not None], dtype=float)
    if have.size == 0:
        return Summary(math.nan, math.nan, 0)
    return Summary(float(have.mean()), float(have.std(ddof=1)) if have.size > 1 else math.nan, int(have.size))


def lowest_mean(settings):
    """The calibration rule (docs/assumptions.md, "The learning rates, calibrated per placement"):
    of settings {key: [(ce, failed)] over its runs}, the key of the lowest mean
    CE among the settings all of whose runs trained (failed None); None when
    no setting qualifies. Ties go to the first key in the dict's order."""
    whole = {k: [ce for ce, _ in runs] for k, runs in settings.items()
             if runs and all(failed is None for _, failed in runs)}
    return min(whole, key=lambda k: summary(whole[k]).mean) if whole else None


@dataclass
class Paired:
    """Per-seed differences a(seed) - b(seed) over the seeds both have."""
    seeds: list
    diffs: list
    mean: float
    se: float  # standard error of the mean: std (n - 1) / sqrt(n); NaN below 2 seeds
    lo: float  # the CONFIDENCE interval of the mean (t over n - 1 degrees of freedom)
    hi: float

    @property
    def n(self):
        return len(self.seeds)

    @property
    def excludes_zero(self):
        return self.n > 1 and (self.lo > 0 or self.hi < 0)


def paired(a, b):
    """a, b: {seed: value}. None when they have no seed in common."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    d = np.array([a[s] - b[s] for s in seeds], dtype=float)
    mean = float(d.mean())
    if d.size < 2:
        return Paired(seeds, d.tolist(), mean, math.nan, math.nan, math.nan)
    se = float(d.std(ddof=1) / math.sqrt(d.size))
    half = float(sps.t.ppf(0.5 + CONFIDENCE / 2, d.size - 1)) * se
    return Paired(seeds, d.tolist(), mean, se, mean - half, mean + half)
