#!/usr/bin/env bash
# Checks that every C++ source and header (src, fuzz, bench, tests) is as clang-format
# leaves it under .clang-format (Google style, 100 columns). The formatter is pinned to
# Debian 12's clang-format-14 (scripts/setup.sh installs it): another version formats
# some constructs differently. Exit 0 when all are formatted; 1 naming each file that
# is not, with the command that fixes them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CF="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$CF" >/dev/null 2>&1; then
  echo "check-format: $CF not found; install it (scripts/setup.sh, or apt-get install $CF)" >&2
  exit 1
fi
cd "$ROOT"
mapfile -d '' files < <(find src fuzz bench tests \( -name '*.cc' -o -name '*.h' \) -print0 | sort -z)
bad=()
for f in "${files[@]}"; do
  "$CF" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: $CF -i ${bad[*]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted ($("$CF" --version))"
