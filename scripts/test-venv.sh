#!/usr/bin/env bash
# Creates (once) the virtual environment that tests needing third-party Python readers
# run them in: today TensorBoard, whose own EventAccumulator reads back the event files
# src/tensorboard writes (tensorboard_test). Test infrastructure only (never product
# code). Prints the venv's path; tests find it through BULWARK_TEST_VENV or the default
# location below, and skip (saying to run this script) when it is absent.
#
# Cache: ${BULWARK_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/test-venv}; its
# .stamp holds the pins it was made with, and a venv with other pins is remade.
set -euo pipefail
PINS="tensorboard==2.21.0"
VENV="${BULWARK_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/test-venv}"
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$PINS" ] && [ -x "$VENV/bin/python" ]; then
  echo "$VENV"
  exit 0
fi
echo "test-venv: creating $VENV with $PINS" >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
/usr/bin/python3 -m venv "$VENV"
# shellcheck disable=SC2086
"$VENV/bin/pip" install --quiet --progress-bar off $PINS >&2
"$VENV/bin/python" -c "from tensorboard.backend.event_processing import event_accumulator" \
  2>/dev/null
echo "$PINS" > "$VENV/.stamp"
echo "$VENV"
