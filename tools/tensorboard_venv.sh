#!/usr/bin/env bash
# A Python venv with tensorboardX (writes the report's TensorBoard event files)
# and tensorboard (shows them: tensorboard --logdir LOGDIR), over the Debian
# packages the report uses (numpy, scipy, matplotlib). Prints the venv's python:
#   NG_PYTHON=$(tools/tensorboard_venv.sh) normgrow report RUN_DIR... --tensorboard LOGDIR
# Usage: tools/tensorboard_venv.sh [DIR] (default build/venv-tensorboard)
set -euo pipefail
dir=${1:-build/venv-tensorboard}
if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c 'import tensorboardX, tensorboard' 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$dir" >&2
  "$dir/bin/pip" install -q tensorboardX tensorboard >&2
fi
echo "$dir/bin/python"
