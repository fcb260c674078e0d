#!/usr/bin/env bash
# Creates (once) the virtual environment bench/peers runs the peers in: a current
# PyTorch 2.x, nvidia-resiliency-ext and TorchFT from PyPI, pinned below. Benchmark
# infrastructure only (never product code); Bulwark's SDK runs in it from the
# repository's python/ (the agent puts it on PYTHONPATH). Prints the venv's path.
#
# Cache: ${BULWARK_PEERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/peers-venv}; its
# .stamp holds the pins it was made with, and a venv with other pins is remade.
# About 5.4 GiB (torch's CUDA wheels come with it from PyPI; they load lazily and the
# benchmark never touches a GPU); ~1 min to install here.
set -euo pipefail
PINS="torch==2.15.0 nvidia-resiliency-ext==0.4.1 torchft==0.2.0 numpy==2.4.6"
VENV="${BULWARK_PEERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/peers-venv}"
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$PINS" ] && [ -x "$VENV/bin/python" ]; then
  echo "$VENV"
  exit 0
fi
echo "peers-venv: creating $VENV with $PINS" >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
/usr/bin/python3 -m venv "$VENV"
# shellcheck disable=SC2086
"$VENV/bin/pip" install --quiet --progress-bar off $PINS >&2
"$VENV/bin/python" -c "import torch, torchft, nvidia_resiliency_ext.inprocess" 2>/dev/null
echo "$PINS" > "$VENV/.stamp"
echo "$VENV"
