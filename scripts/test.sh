#!/usr/bin/env bash
# README command (2): install, build and pass the whole test suite, then the same
# tests again under ASan+UBSan.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
# Python test tools the tests read Bulwark's output with (TensorBoard's own event-file
# reader), pinned, in a venv outside the repository (once per machine; ~30 s).
echo "== test venv (scripts/test-venv.sh)"
BULWARK_TEST_VENV="$("$ROOT/scripts/test-venv.sh")"
export BULWARK_TEST_VENV
# The real Kubernetes control plane the operator's tests run against, built from the Go
# module proxy into a cache outside the repository, with Kueue for the operator's
# gang: kueue tests (once per machine; ~25 min fresh on 2 busy cores). When the cache
# lacks it, it is built in the background at nice 10, so it takes the CPU that the build
# and the tests without label k8s leave idle (most e2e tests wait on processes); the
# k8s-labelled tests run once it is there.
# Its log: build/k8s-control-plane.log.
mkdir -p "$ROOT/build"
CP_LOG="$ROOT/build/k8s-control-plane.log"
CP_PID=""
if BULWARK_K8S_BIN="$("$ROOT/scripts/k8s-control-plane.sh" --print --kueue 2>/dev/null)"; then
  echo "== Kubernetes control plane and Kueue: cached in $BULWARK_K8S_BIN"
else
  echo "== Kubernetes control plane and Kueue: building in the background (log $CP_LOG)"
  set -m
  nice -n 10 "$ROOT/scripts/k8s-control-plane.sh" --kueue </dev/null >"$CP_LOG.out" 2>"$CP_LOG" &
  CP_PID=$!
  set +m
fi
# Background builds (the control plane above, the ASan+UBSan tree below) run in process
# groups of their own; an exit before they finished (a failed build or test, ^C) stops
# each whole, go, ninja and their compilers included.
ASAN_PID=""
trap 'for p in $CP_PID $ASAN_PID; do kill -TERM -- "-$p" 2>/dev/null; done; true' EXIT
# wait_background VAR WHAT LOG LINES: waits for the background build whose process id
# is in the variable VAR, then empties VAR (the EXIT trap then leaves it alone); when it
# failed, prints the last LINES lines of LOG, naming it WHAT, and exits 1.
wait_background() {
  local pid="${!1}" rc=0
  wait "$pid" || rc=$?
  printf -v "$1" '%s' ""
  if [ "$rc" -ne 0 ]; then
    echo "!! $2 failed (exit $rc); its log:" >&2
    tail -n "$4" "$3" >&2
    exit 1
  fi
}
# wait_control_plane: returns once the background build (if any) finished; exits with
# its log when it failed.
wait_control_plane() {
  [ -n "$CP_PID" ] || return 0
  echo "== waiting for the Kubernetes control plane (log $CP_LOG)"
  wait_background CP_PID "scripts/k8s-control-plane.sh --kueue" "$CP_LOG" 30
  BULWARK_K8S_BIN="$(tail -n 1 "$CP_LOG.out")"
  grep -h "built in\|ready in" "$CP_LOG" || true
}
export BULWARK_K8S_BIN
JOBS="$(nproc)"
echo "== build (RelWithDebInfo)"
BUILD_DIR="$ROOT/build" "$ROOT/scripts/build.sh"
# The ASan+UBSan tree builds in the background while the tests run, under SCHED_IDLE
# (chrt --idle: CPU time only when nothing else wants it, so it neither slows the tests
# nor the control plane's build): the tests leave most of the two cores idle waiting on
# processes. Its log: build/asan-build.log.
ASAN_LOG="$ROOT/build/asan-build.log"
if [ "${BULWARK_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== build (ASan+UBSan): in the background (log $ASAN_LOG)"
  set -m
  BUILD_DIR="$ROOT/build-asan" BUILD_TYPE=Debug chrt --idle 0 "$ROOT/scripts/build.sh" \
    -DBULWARK_SANITIZE=ON -DBULWARK_BUILD_BENCH=OFF </dev/null >"$ASAN_LOG" 2>&1 &
  ASAN_PID=$!
  set +m
fi
# A failing test does not end the run: every group of tests runs, and the run fails at
# the end naming the groups that failed.
FAILED=()
echo "== tests (all but label k8s)"
(cd "$ROOT/build" && ctest --output-on-failure -j"$JOBS" --timeout 600 -LE k8s) ||
  FAILED+=("tests (all but label k8s)")
wait_control_plane
export BULWARK_K8S_BIN
echo "== tests with label k8s (the real control plane)"
(cd "$ROOT/build" && ctest --output-on-failure -j"$JOBS" --timeout 600 -L k8s) ||
  FAILED+=("tests with label k8s")
if [ "${BULWARK_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== waiting for the ASan+UBSan build (log $ASAN_LOG)"
  wait_background ASAN_PID "the ASan+UBSan build" "$ASAN_LOG" 40
  echo "== tests under ASan+UBSan (and LeakSanitizer)"
  # LeakSanitizer runs at each test process's exit, and a leak there fails the test; the
  # bulwark processes a test starts inherit it (a leak makes their exit status 23).
  # Python trainers, not instrumented, get detect_leaks=0 from the tests that start them.
  (cd "$ROOT/build-asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j"$JOBS" --timeout 900 -LE no_sanitize) ||
    FAILED+=("tests under ASan+UBSan")
fi
# The fuzz targets already ran above in both builds, as ctest's <target>_replay (corpus +
# seeded mutations, docs/testing.md "CI mode"). Coverage-guided, with libFuzzer, each
# 10 s (103 s for the nine): opt-in, since its clang build (503 s measured with ccache
# on 2 busy cores) does not fit in command (2)'s 30 minutes next to the two builds.
if [ "${BULWARK_FUZZ_CI:-0}" = "1" ]; then
  echo "== fuzz targets, 10 s each (scripts/fuzz.sh --seconds 10)"
  "$ROOT/scripts/fuzz.sh" --seconds 10
fi
if [ "${#FAILED[@]}" -ne 0 ]; then
  printf '!! failed: %s\n' "${FAILED[@]}" >&2
  exit 1
fi
