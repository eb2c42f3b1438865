#!/usr/bin/env bash
# tests/fuzz.sh DIR SECONDS - run every libFuzzer binary DIR/fuzz_* for SECONDS
# seconds, each on a scratch copy of its seed corpus tests/corpus/<name without
# fuzz_>/ (the seeds in the repository are never modified). Prints
# "ok fuzz_x: N runs in S s" or "FAIL fuzz_x: ..." per target; exit 1 if any failed.
# A crashing input is kept as DIR/artifacts/fuzz_x/crash-*; replay it with
# DIR/fuzz_x FILE.
set -u
DIR=${1:?usage: tests/fuzz.sh DIR SECONDS}
SECS=${2:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
failed=0; ran=0
for bin in "$DIR"/fuzz_*; do
    [ -x "$bin" ] && [ -f "$bin" ] || continue
    name=$(basename "$bin")
    seeds="$ROOT/tests/corpus/${name#fuzz_}"
    work=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
    art="$DIR/artifacts/$name"
    mkdir -p "$work/corpus" "$art"
    [ -d "$seeds" ] && cp -r "$seeds"/. "$work/corpus/" 2>/dev/null
    nseeds=$(find "$work/corpus" -type f | wc -l)
    ran=$((ran + 1))
    # -timeout: one input may not take a second; -rss_limit_mb: a parse must not balloon
    "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art/" "$work/corpus" > "$work/log" 2>&1
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' | tail -n 1)
    if [ $rc -eq 0 ] && [ -n "$runs" ]; then
        echo "ok $name: ${runs} runs in ${SECS} s (${nseeds} seeds, corpus grew to $(find "$work/corpus" -type f | wc -l))"
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit $rc after ${runs:-?} runs; artifacts in $art; last lines:"
        grep -E 'ERROR|SUMMARY|==[0-9]+==|Test unit written|#[0-9]+' "$work/log" | tail -n 12 | sed 's/^/    /'
    fi
    rm -rf "$work"
done
if [ $ran -eq 0 ]; then
    echo "FAIL fuzz: no fuzz_* binaries in $DIR"
    exit 1
fi
[ $failed -eq 0 ]
