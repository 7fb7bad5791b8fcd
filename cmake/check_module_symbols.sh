#!/usr/bin/env bash
# check_module_symbols.sh MODULE [EXPORTS_LIST]: every symbol MODULE leaves undefined is defined
# by a library MODULE names (DT_NEEDED) or, when EXPORTS_LIST is given, is one of the symbols the
# host binary exports to its modules (cmake/PillarAbseil.cmake's --dynamic-list). Run after each
# module link, in place of the linker's --no-undefined, which cannot know about the host.
# Prints each unresolved symbol, demangled, and exits 1 when there is one.
set -euo pipefail
module=$1
exports=${2:-}

exported() {
  if [[ -n $exports ]]; then
    sed -n 's/^[[:space:]]*\([^{}[:space:];]*\);$/\1/p' "$exports" | sort -u
  fi
}

# `ldd -r` asks the dynamic loader to bind every relocation of MODULE against its dependencies
# and reports the rest as "undefined symbol: NAME (MODULE)".
undefined=$(ldd -r "$module" 2>&1 | sed -n 's/^undefined symbol: \([^[:space:]]*\).*/\1/p' | sort -u)
# It says nothing of weak references, which bind to null when nothing defines them: a call
# through one crashes. The only weak references a module may leave to the host are Abseil's,
# and those must be exported (weak references to the C library's optional hooks, such as
# __gmon_start__, are meant to stay null).
weak_abseil=$(nm -D --undefined-only "$module" | awk '$1 == "w" || $1 == "v" {print $2}' |
  grep -E '^(_Z.*4absl|Absl)' | sort -u || true)
undefined=$(printf '%s\n%s\n' "$undefined" "$weak_abseil" | sed '/^$/d' | sort -u)
if [[ -n $undefined ]]; then
  undefined=$(comm -23 <(echo "$undefined") <(exported))
fi
if [[ -n $undefined ]]; then
  count=$(echo "$undefined" | wc -l)
  echo "$module: $count symbol(s) defined neither by its libraries nor by the host:" >&2
  echo "$undefined" | c++filt | sed 's/^/  /' >&2
  exit 1
fi
