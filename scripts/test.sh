#!/usr/bin/env bash
# README command (2): install, build and pass the whole test suite, then the same
# tests again under ASan+UBSan.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
# The real Kubernetes control plane the operator's tests run against, built from the Go
# module proxy into a cache outside the repository (once per machine; ~10 min fresh),
# with Kueue for the operator's gang: kueue tests (~8 min more, once).
echo "== Kubernetes control plane and Kueue (scripts/k8s-control-plane.sh --kueue)"
BULWARK_K8S_BIN="$("$ROOT/scripts/k8s-control-plane.sh" --kueue)"
export BULWARK_K8S_BIN
# Python test tools the tests read Bulwark's output with (TensorBoard's own event-file
# reader), pinned, in a venv outside the repository (once per machine; ~30 s).
echo "== test venv (scripts/test-venv.sh)"
BULWARK_TEST_VENV="$("$ROOT/scripts/test-venv.sh")"
export BULWARK_TEST_VENV
JOBS="$(nproc)"
echo "== build (RelWithDebInfo)"
BUILD_DIR="$ROOT/build" "$ROOT/scripts/build.sh"
echo "== tests"
(cd "$ROOT/build" && ctest --output-on-failure -j"$JOBS" --timeout 600)
if [ "${BULWARK_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== build (ASan+UBSan)"
  BUILD_DIR="$ROOT/build-asan" BUILD_TYPE=Debug "$ROOT/scripts/build.sh" -DBULWARK_SANITIZE=ON -DBULWARK_BUILD_BENCH=OFF
  echo "== tests under ASan+UBSan"
  (cd "$ROOT/build-asan" && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j"$JOBS" --timeout 900 -LE no_sanitize)
fi
# The fuzz targets already ran above in both builds, as ctest's <target>_replay (corpus +
# seeded mutations, docs/testing.md "CI mode"). Coverage-guided, with libFuzzer, each
# 10 s (103 s for the nine): opt-in, since its clang build (503 s measured with ccache
# on 2 busy cores) does not fit in command (2)'s 30 minutes next to the two builds.
if [ "${BULWARK_FUZZ_CI:-0}" = "1" ]; then
  echo "== fuzz targets, 10 s each (scripts/fuzz.sh --seconds 10)"
  "$ROOT/scripts/fuzz.sh" --seconds 10
fi
