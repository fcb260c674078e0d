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
#   scripts/fuzz.sh --record                  write the segment logs into the ledger
#   scripts/fuzz.sh --leak-check [TARGET...]  each target over its checked-in corpus once,
#                                             with LeakSanitizer after every input
# A campaign runs in segments of FUZZ_SEGMENT inputs (default 1,000,000), each a fresh
# libFuzzer process resuming from the checked-in corpus (libFuzzer's state is its
# corpus), its log build-fuzz/campaign/<target>/<UTC start>.log. The campaign's record is
# the checked-in ledger fuzz/campaign.tsv, one row per segment (id, target, commit
# fuzzed, executions, seconds, finished, peak RSS MB, coverage, features, crashed,
# timed out), rewritten from the logs after each segment and by --record; a segment
# killed with its session counts the inputs of its last status line ("finished" no).
# A segment that the machine's operator broke (not the code under test) is listed with
# the reason in fuzz/campaign-void.tsv (segment, target, reason): it is left out of the
# ledger, and --table names it under the table.
# After each finished segment the checked-in corpus becomes the -set_cover_merge=1 of
# itself and the segment's new inputs; commit fuzz/ at the end of a session, and the
# next machine carries on from there. Rerunning --campaign N carries on to N.
# FUZZ_WORKER=K (1, 2, ...) runs a second campaign of a target beside the first (one per
# core): its segments are named <UTC start>-wK, it fuzzes in its own scratch and working
# corpus, and merges into the checked-in corpus under a lock. Two campaigns of a target
# with the same worker are refused.
# Every target runs with -rss_limit_mb=2048 (memory bound) and -timeout=10 (an input
# taking over 10 s is a hang; 120 s in a campaign, whose fuzzers run at nice 19 beside
# other work and the timeout is wall-clock; FUZZ_TIMEOUT overrides). Crashes, hangs and
# OOMs leave their input under
# build-fuzz/artifacts/<target>/ and make this script exit 1. So do leaks: libFuzzer runs
# LeakSanitizer after an input that allocated more blocks than it freed, and at exit.
# The artifacts a run left are written into its log ("fuzz.sh: artifact NAME"), which
# the ledger reads: libFuzzer's own lines about them are lost where a target silences
# stderr. Before any target runs, fuzz_canary (fuzz/canary.cc) checks that a leak, and a
# heap overflow while stderr is silenced, are reported under the ASAN_OPTIONS the
# targets get; if not, nothing runs. Outside a campaign, new inputs the fuzzer finds go
# to build-fuzz/corpus/<target>/ (a copy of fuzz/corpus/<target>/), never into the
# checked-in corpus. Logs: build-fuzz/logs/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-fuzz}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac  # in_scratch cds
ALL=(fuzz_job_spec fuzz_trainjob fuzz_pytorchjob fuzz_sim_config fuzz_ckpt fuzz_agent_wire
     fuzz_sdk_datagram fuzz_controller_wire fuzz_cli)
# Longest input per target: YAML documents and CLI lines up to 16 KiB (real specs are
# 1-4 KiB), message streams 64 KiB, checkpoint file sets 256 KiB.
declare -A MAX_LEN=([fuzz_ckpt]=262144 [fuzz_agent_wire]=65536 [fuzz_sdk_datagram]=65536
                    [fuzz_controller_wire]=65536)
MODE="" N=0
# The campaign worker's suffix: "" or "-wK" (FUZZ_WORKER=K).
WSFX=""
if [ -n "${FUZZ_WORKER:-}" ]; then
  [[ "$FUZZ_WORKER" =~ ^[1-9][0-9]?$ ]] || {
    echo "fuzz.sh: FUZZ_WORKER must be a number from 1 to 99 (got '$FUZZ_WORKER')" >&2
    exit 2
  }
  WSFX="-w$FUZZ_WORKER"
fi
# The campaign's ledger, checked in: one row per segment (see the header comment).
LEDGER="$ROOT/fuzz/campaign.tsv"
LEDGER_HEADER=$'segment\ttarget\tcommit\texecutions\tseconds\tfinished\tpeak_rss_mb\tcov\tft\tcrashes\ttimeouts'
VOID="$ROOT/fuzz/campaign-void.tsv"
# Executions a segment log records: its final stats, else its last status line (killed).
seg_runs() {
  local r
  r=$(grep -aE '^stat::number_of_executed_units:' "$1" | awk '{print $2}' || true)
  [ -n "$r" ] && { echo "$r"; return; }
  r=$(grep -aoE '^#[0-9]+' "$1" | tail -1 | tr -d '#' || true)
  echo "${r:-0}"
}
# Finished: libFuzzer reached -runs ("Done N runs"); a killed one may still print stats.
seg_done() { grep -qaE '^Done [0-9]+ runs in [0-9]+ second' "$1"; }
# seg_row TARGET LOG: the ledger row of one segment log (its name is the segment's id,
# its first line "commit <sha>").
seg_row() {
  local t="$1" g="$2" id runs secs done=no rss cov ft crashes=0 timeouts=0 commit rate
  id=$(basename "$g" .log)
  commit=$(head -1 "$g" | awk '$1 == "commit" {print $2}')
  runs=$(seg_runs "$g")
  secs=$(grep -aoE 'Done [0-9]+ runs in [0-9]+ second' "$g" | awk '{print $5}' || true)
  if seg_done "$g"; then
    done=yes
  else  # killed: its duration from the rate of its last status line
    rate=$(grep -aE '^#[0-9]+.*exec/s: [0-9]+' "$g" | tail -1 |
      grep -oE 'exec/s: [0-9]+' | awk '{print $2}' || true)
    secs=$(( ${rate:-0} > 0 ? runs / rate : 0 ))
  fi
  rss=$(grep -a "Maximum resident set size" "$g" | awk '{printf "%d", $NF / 1024}' || true)
  [ -z "$rss" ] && rss=$(grep -aoE 'rss: [0-9]+Mb' "$g" | tail -1 | grep -oE '[0-9]+' || true)
  read -r cov ft < <(grep -aE '^#[0-9]+.*cov:' "$g" | tail -1 |
    grep -oE 'cov: [0-9]+ ft: [0-9]+' | awk '{print $2, $4}' || true)
  grep -qaE 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer: (deadly|out-of-memory|fuzz target exited))|fuzz contract broken|runtime error:|^fuzz.sh: artifact (crash|leak|oom)-' "$g" && crashes=1
  grep -qaE 'ALARM: working on the last Unit|^fuzz.sh: artifact timeout-' "$g" && timeouts=1
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$t" "${commit:--}" "$runs" \
    "${secs:-0}" "$done" "${rss:-0}" "${cov:-0}" "${ft:-0}" "$crashes" "$timeouts"
}
# record: writes the rows of every segment log under build-fuzz/campaign into the
# ledger, replacing the rows of the same segments (a rerun of --record after more
# executions of a running segment updates its row).
record() {
  local rows tmp
  rows=$(for d in "$BUILD_DIR"/campaign/*/; do
    [ -d "$d" ] || continue
    for g in "$d"*.log; do
      if [ -f "$g" ]; then seg_row "$(basename "$d")" "$g"; fi
    done
  done)
  [ -f "$LEDGER" ] || echo "$LEDGER_HEADER" > "$LEDGER"
  [ -n "$rows" ] || return 0
  tmp="$LEDGER.tmp.$$"
  { echo "$LEDGER_HEADER"
    awk -F'\t' 'NR == FNR {seen[$1 FS $2] = 1; next}
                FNR > 1 && !(($1 FS $2) in seen)' <(echo "$rows") "$LEDGER"
    echo "$rows"
  } | awk -F'\t' -v vf="$VOID" '
        BEGIN { while ((getline l < vf) > 0) { split(l, a, "\t"); void[a[1] FS a[2]] = 1 } }
        NR == 1 || !(($1 FS $2) in void)' |
    { read -r h; echo "$h"; sort -t$'\t' -k2,2 -k1,1; } > "$tmp"
  mv "$tmp" "$LEDGER"
}
ledger_total() {
  awk -F'\t' -v t="$1" 'FNR > 1 && $2 == t {s += $4} END {print s + 0}' "$LEDGER" 2>/dev/null ||
    echo 0
}
if [ "${1:-}" = --record ]; then record; exit 0; fi
# The campaign table of docs/testing.md, from the ledger.
if [ "${1:-}" = --table ]; then
  echo "| target | executions | exec/s | wall | peak RSS MB | cov / ft | crashes | timeouts |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in "${ALL[@]}"; do
    awk -F'\t' -v t="$t" '
      FNR > 1 && $2 == t {
        n++; runs += $4; secs += $5; if ($6 != "yes") killed++; else {fr += $4; fs += $5}
        if ($7 > rss) rss = $7; if ($8 > 0) {cov = $8; ft = $9}; cr += $10; to += $11
        if (!($3 in c)) {c[$3] = 1; commits++}
      }
      END {
        if (!n) exit
        note = n " segments"; if (killed) note = note ", " killed " unfinished"
        note = note ", " commits " commit" (commits > 1 ? "s" : "")
        rate = fs > 0 ? int(fr / fs) : "-"
        printf "| `%s` | %d (%s) | %s | %d:%02d:%02d | %d | %d / %d | %d | %d |\n", t, runs,
          note, rate, secs / 3600, (secs % 3600) / 60, secs % 60, rss, cov, ft, cr, to
      }' "$LEDGER"
  done
  if [ -f "$VOID" ] && [ "$(wc -l < "$VOID")" -gt 1 ]; then
    echo
    echo "Not counted (\`fuzz/campaign-void.tsv\`):"
    echo
    awk -F'\t' 'FNR > 1 {printf "- segment `%s` of `%s`: %s\n", $1, $2, $3}' "$VOID"
  fi
  exit 0
fi
case "${1:-}" in
  --seconds) MODE=seconds N="$2"; shift 2 ;;
  --runs) MODE=runs N="$2"; shift 2 ;;
  --campaign) MODE=campaign N="$2"; shift 2 ;;
  --build-only) MODE=build; shift ;;
  --leak-check) MODE=leaks; shift ;;
  *) echo "usage: $0 --seconds N | --runs N | --campaign N | --leak-check | --build-only" \
       "[TARGET...]" >&2
     echo "       $0 --table | --record" >&2
     exit 2 ;;
esac
TARGETS=("$@")
# `nice` alone does not yield to other sessions' work where the kernel groups processes by
# session (sched_autogroup_enabled=1): each session gets an equal share of the CPUs, so
# `nice -n 19` fuzzers started with setsid took ~55% of both cores from a build in another
# session. A niced run that leads its own session (`setsid nice -n 19 scripts/fuzz.sh`)
# gives its whole session that niceness; otherwise it says why nice may not be enough.
niceness="$(nice)"
if [ "$niceness" -gt 0 ] && [ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" = 1 ]; then
  if [ "$(ps -o sid= -p $$ | tr -d ' ')" = "$$" ] && echo "$niceness" 2>/dev/null >/proc/self/autogroup; then
    echo "== fuzz: this session's CPU share is niced to $niceness (autogroup)"
  else
    echo "== fuzz: nice $niceness applies only within this session (kernel autogroup); start" \
      "the campaign as 'setsid nice -n $niceness scripts/fuzz.sh ...' to yield to other sessions" >&2
  fi
fi
((${#TARGETS[@]})) || TARGETS=("${ALL[@]}")

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  CC=clang-19 CXX=clang++-19 cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBULWARK_FUZZ=ON -DBULWARK_BUILD_BENCH=OFF >/dev/null
fi
# FUZZ_NO_BUILD=1 runs the binaries as built (e.g. a campaign while the dir is rebuilt).
if [ "${FUZZ_NO_BUILD:-0}" != "1" ]; then
  echo "== fuzz: building ${TARGETS[*]}"
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}" fuzz_canary
  # The commit the binaries are built from, for the ledger (the tree may move on while a
  # campaign runs them with FUZZ_NO_BUILD=1); "+dirty" when the code had changes (the
  # campaign's own corpus and ledger are not code).
  built="$(git -C "$ROOT" rev-parse --short=12 HEAD)"
  git -C "$ROOT" diff --quiet HEAD -- src fuzz ':!fuzz/corpus' ':!fuzz/campaign.tsv' \
    CMakeLists.txt 2>/dev/null || built="$built+dirty"
  echo "$built" > "$BUILD_DIR/built-commit"
fi
[ "$MODE" = build ] && exit 0

LOGS="$BUILD_DIR/logs"
[ "$MODE" = runs ] && LOGS="$BUILD_DIR/campaign"
mkdir -p "$LOGS"
failed=()
# The ASAN_OPTIONS of the targets (the caller's, if set). A campaign keeps two frames of
# each allocation's stack (a fifth more executions per second than ASan's 30): the fewest
# with which LeakSanitizer still reports a leak (with 0 or 1 it reports none; see
# fuzz/canary.cc); rerun a finding's input for whole stacks.
ASAN="${ASAN_OPTIONS:-}"
[ -z "$ASAN" ] && { [ "$MODE" = runs ] || [ "$MODE" = campaign ]; } &&
  ASAN=malloc_context_size=2
# What a run must report must be reported under $ASAN and the targets' plumbing, or a run
# would pass with it unseen: fuzz_canary (fuzz/canary.cc) leaks on input "leak" and
# overflows a heap block with stderr silenced on input "overflow".
[ -x "$BUILD_DIR/fuzz/fuzz_canary" ] || {
  echo "!! fuzz: $BUILD_DIR/fuzz/fuzz_canary is not built; run $0 --build-only" >&2
  exit 1
}
canary() {  # canary INPUT REPORT: 0 when the canary's run on INPUT prints REPORT
  local dir rc=0
  dir="$(mktemp -d "${TMPDIR:-/tmp}/bw-fuzz-canary.XXXXXX")"
  mkdir "$dir/corpus"
  printf '%s' "$1" > "$dir/corpus/input"
  ASAN_OPTIONS="$ASAN" "$BUILD_DIR/fuzz/fuzz_canary" -runs=0 -artifact_prefix="$dir/" \
    "$dir/corpus" >"$dir/log" 2>&1 || true
  if grep -q "ERROR: $2" "$dir/log"; then
    rm -rf "$dir"
  else
    echo "!! fuzz: fuzz_canary's input '$1' went unreported with ASAN_OPTIONS='$ASAN'" \
      "(no 'ERROR: $2' in $dir/log); a run would miss such failures: fix the options" \
      "(malloc_context_size >= 2, detect_leaks=1) or the harness's plumbing and rerun" >&2
    rc=1
  fi
  return "$rc"
}
canary leak 'LeakSanitizer: detected memory leaks' || exit 1
canary overflow 'AddressSanitizer: heap-buffer-overflow' || exit 1
# in_scratch NAME CMD...: runs CMD (absolute paths only) in the scratch directory NAME,
# with TMPDIR inside it, and returns its status. Every run of a target, merges included,
# goes through here: the agent's and the CLI's harnesses create relative paths named by
# the input (the CLI's writes its fixed files, a checkpoint root and the outputs of
# `sim --json FILE` in its working directory). The directory is on tmpfs when there is
# one (the CLI's checkpoint root is copied before each `ckpt` input); FUZZ_SCRATCH
# overrides. It is new (NAME.<this script's pid>: runs of other checkouts, build
# directories and modes beside it have their own), so what an input means does not
# depend on the files earlier runs left there, and is removed after the run, as are those
# of runs whose script is gone. The harnesses' ScratchDir (fuzz/fuzz_util.h) removes its
# directories at exit, but an interrupted libFuzzer exits without running atexit
# handlers: TMPDIR in the scratch directory catches those too.
in_scratch() {
  local name="$1" rc=0 d
  shift
  local scratch_root="${FUZZ_SCRATCH:-$BUILD_DIR/scratch}"
  [ -z "${FUZZ_SCRATCH:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
    scratch_root="/dev/shm/bw-fuzz-$(id -u)"
  mkdir -p "$scratch_root"
  for d in "$scratch_root"/*.[0-9]*; do
    [ -d "$d" ] && ! kill -0 "${d##*.}" 2>/dev/null && rm -rf "$d"
  done
  local scratch="$scratch_root/$name.$$"
  rm -rf "$scratch"
  mkdir -p "$scratch/tmp"
  (cd "$scratch" && TMPDIR="$scratch/tmp" "$@") || rc=$?
  rm -rf "$scratch"
  return "$rc"
}

# run_target TARGET LOG LIMIT-ARGS...: one libFuzzer process; 0 when it found nothing.
run_target() {
  local t="$1" log="$2"
  shift 2
  local corpus="$BUILD_DIR/corpus/$t$WSFX" artifacts="$BUILD_DIR/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  # Under the merge lock: another worker's merge replaces the checked-in corpus directory.
  [ -d "$ROOT/fuzz/corpus/$t" ] && with_lock "$BUILD_DIR/merge/$t.lock" \
    bash -c 'cp -n "$1"/* "$2"/ 2>/dev/null || true' _ "$ROOT/fuzz/corpus/$t" "$corpus"
  # The timeout is wall-clock: a campaign's fuzzers run at nice 19 beside other work, where
  # inputs of 0.16 s and 2 s alone took 13 s and 11 s; there a hang is an input over 120 s
  # (each segment's log has its slowest input: slowest_unit_time_sec).
  local timeout=10
  [ "$MODE" = campaign ] && timeout=120
  local args=(-rss_limit_mb=2048 -timeout="${FUZZ_TIMEOUT:-$timeout}"
              -max_len="${MAX_LEN[$t]:-16384}"
              -artifact_prefix="$artifacts/" -print_final_stats=1 "$@")
  [ -f "$ROOT/fuzz/dict/$t.dict" ] && args+=(-dict="$ROOT/fuzz/dict/$t.dict")
  local start end rc=0 stamp="$BUILD_DIR/artifacts/.start-$t$WSFX"
  start=$(date +%s)
  mkdir -p "$BUILD_DIR/artifacts"
  touch "$stamp"
  [ "$MODE" = campaign ] || : > "$log"
  ASAN_OPTIONS="$ASAN" in_scratch "$t$WSFX" \
    /usr/bin/time -v "$BUILD_DIR/fuzz/$t" "${args[@]}" "$corpus" >>"$log" 2>&1 || rc=$?
  end=$(date +%s)
  # What the run left (libFuzzer's own line about it is lost where stderr is silenced).
  find "$artifacts" -maxdepth 1 -type f -newer "$stamp" \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' -o -name 'timeout-*' \) \
    -printf 'fuzz.sh: artifact %f\n' | sort >>"$log"
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
# with_lock FILE CMD...: runs CMD holding an exclusive lock on FILE (waits for it).
with_lock() {
  local f="$1" fd
  shift
  mkdir -p "$(dirname "$f")"
  exec {fd}>"$f"
  flock "$fd"
  local rc=0
  "$@" || rc=$?
  exec {fd}>&-
  return "$rc"
}
# merge_corpus TARGET: after a finished segment, the checked-in corpus becomes the
# smallest subset of it and of the segment's new inputs that keeps their coverage
# (libFuzzer's -set_cover_merge=1), and the next segment starts from it. One merge of a
# target at a time (the workers of a target share its checked-in corpus).
merge_corpus() { with_lock "$BUILD_DIR/merge/$1.lock" merge_corpus_locked "$1"; }
merge_corpus_locked() {
  local t="$1" merged="$BUILD_DIR/merge/$1$WSFX" old="$BUILD_DIR/merge/$1$WSFX.old"
  rm -rf "$merged" "$old"
  mkdir -p "$merged" "$ROOT/fuzz/corpus/$t"
  if ASAN_OPTIONS=malloc_context_size=0 in_scratch "$t$WSFX-merge" \
      "$BUILD_DIR/fuzz/$t" -set_cover_merge=1 \
      -rss_limit_mb=2048 -timeout=120 -max_len="${MAX_LEN[$t]:-16384}" \
      "$merged" "$ROOT/fuzz/corpus/$t" "$BUILD_DIR/corpus/$t$WSFX" \
      >"$BUILD_DIR/merge/$t$WSFX.log" 2>&1 && [ -n "$(ls -A "$merged")" ]; then
    # Reproducers of fixed defects stay whatever they cover.
    cp -n "$ROOT/fuzz/corpus/$t"/regress-* "$merged"/ 2>/dev/null || true
    mv "$ROOT/fuzz/corpus/$t" "$old" && mv "$merged" "$ROOT/fuzz/corpus/$t" && rm -rf "$old"
    rm -rf "$BUILD_DIR/corpus/$t$WSFX"
    echo "   corpus: $(ls "$ROOT/fuzz/corpus/$t" | wc -l) inputs after the merge"
  else
    echo "   corpus merge failed (kept both): $BUILD_DIR/merge/$t$WSFX.log" >&2
  fi
}
for t in "${TARGETS[@]}"; do
  if [ "$MODE" = campaign ]; then
    dir="$BUILD_DIR/campaign/$t"
    mkdir -p "$dir"
    # Held until this script exits: one campaign per target and worker.
    exec {held}>"$dir/.running$WSFX.lock"
    if ! flock -n "$held"; then
      echo "!! fuzz: a campaign of $t${WSFX:+ (worker ${WSFX#-w})} is already running; run" \
        "another beside it with FUZZ_WORKER=$(( ${FUZZ_WORKER:-0} + 1 ))" >&2
      failed+=("$t")
      continue
    fi
    segment="${FUZZ_SEGMENT:-1000000}"
    while :; do
      record
      total=$(ledger_total "$t")
      [ "$total" -ge "$N" ] && { echo "== fuzz: $t has $total of $N executions"; break; }
      want=$((N - total < segment ? N - total : segment))
      log="$dir/$(date -u +%Y%m%dT%H%M%SZ)$WSFX.log"
      echo "commit $(cat "$BUILD_DIR/built-commit" 2>/dev/null ||
        git -C "$ROOT" rev-parse --short=12 HEAD)" > "$log"
      echo "== fuzz: $t segment $(basename "$log" .log) ($want inputs; $total of $N done)"
      run_target "$t" "$log" -runs="$want" || { record; failed+=("$t"); break; }
      record
      merge_corpus "$t"
    done
    continue
  fi
  if [ "$MODE" = leaks ]; then
    echo "== fuzz: $t (leak check of $(ls "$ROOT/fuzz/corpus/$t" | wc -l) corpus inputs)"
  else
    echo "== fuzz: $t ($MODE $N)"
  fi
  limit=(-runs="$N")
  [ "$MODE" = seconds ] && limit=(-max_total_time="$N")
  # -runs=0: the corpus is run, each input followed by libFuzzer's leak check, and no more.
  [ "$MODE" = leaks ] && limit=(-runs=0)
  # A campaign may also be capped in time per target (FUZZ_MAX_TOTAL_TIME seconds).
  [ "$MODE" = runs ] && [ -n "${FUZZ_MAX_TOTAL_TIME:-}" ] &&
    limit+=(-max_total_time="$FUZZ_MAX_TOTAL_TIME")
  log="$LOGS/$t.log"
  [ "$MODE" = leaks ] && log="$LOGS/$t.leaks.log"
  run_target "$t" "$log" "${limit[@]}" || failed+=("$t")
  # libFuzzer stops checking after each input once 1,000 inputs allocated more blocks than
  # they freed without a leak (caches that grow); LeakSanitizer still runs at exit.
  grep -q 'disabled leak detection after every mutation' "$log" &&
    echo "   (libFuzzer: leak check after each input stopped after 1,000 growing inputs;" \
      "the check at exit ran)"
done
if ((${#failed[@]})); then
  echo "!! fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "== fuzz: ${#TARGETS[@]} target(s) passed"
