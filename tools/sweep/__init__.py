"""normgrow's sweep: one run config trained over a grid of settings and seeds.

    normgrow sweep RUN.json --out DIR [--set KEY=V1,V2,...]... [--seeds S1,S2,...] [--jobs J]
    PYTHONPATH=tools NG_BIN=build/normgrow python3 -m sweep ... (the same)

grid.py turns the --set options into the grid's settings and names them;
__main__.py checks every setting with `normgrow train --check`, then trains
each setting and seed in its own run directory (DIR/<setting>/seed<S>), J at a
time, keeping finished runs and resuming stopped ones; table.py reads the runs
back with the report's reader and its did-not-train rule (report.runs,
report.trained) and writes DIR/sweep.md and DIR/sweep.json.
"""
