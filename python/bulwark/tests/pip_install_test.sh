#!/usr/bin/env bash
# `pip install ./python` works: into a fresh virtual environment (with the system's torch),
# packaging the built libbulwark.so ($1), then the installed package finds its own copy of
# the library (no BULWARK_LIB, no source tree on the path), saves and loads a Stateful
# module, and the SDK-only CMake configuration that a plain `pip install` builds with
# configures. Usage: pip_install_test.sh LIBBULWARK_SO REPO_ROOT
set -euo pipefail
LIB="$(realpath "$1")"
REPO="$(realpath "$2")"
WORK="$(mktemp -d /tmp/bw_pip_test.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$WORK/venv"
# A copy of python/ (pip writes build/ and *.egg-info next to setup.py).
cp -r "$REPO/python" "$WORK/src"
BULWARK_LIB="$LIB" "$WORK/venv/bin/pip" install --quiet --no-build-isolation --no-index "$WORK/src"
cd "$WORK"
env -u BULWARK_LIB -u PYTHONPATH BULWARK_CKPT_DIR="$WORK/ckpt" "$WORK/venv/bin/python" - <<'PY'
import os, sys
import bulwark
from bulwark import _lib, checkpoint
here = os.path.dirname(bulwark.__file__)
assert here.startswith(sys.prefix), here
assert _lib._find() == os.path.join(here, "_native", "libbulwark.so"), _lib._find()
assert os.path.isfile(os.path.join(here, "py.typed"))
import torch
m = torch.nn.Linear(3, 2)
bulwark.init()
checkpoint.save({"model": m, "step": 4}, 4)
m2 = torch.nn.Linear(3, 2)
state = {"model": m2}
info = checkpoint.load(state, 4)
assert info.step == 4 and state["step"] == 4, (info, state)
assert torch.equal(m.weight, m2.weight)
print("pip-installed SDK OK:", _lib._find())
PY
# The configuration a plain `pip install ./python` builds libbulwark.so with.
cmake -S "$REPO" -B "$WORK/sdk-build" -DBULWARK_SDK_ONLY=ON > "$WORK/cmake.log" 2>&1 ||
  { cat "$WORK/cmake.log"; exit 1; }
grep -q "bulwark" "$WORK/sdk-build/build.ninja" "$WORK/sdk-build/Makefile" 2>/dev/null ||
  { echo "the SDK-only configuration has no bulwark target"; exit 1; }
echo "SDK-only CMake configuration OK"
