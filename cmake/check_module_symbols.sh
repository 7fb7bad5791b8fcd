#!/usr/bin/env bash
# check_module_symbols.sh MODULE [EXPORTS_LIST]: every symbol MODULE leaves undefined is defined
# by a library MODULE names (DT_NEEDED) or, when EXPORTS_LIST is given, is one of the symbols the
# host binary exports to its modules (cmake/PillarAbseil.cmake's --dynamic-list). Run after each
# module link, in place of the linker's --no-undefined, which cannot know about the host.
# Prints each unresolved symbol, demangled, and exits 1 when there is one.
set -euo pipefail
module=$1
exports=${2:-}

# `ldd -r` asks the dynamic loader to bind every relocation of MODULE against its dependencies
# and reports the rest as "undefined symbol: NAME (MODULE)".
undefined=$(ldd -r "$module" 2>&1 | sed -n 's/^undefined symbol: \([^[:space:]]*\).*/\1/p' | sort -u)
if [[ -n $exports && -n $undefined ]]; then
  undefined=$(comm -23 <(echo "$undefined") \
    <(sed -n 's/^[[:space:]]*\([^{}[:space:];]*\);$/\1/p' "$exports" | sort -u))
fi
if [[ -n $undefined ]]; then
  count=$(echo "$undefined" | wc -l)
  echo "$module: $count symbol(s) defined neither by its libraries nor by the host:" >&2
  echo "$undefined" | c++filt | sed 's/^/  /' >&2
  exit 1
fi
