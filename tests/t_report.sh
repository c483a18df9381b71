#!/usr/bin/env bash
# The report (tools/report) on small run directories with hand-worked readings,
# and `normgrow report` itself: tests/test_report.py, one ok/FAIL line per check.
# Its TensorBoard check runs where build/venv-tensorboard (tools/tensorboard_venv.sh)
# or $NG_PYTHON has tensorboardX, and says "skip" elsewhere.
set -u
root=${NG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${NG_BIN:-$root/build/normgrow}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" "$root/tests/test_report.py" "$bin"
