#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a scratch copy of its seed corpus.
# Usage: run_fuzzer.sh FUZZER SEED_CORPUS_DIR SECONDS
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp -r "$seeds"/. "$work/corpus/"
if ! "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" > "$work/log" 2>&1; then
  tail -n 60 "$work/log"
  for crash in "$work"/artifacts/*; do
    echo "crashing input ($crash), base64:"; base64 "$crash" | head -c 4000; echo
  done
  exit 1
fi
grep -E "^stat::number_of_executed_units|^Done" "$work/log" || true
