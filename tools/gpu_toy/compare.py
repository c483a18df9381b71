#!/usr/bin/env python3
"""The toy arm on the GPU against the same arm on the CPU (tools/gpu_check.sh, step toy).

usage: compare.py CPU_METRICS FP32_METRICS BF16_METRICS   (metrics.jsonl of each run)

fp32: every step's loss and every evaluation's validation CE within 1e-3 nats of the
CPU's (the same arm, the same data and seed; only summation orders differ). bf16: the
last step's loss and the last validation CE within 3e-2 of the CPU's, relative (the
golden contract's bound on bf16 forward values). Prints an "ok" or "FAIL" line each.
"""
import json
import sys


def series(path):
    """(step losses, evaluation CEs) of a metrics.jsonl, in order."""
    steps, evals = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") == "step":
                steps.append(r["loss"])
            elif r.get("event") == "eval":
                evals.append(r["val_ce"])
    return steps, evals


def report(ok, text):
    print(("ok " if ok else "FAIL ") + text)
    return ok


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cpu, fp32, bf16 = (series(p) for p in argv[1:])
    good = True
    for name, run in (("fp32", fp32), ("bf16", bf16)):
        good &= report(len(run[0]) == len(cpu[0]) > 0 and len(run[1]) == len(cpu[1]) > 0,
                       f"toy {name}: {len(run[0])} steps and {len(run[1])} evaluations "
                       f"(cpu: {len(cpu[0])} and {len(cpu[1])})")
    if not good:
        return 1
    for what, i in (("step loss", 0), ("validation CE", 1)):
        worst = max(abs(a - b) for a, b in zip(fp32[i], cpu[i]))
        report(worst <= 1e-3, f"toy fp32: max |{what} cuda - cpu| {worst:.3g} nats over "
               f"{len(cpu[i])} (bound 1e-3)")
        rel = abs(bf16[i][-1] - cpu[i][-1]) / abs(cpu[i][-1])
        report(rel <= 3e-2, f"toy bf16: last {what} {bf16[i][-1]:.5f} vs cpu {cpu[i][-1]:.5f}, "
               f"relative {rel:.3g} (bound 3e-2)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
