#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, docs/testing.md) into build-fuzz with clang-19
# and runs each over its checked-in corpus.
#   scripts/fuzz.sh --seconds N [TARGET...]   CI mode: each target for N seconds
#   scripts/fuzz.sh --runs N [TARGET...]      campaign mode: each target for N inputs
#                                             (FUZZ_MAX_TOTAL_TIME=S: at most S s each)
#   scripts/fuzz.sh --build-only [TARGET...]
#   scripts/fuzz.sh --table                   the last campaign's results, as Markdown
# Every target runs with -rss_limit_mb=2048 (memory bound) and -timeout=10 (an input
# taking over 10 s is a hang). Crashes, hangs and OOMs leave their input under
# build-fuzz/artifacts/<target>/ and make this script exit 1. New inputs the fuzzer
# finds go to build-fuzz/corpus/<target>/ (a copy of fuzz/corpus/<target>/), never
# into the checked-in corpus; minimise them into it with -merge=1 (docs/testing.md).
# Logs: build-fuzz/logs/<target>.log; a campaign's: build-fuzz/campaign/<target>.log.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-fuzz}"
ALL=(fuzz_job_spec fuzz_trainjob fuzz_pytorchjob fuzz_sim_config fuzz_ckpt fuzz_agent_wire
     fuzz_sdk_datagram fuzz_controller_wire fuzz_cli)
# Longest input per target: YAML documents and CLI lines up to 16 KiB (real specs are
# 1-4 KiB), message streams 64 KiB, checkpoint file sets 256 KiB.
declare -A MAX_LEN=([fuzz_ckpt]=262144 [fuzz_agent_wire]=65536 [fuzz_sdk_datagram]=65536
                    [fuzz_controller_wire]=65536)
MODE="" N=0
# The campaign table of docs/testing.md, from build-fuzz/campaign/<target>.log.
if [ "${1:-}" = --table ]; then
  echo "| target | executions | exec/s | wall | peak RSS MB | cov / ft | crashes | timeouts |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in "${ALL[@]}"; do
    log="$BUILD_DIR/campaign/$t.log"
    [ -f "$log" ] || continue
    stat() { grep -aE "^stat::$1:" "$log" | awk '{print $2}' || true; }
    runs=$(stat number_of_executed_units)
    if [ -z "$runs" ]; then  # still running: its last status line
      runs="$(grep -aoE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true) (running)"
    fi
    rate=$(stat average_exec_per_sec)
    wall=$(grep -a "Elapsed (wall clock)" "$log" | awk '{print $NF}' || true)
    rss=$(grep -a "Maximum resident set size" "$log" | awk '{printf "%d", $NF / 1024}' || true)
    cov=$(grep -aE '^#[0-9]+.*cov:' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' |
      awk '{print $2 " / " $4}' || true)
    arts="$BUILD_DIR/artifacts/$t"
    crashes=$(ls "$arts" 2>/dev/null | grep -cE '^(crash|oom|leak)-' || true)
    timeouts=$(ls "$arts" 2>/dev/null | grep -cE '^timeout-' || true)
    printf '| `%s` | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$runs" "${rate:--}" \
      "${wall:--}" "${rss:--}" "${cov:--}" "$crashes" "$timeouts"
  done
  exit 0
fi
case "${1:-}" in
  --seconds) MODE=seconds N="$2"; shift 2 ;;
  --runs) MODE=runs N="$2"; shift 2 ;;
  --build-only) MODE=build; shift ;;
  *) echo "usage: $0 --seconds N | --runs N | --build-only [TARGET...]" >&2; exit 2 ;;
esac
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=("${ALL[@]}")

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  CC=clang-19 CXX=clang++-19 cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBULWARK_FUZZ=ON -DBULWARK_BUILD_BENCH=OFF >/dev/null
fi
# FUZZ_NO_BUILD=1 runs the binaries as built (e.g. a campaign while the dir is rebuilt).
if [ "${FUZZ_NO_BUILD:-0}" != "1" ]; then
  echo "== fuzz: building ${TARGETS[*]}"
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}"
fi
[ "$MODE" = build ] && exit 0

LOGS="$BUILD_DIR/logs"
[ "$MODE" = runs ] && LOGS="$BUILD_DIR/campaign"
mkdir -p "$LOGS"
failed=()
for t in "${TARGETS[@]}"; do
  corpus="$BUILD_DIR/corpus/$t" artifacts="$BUILD_DIR/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  [ -d "$ROOT/fuzz/corpus/$t" ] && cp -n "$ROOT/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null || true
  args=(-rss_limit_mb=2048 -timeout=10 -max_len="${MAX_LEN[$t]:-16384}"
        -artifact_prefix="$artifacts/" -print_final_stats=1)
  [ -f "$ROOT/fuzz/dict/$t.dict" ] && args+=(-dict="$ROOT/fuzz/dict/$t.dict")
  if [ "$MODE" = seconds ]; then args+=(-max_total_time="$N"); else args+=(-runs="$N"); fi
  # A campaign may also be capped in time per target (FUZZ_MAX_TOTAL_TIME seconds).
  [ "$MODE" = runs ] && [ -n "${FUZZ_MAX_TOTAL_TIME:-}" ] &&
    args+=(-max_total_time="$FUZZ_MAX_TOTAL_TIME")
  echo "== fuzz: $t ($MODE $N)"
  start=$(date +%s)
  # The targets run in a scratch directory: the agent's and the CLI's harnesses may
  # create relative paths named by the input. It is on tmpfs when there is one (the
  # CLI's checkpoint root is rewritten, with fsyncs, before each `ckpt` input: twice
  # the executions per second of a disk); FUZZ_SCRATCH overrides.
  scratch_root="${FUZZ_SCRATCH:-$BUILD_DIR/scratch}"
  [ -z "${FUZZ_SCRATCH:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
    scratch_root="/dev/shm/bw-fuzz-$(id -u)"
  scratch="$scratch_root/$t"
  mkdir -p "$scratch"
  rc=0
  # A campaign keeps no allocation stacks (ASan's malloc_context_size=0: a fifth more
  # executions per second); rerun a finding's input to get them.
  asan="${ASAN_OPTIONS:-}"
  [ "$MODE" = runs ] && [ -z "$asan" ] && asan=malloc_context_size=0
  (cd "$scratch" &&
    ASAN_OPTIONS="$asan" /usr/bin/time -v "$BUILD_DIR/fuzz/$t" "${args[@]}" "$corpus") \
    >"$LOGS/$t.log" 2>&1 || rc=$?
  end=$(date +%s)
  # A target that crashed prints no final stats: nothing to grep is no reason to stop.
  stats=$( (grep -aE '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
    "$LOGS/$t.log" || true) | sed 's/^stat:://' | tr '\n' ' ')
  cov=$(grep -aE '^#[0-9]+.*(DONE|cov:)' "$LOGS/$t.log" | tail -1 |
    grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)
  echo "   rc=$rc wall=$((end - start))s $stats $cov"
  if [ "$rc" -ne 0 ] || ls "$artifacts" | grep -qE '^(crash|timeout|oom|leak)-'; then
    echo "!! fuzz: $t FAILED (rc=$rc); artifacts in $artifacts, log $LOGS/$t.log" >&2
    grep -aE 'ERROR:|fuzz contract broken|SUMMARY' "$LOGS/$t.log" | head -5 >&2 || true
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "!! fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "== fuzz: ${#TARGETS[@]} target(s) passed"
