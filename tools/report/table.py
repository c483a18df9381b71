"""A table of the report: its section title, the text before and after it,
and cells that keep their numbers (Num) until the markdown writer prints them.
"""
import math
from dataclasses import dataclass, field

DID_NOT_TRAIN = "did not train"


@dataclass
class Num:
    """A number printed with fmt ("%.4f"); "n/a" when value is None; with a
    std, "mean ± std"; sci: 1.23e12 (printf's %.2e without the exponent's
    sign and leading zeros)."""
    value: object
    fmt: str = "%.4f"
    std: object = None
    sci: bool = False

    def __str__(self):
        if self.value is None:
            return "n/a"
        out = sci(self.value) if self.sci else self.fmt % self.value
        if self.std is not None:
            out += " ± " + self.fmt % self.std
        return out


def sci(v):
    s = "%.2e" % v
    if "e" not in s:
        return s
    mantissa, exp = s.split("e")
    return f"{mantissa}e{int(exp)}"


def mean_cell(s, fmt="%.4f"):
    """A Summary's mean, "n/a" when no run has the value."""
    return Num(s.mean if s.n else None, fmt)


def summary_cell(s, fmt="%.4f"):
    """A Summary's mean, then "± std" when several seeds have the value."""
    return Num(s.mean if s.n else None, fmt, s.std if s.n > 1 else None)


def finite_cell(s, fmt="%.4g"):
    """The mean when some run has it and it is finite, else n/a."""
    return Num(s.mean if s.n and math.isfinite(s.mean) else None, fmt)


@dataclass
class Table:
    title: str
    text: str  # the paragraph(s) before the table
    header: list
    rows: list = field(default_factory=list)  # lists of str or Num
    notes: list = field(default_factory=list)  # paragraphs after it
    left: int = 1  # the leading columns that are text (left-aligned); the others are numbers

    def cell(self, row, column):
        """The cell of the first row whose first cell is `row`, in the column
        headed `column` (for tests and readers)."""
        c = self.header.index(column)
        for r in self.rows:
            if str(r[0]) == row:
                return r[c]
        raise KeyError(row)
