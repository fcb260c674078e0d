#!/usr/bin/env bash
# dashboard_browser_test: the web dashboard (ui/, docs/monitoring.md "Web dashboard") in a
# real headless Chromium against a real `bulwark run --ui` job of the tiny trainer with a
# crash and a hang injected: dashboard.test.mjs checks the live view, then the finished one.
#
#   tests/ui/run_dashboard_test.sh BUILD_DIR
#
# Needs node, /usr/bin/chromium (or $CHROMIUM) and ui/node_modules (scripts/setup.sh).
# UPDATE_SCREENSHOT=1 also writes docs/images/dashboard.png. Every process it starts is
# stopped and reaped on any exit. The scratch directory is kept when the test fails and
# removed when it passes; the screenshot is then BUILD_DIR/ui-test/dashboard.png.
set -euo pipefail
BUILD="$(cd "${1:?usage: run_dashboard_test.sh BUILD_DIR}" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BULWARK="$BUILD/bin/bulwark"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
export CHROMIUM

fail() { echo "dashboard_browser_test: $*" >&2; exit 1; }
[ -x "$BULWARK" ] || fail "$BULWARK not built (cmake --build $BUILD --target bulwark_cli)"
[ -x "$BUILD/bin/bulwark-agent" ] || fail "bulwark-agent not built"
command -v node >/dev/null || fail "node not found (scripts/setup.sh installs it)"
[ -x "$CHROMIUM" ] || fail "$CHROMIUM not found: apt-get install chromium (scripts/setup.sh)"
[ -f "$ROOT/ui/node_modules/playwright-core/package.json" ] ||
  fail "playwright-core missing: npm ci --prefix $ROOT/ui (scripts/setup.sh)"

DIR="$(mktemp -d "${TMPDIR:-/tmp}/bw-ui-test.XXXXXX")"
TAG="bw-ui-test-$$-$RANDOM"  # in the environment of every process of the job
RUN_PID=""
NODE_PID=""
OK=0

# Seconds since the epoch, fractional, for deadlines.
now() { date +%s.%N; }
before() { awk -v a="$(now)" -v b="$1" 'BEGIN { exit !(a < b) }'; }
deadline_in() { awk -v a="$(now)" -v s="$1" 'BEGIN { printf "%.3f", a + s }'; }

# Waits up to $2 seconds for process $1 to exit; 0 when it did.
wait_gone() {
  local until
  until="$(deadline_in "$2")"
  while kill -0 "$1" 2>/dev/null; do
    before "$until" || return 1
    sleep 0.1
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID" 2>/dev/null || true  # playwright closes its browser
    wait_gone "$NODE_PID" 10 || kill -KILL "$NODE_PID" 2>/dev/null || true
  fi
  [ -n "$NODE_PID" ] && wait "$NODE_PID" 2>/dev/null || true
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill -TERM "$RUN_PID" 2>/dev/null || true  # bulwark cancels the job and reaps it
    wait_gone "$RUN_PID" 30 || kill -KILL -- "-$RUN_PID" 2>/dev/null || true
  fi
  [ -n "$RUN_PID" ] && wait "$RUN_PID" 2>/dev/null || true
  # Anything of the job still alive (it carries $TAG in its environment): by pid.
  local p
  for p in /proc/[0-9]*; do
    p="${p#/proc/}"
    [ "$p" = "$$" ] && continue
    if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "BW_UI_TEST_TAG=$TAG"; then
      echo "dashboard_browser_test: killing leftover pid $p" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  if [ "$OK" = 1 ] && [ "$rc" = 0 ]; then
    mkdir -p "$BUILD/ui-test"
    mv -f "$DIR/dashboard.png" "$BUILD/ui-test/dashboard.png" 2>/dev/null || true
    rm -rf "$DIR"
    echo "screenshot: $BUILD/ui-test/dashboard.png"
  else
    echo "dashboard_browser_test: FAILED; files kept in $DIR" >&2
    for f in run.err run.out; do
      [ -f "$DIR/$f" ] && { echo "--- tail of $f" >&2; tail -n 40 "$DIR/$f" >&2; }
    done
    [ "$rc" = 0 ] && rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The job: 2 nodes x 2 ranks of the tiny trainer for ~35 s, a spare node, a crash at step
# 100 and a hang at step 300 (localised; stacks captured), a price so cost shows.
ENV_EXTRA=""
if [ -n "${BW_TEST_PRELOAD:-}" ]; then  # ASan build: Python needs the runtime preloaded
  ENV_EXTRA=", LD_PRELOAD: \"$BW_TEST_PRELOAD\""
  ENV_EXTRA+=", ASAN_OPTIONS: \"detect_leaks=0:verify_asan_link_order=0\""
fi
cat >"$DIR/job.yaml" <<EOF
name: ui-test
nodes: 2
procsPerNode: 2
command: ["/usr/bin/python3", "$ROOT/tests/trainers/tiny_trainer.py"]
args: ["--steps", "600"]
env: {TINY_STEP_TIME: "0.05", TINY_SAVE_EVERY_STEP: "1"$ENV_EXTRA}
checkpoint: {intervalSteps: 20, memorySlots: 4}
faultPolicy: {hangTimeout: {floorSeconds: 2}, spareNodes: 1}
monitoring: {pricePerGpuHour: 2.5}
chaos: [{kind: kill_rank, atStep: 100, rank: 1}, {kind: hang_rank, atStep: 300, rank: 2}]
EOF

# Its own session (so its process group can be killed whole as a last resort), its own
# store registry. --metrics-linger keeps the port up after the end until the test has
# read the finished view and scraped /metrics once.
echo "== bulwark run $DIR/job.yaml --ui"
BW_UI_TEST_TAG="$TAG" XDG_STATE_HOME="$DIR/state" BULWARK_HOME="$DIR/home" \
  setsid "$BULWARK" run "$DIR/job.yaml" --ui --metrics-addr 127.0.0.1:0 \
  --metrics-linger 120 >"$DIR/run.out" 2>"$DIR/run.err" </dev/null &
RUN_PID=$!

URL=""
until_t="$(deadline_in 60)"
while [ -z "$URL" ]; do
  URL="$(sed -n 's/^\[bulwark\] dashboard: \(http:[^ ]*\)$/\1/p' "$DIR/run.err" | head -n 1)"
  [ -n "$URL" ] && break
  kill -0 "$RUN_PID" 2>/dev/null || fail "bulwark run exited before serving the dashboard"
  before "$until_t" || fail "no dashboard URL from bulwark run within 60 s"
  sleep 0.05
done
echo "== dashboard at $URL"

node "$ROOT/tests/ui/dashboard.test.mjs" "$URL" "$DIR" &
NODE_PID=$!
set +e
wait "$NODE_PID"
NODE_RC=$?
set -e
NODE_PID=""
[ "$NODE_RC" = 0 ] || fail "the browser test failed (exit $NODE_RC)"

# The test scraped /metrics once the job ended, so the run exits now.
wait_gone "$RUN_PID" 60 || fail "bulwark run did not exit within 60 s of the test's end"
set +e
wait "$RUN_PID"
RUN_RC=$?
set -e
RUN_PID=""
[ "$RUN_RC" = 0 ] || fail "bulwark run exited $RUN_RC"
grep -q 'Succeeded' "$DIR/run.err" || fail "the job did not succeed"
echo "== bulwark run exited 0; $(grep -c 'FaultDetected' "$DIR/run.err") faults handled"
OK=1
