#!/usr/bin/env bash
# Fails, naming each file, when a C++ source of src/, tests/ or bench/ is not formatted as
# .clang-format says (clang-format 14, Debian 12's). Part of the suite (CTest: format_check).
# To fix: clang-format -i FILE...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bad=0
while IFS= read -r -d '' file; do
  if ! clang-format --dry-run --Werror "$file" >/dev/null 2>&1; then
    echo "not formatted: $file (clang-format -i $file)" >&2
    bad=$((bad + 1))
  fi
done < <(find src tests bench \( -name '*.cc' -o -name '*.h' \) -not -path 'tests/fuzz/corpus/*' -print0)
if ((bad > 0)); then
  echo "$bad file(s) not formatted as .clang-format says" >&2
  exit 1
fi
