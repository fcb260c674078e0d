#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, docs/testing.md) into build-fuzz with clang-19
# and runs each over its checked-in corpus.
#   scripts/fuzz.sh --seconds N [TARGET...]   CI mode: each target for N seconds
#   scripts/fuzz.sh --runs N [TARGET...]      campaign mode: each target for N inputs
#                                             (FUZZ_MAX_TOTAL_TIME=S: at most S s each)
#   scripts/fuzz.sh --build-only [TARGET...]
#   scripts/fuzz.sh --campaign N [TARGET...]  campaign in segments: each target until its
#                                             segments sum to N inputs (see below)
#   scripts/fuzz.sh --table                   the campaign's results, as Markdown
# A campaign runs in segments of FUZZ_SEGMENT inputs (default 1,000,000), each a fresh
# libFuzzer process resuming from the corpus the earlier ones grew, its log kept as
# build-fuzz/campaign/<target>/seg-NNN.log. A segment that was killed (the machine or the
# session ended) counts the inputs its last status line reports, and is marked so in the
# table ("unfinished": killed, or still running); rerunning --campaign carries on.
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
# Executions a segment log records: its final stats, else its last status line (killed).
seg_runs() {
  local r
  r=$(grep -aE '^stat::number_of_executed_units:' "$1" | awk '{print $2}' || true)
  [ -n "$r" ] && { echo "$r"; return; }
  r=$(grep -aoE '^#[0-9]+' "$1" | tail -1 | tr -d '#' || true)
  echo "${r:-0}"
}
seg_done() { grep -qaE '^stat::number_of_executed_units:' "$1"; }
if [ "${1:-}" = --table ]; then
  echo "| target | executions | exec/s | wall | peak RSS MB | cov / ft | crashes | timeouts |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in "${ALL[@]}"; do
    segs=("$BUILD_DIR/campaign/$t"/seg-*.log)
    if [ -f "${segs[0]}" ]; then  # a segmented campaign: sums over its segments
      total=0 secs=0 killed=0 rss=0
      for g in "${segs[@]}"; do
        total=$((total + $(seg_runs "$g")))
        seg_done "$g" || killed=$((killed + 1))
        w=$(grep -aoE 'Done [0-9]+ runs in [0-9]+ second' "$g" | awk '{print $5}' || true)
        secs=$((secs + ${w:-0}))
        m=$(grep -a "Maximum resident set size" "$g" | awk '{printf "%d", $NF / 1024}' || true)
        [ -n "$m" ] && [ "$m" -gt "$rss" ] && rss=$m
      done
      last="${segs[-1]}"
      cov=$(grep -aE '^#[0-9]+.*cov:' "$last" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' |
        awk '{print $2 " / " $4}' || true)
      rate=-
      [ "$secs" -gt 0 ] && rate=$(( (total - $(for g in "${segs[@]}"; do seg_done "$g" ||
        seg_runs "$g"; done | awk '{s+=$1} END {print s+0}')) / secs ))
      arts="$BUILD_DIR/artifacts/$t"
      crashes=$(ls "$arts" 2>/dev/null | grep -cE '^(crash|oom|leak)-' || true)
      timeouts=$(ls "$arts" 2>/dev/null | grep -cE '^timeout-' || true)
      note="${#segs[@]} segments"
      [ "$killed" -gt 0 ] && note="$note, $killed unfinished"
      printf '| `%s` | %s (%s) | %s | %s | %s | %s | %s | %s |\n' "$t" "$total" "$note" \
        "$rate" "$(printf '%d:%02d:%02d' $((secs / 3600)) $((secs % 3600 / 60)) $((secs % 60)))" \
        "${rss:--}" "${cov:--}" "$crashes" "$timeouts"
      continue
    fi
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
  --campaign) MODE=campaign N="$2"; shift 2 ;;
  --build-only) MODE=build; shift ;;
  *) echo "usage: $0 --seconds N | --runs N | --campaign N | --build-only [TARGET...]" >&2
     exit 2 ;;
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
# run_target TARGET LOG LIMIT-ARGS...: one libFuzzer process; 0 when it found nothing.
run_target() {
  local t="$1" log="$2"
  shift 2
  local corpus="$BUILD_DIR/corpus/$t" artifacts="$BUILD_DIR/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  [ -d "$ROOT/fuzz/corpus/$t" ] && cp -n "$ROOT/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null || true
  local args=(-rss_limit_mb=2048 -timeout=10 -max_len="${MAX_LEN[$t]:-16384}"
              -artifact_prefix="$artifacts/" -print_final_stats=1 "$@")
  [ -f "$ROOT/fuzz/dict/$t.dict" ] && args+=(-dict="$ROOT/fuzz/dict/$t.dict")
  local start end rc=0
  start=$(date +%s)
  # The targets run in a scratch directory: the agent's and the CLI's harnesses may
  # create relative paths named by the input. It is on tmpfs when there is one (the
  # CLI's checkpoint root is rewritten, with fsyncs, before each `ckpt` input: twice
  # the executions per second of a disk); FUZZ_SCRATCH overrides.
  local scratch_root="${FUZZ_SCRATCH:-$BUILD_DIR/scratch}"
  [ -z "${FUZZ_SCRATCH:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
    scratch_root="/dev/shm/bw-fuzz-$(id -u)"
  local scratch="$scratch_root/$t"
  mkdir -p "$scratch"
  # A campaign keeps no allocation stacks (ASan's malloc_context_size=0: a fifth more
  # executions per second); rerun a finding's input to get them.
  local asan="${ASAN_OPTIONS:-}"
  [ "$MODE" != seconds ] && [ -z "$asan" ] && asan=malloc_context_size=0
  (cd "$scratch" &&
    ASAN_OPTIONS="$asan" /usr/bin/time -v "$BUILD_DIR/fuzz/$t" "${args[@]}" "$corpus") \
    >"$log" 2>&1 || rc=$?
  end=$(date +%s)
  # A target that crashed prints no final stats: nothing to grep is no reason to stop.
  local stats cov
  stats=$( (grep -aE '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
    "$log" || true) | sed 's/^stat:://' | tr '\n' ' ')
  cov=$(grep -aE '^#[0-9]+.*(DONE|cov:)' "$log" | tail -1 |
    grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)
  echo "   rc=$rc wall=$((end - start))s $stats $cov"
  if [ "$rc" -ne 0 ] || ls "$artifacts" | grep -qE '^(crash|timeout|oom|leak)-'; then
    echo "!! fuzz: $t FAILED (rc=$rc); artifacts in $artifacts, log $log" >&2
    grep -aE 'ERROR:|fuzz contract broken|SUMMARY' "$log" | head -5 >&2 || true
    return 1
  fi
}
for t in "${TARGETS[@]}"; do
  if [ "$MODE" = campaign ]; then
    dir="$BUILD_DIR/campaign/$t"
    mkdir -p "$dir"
    segment="${FUZZ_SEGMENT:-1000000}"
    while :; do
      total=0 n=0
      for g in "$dir"/seg-*.log; do
        [ -f "$g" ] || continue
        total=$((total + $(seg_runs "$g"))) n=$((n + 1))
      done
      [ "$total" -ge "$N" ] && { echo "== fuzz: $t has $total of $N executions"; break; }
      want=$((N - total < segment ? N - total : segment))
      log=$(printf '%s/seg-%03d.log' "$dir" "$n")
      echo "== fuzz: $t segment $n ($want inputs; $total of $N done)"
      run_target "$t" "$log" -runs="$want" || { failed+=("$t"); break; }
    done
    continue
  fi
  echo "== fuzz: $t ($MODE $N)"
  limit=(-runs="$N")
  [ "$MODE" = seconds ] && limit=(-max_total_time="$N")
  # A campaign may also be capped in time per target (FUZZ_MAX_TOTAL_TIME seconds).
  [ "$MODE" = runs ] && [ -n "${FUZZ_MAX_TOTAL_TIME:-}" ] &&
    limit+=(-max_total_time="$FUZZ_MAX_TOTAL_TIME")
  run_target "$t" "$LOGS/$t.log" "${limit[@]}" || failed+=("$t")
done
if ((${#failed[@]})); then
  echo "!! fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "== fuzz: ${#TARGETS[@]} target(s) passed"
