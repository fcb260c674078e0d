#!/usr/bin/env bash
# Configures and builds Bulwark into build/ (or $BUILD_DIR). Extra args go to cmake.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
# Ninja schedules a 2-core build better than make; an existing build dir keeps the
# generator it was configured with.
GEN=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then GEN=(-G Ninja); fi
cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
