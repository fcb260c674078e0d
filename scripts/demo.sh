#!/usr/bin/env bash
# README command (1): install, build, and run the example job (2 nodes x 2 ranks of a
# real PyTorch DDP trainer) with a crash, a hang, a NaN and a node loss injected; the
# ETTR report is printed at the end and written to build/demo-report.json.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
exec "$ROOT/build/bin/bulwark" run "$ROOT/examples/pytorch-ddp/job.yaml" --fresh \
  --report "$ROOT/build/demo-report.json" "$@"
