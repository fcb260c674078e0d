#!/usr/bin/env bash
# `cmake --install` puts bulwark, bulwark-agent, libbulwark.so, the C header and the Python
# package where common/install_paths.h looks, and the installed tree runs a job on its
# own: the ranks import the installed package and load the installed library, not the
# source or build tree's. Usage: install_test.sh BUILD_DIR
set -euo pipefail
BUILD="$(realpath "$1")"
WORK="$(mktemp -d /tmp/bw_install_test.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
PREFIX="$WORK/prefix"
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
for f in bin/bulwark bin/bulwark-agent lib/libbulwark.so include/bulwark/bulwark_c.h \
         lib/bulwark/python/bulwark/__init__.py lib/bulwark/python/bulwark/_native/libbulwark.so \
         lib/bulwark/python/bulwark/sitecustomize_dir/sitecustomize.py; do
  [ -e "$PREFIX/$f" ] || { echo "FAIL: cmake --install did not install $f"; exit 1; }
done
if [ -e "$PREFIX/lib/bulwark/python/bulwark/tests" ]; then
  echo "FAIL: the package's tests were installed"; exit 1
fi
"$PREFIX/bin/bulwark" --version | grep -q '^bulwark ' || { echo "FAIL: --version"; exit 1; }
cd "$WORK"
cat > probe.py <<'PY'
import bulwark
from bulwark import _lib
print("package", bulwark.__file__)
print("library", _lib._find())
PY
env -u BULWARK_LIB -u BULWARK_PYTHON_DIR -u BULWARK_AGENT -u PYTHONPATH \
  XDG_STATE_HOME="$WORK/state" \
  "$PREFIX/bin/bulwark" run --python /usr/bin/python3 --quiet --progress-interval 0 \
    --run-dir "$WORK/run" --store "$WORK/bulwark.db" probe.py >"$WORK/out.txt" 2>&1 ||
  { cat "$WORK/out.txt"; echo "FAIL: the installed bulwark could not run a job"; exit 1; }
LOG="$WORK/run/logs/rank-0.log"
grep -q "package $PREFIX/lib/bulwark/python/bulwark/__init__.py" "$LOG" ||
  { cat "$LOG"; echo "FAIL: the rank did not import the installed package"; exit 1; }
grep -q "library $PREFIX/lib/libbulwark.so" "$LOG" ||
  { cat "$LOG"; echo "FAIL: the rank did not load the installed library"; exit 1; }
echo "PASS: installed into $PREFIX and ran a job from it"
