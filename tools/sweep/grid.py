"""The grid of a sweep: --set KEY=V1,V2,... options, their settings and names.

A value list is split at the commas outside brackets, braces and double
quotes, so that a JSON value such as [0, 2] is one value. A setting is one
value of every key, in the order the --set options were given; the grid holds
every combination, the first key's values changing slowest.
"""
import itertools

# Keys the sweep sets itself, for each run.
OWN_KEYS = {"name": "the sweep names each run after its setting",
            "seed": "use --seeds", "run_dir": "each run's directory is OUT/<setting>/seed<S>"}
MAX_LABEL = 200  # characters of a setting's directory name


class GridError(Exception):
    pass


def split_values(text):
    """The values of "V1,V2,..." (commas inside [], {} or "" do not split)."""
    values, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if quoted:
            quoted = ch != '"' or text[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return values


def parse_set(arg):
    """(key, [values]) of one --set KEY=V1,V2,..."""
    key, eq, rest = arg.partition("=")
    if not eq or not key:
        raise GridError(f"--set {arg}: expected KEY=V1,V2,... (a key such as lr.peak)")
    if key in OWN_KEYS:
        raise GridError(f"--set {arg}: {key} is the sweep's own ({OWN_KEYS[key]})")
    values = split_values(rest)
    if any(v == "" for v in values):
        raise GridError(f"--set {arg}: an empty value")
    if len(set(values)) != len(values):
        raise GridError(f"--set {arg}: a value given twice")
    return key, values


def parse_sets(args):
    """[(key, [values])] of every --set; a key may be given once."""
    sets = [parse_set(a) for a in args]
    keys = [k for k, _ in sets]
    for k in keys:
        if keys.count(k) > 1:
            raise GridError(f"--set {k}: given more than once (list its values in one --set)")
    return sets


def settings(sets):
    """Every setting of the grid: a tuple of (key, value), in grid order."""
    keys = [k for k, _ in sets]
    return [tuple(zip(keys, combo)) for combo in itertools.product(*(v for _, v in sets))]


def label(setting):
    """The setting's name, its directory under the sweep's output: "k=v,k=v"
    ("config" when the grid sets nothing); a '/' in a value is written %2F."""
    if not setting:
        return "config"
    text = ",".join(f"{k}={v}" for k, v in setting).replace("%", "%25").replace("/", "%2F")
    if len(text) > MAX_LABEL or text.startswith("."):
        raise GridError(f"setting {text[:60]}...: too long for a directory name (at most {MAX_LABEL} characters)")
    return text


def parse_seeds(text):
    """The seeds of "S1,S2,...": distinct integers >= 0."""
    parts = text.split(",")
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise GridError(f"--seeds {text}: expected seeds >= 0, comma-separated (1,2,3)")
    seeds = [int(p) for p in parts]
    if len(set(seeds)) != len(seeds):
        raise GridError(f"--seeds {text}: a seed given twice")
    return seeds
