"""normgrow's study report: tables and plots over run directories.

    normgrow report RUN_DIR... [--out DIR] [--force] [--tensorboard LOGDIR [--follow]]
    PYTHONPATH=tools python3 -m report RUN_DIR... (the same)

runs.py reads the run directories (config.json, metrics.jsonl, diag.jsonl,
diag_final.json; docs/runs.md) and groups them into arms (the runs of one
config "name", its seeds); trained.py marks the runs that did not train;
readings.py turns the arms into tables (one function each), stats.py holds the
statistics over seeds, seed_study.py the seed study's numbers; markdown.py
writes report.md, plots.py the figures with their captions, events.py the
TensorBoard event files.
"""
