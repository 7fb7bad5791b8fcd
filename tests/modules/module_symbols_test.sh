#!/usr/bin/env bash
# module_symbols_test.sh CHECK EXPORTS HOST MODULE...: the modules bind their Abseil to the host
# binary's copy (cmake/PillarAbseil.cmake). For each module:
#   - CHECK (cmake/check_module_symbols.sh) passes against EXPORTS;
#   - every Abseil symbol the module leaves undefined is exported by HOST itself, so the
#     --whole-archive and the --dynamic-list did what the list says;
#   - CHECK fails, naming the symbol, when one the module needs is missing from the list.
set -euo pipefail
check=$1 exports=$2 host=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

nm -D --defined-only --format=just-symbols "$host" | sort -u >"$work/host"
for module in "$@"; do
  "$check" "$module" "$exports"

  nm -D --undefined-only --format=just-symbols "$module" | grep -E '^(_Z.*4absl|Absl)' \
    | sort -u >"$work/needed"
  [[ -s $work/needed ]] || { echo "FAIL: $module imports no Abseil symbol; is it linked to its own?" >&2; exit 1; }
  missing=$(comm -23 "$work/needed" "$work/host")
  [[ -z $missing ]] || { echo "FAIL: $host does not export:" >&2; echo "$missing" | c++filt >&2; exit 1; }

  # Planted: the list without one symbol the module needs.
  dropped=$(head -1 "$work/needed")
  grep -vxF "  $dropped;" "$exports" >"$work/exports"
  if "$check" "$module" "$work/exports" 2>"$work/err"; then
    echo "FAIL: the check passed with $dropped missing from the host's exports" >&2
    exit 1
  fi
  grep -qF "$(echo "$dropped" | c++filt)" "$work/err" \
    || { echo "FAIL: the check's error does not name $dropped:" >&2; cat "$work/err" >&2; exit 1; }
  echo "ok: $(basename "$module"): $(wc -l <"$work/needed") Abseil symbols bound to the host"
done
