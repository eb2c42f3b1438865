#!/usr/bin/env bash
# tests/run.sh [--unit] [--valgrind] [--tag T] BUILD
# Runs the unit test programs (BUILD/tests/test_*) and, unless --unit, the
# integration scripts (tests/it_*.sh), then prints "N passed, N failed, N skipped".
set -u
unit_only=0; vg=0; tag=""
while [ $# -gt 1 ]; do
    case $1 in
        --unit) unit_only=1 ;;
        --valgrind) vg=1 ;;
        --tag) tag="$2 "; shift ;;
        *) break ;;
    esac
    shift
done
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
pass=0; failn=0; skipn=0
LOG=$BUILD/test-logs; mkdir -p "$LOG"
ONLY=${TESTS:-}   # TESTS="test_format it_http" runs only those

run_one() {  # name cmd...
    local name=$1; shift
    if [ -n "$ONLY" ] && ! printf ' %s ' "$ONLY" | grep -q " $name "; then return; fi
    local out="$LOG/${tag// /}${name}.log" t0 rc
    t0=$(date +%s)
    "$@" > "$out" 2>&1; rc=$?
    local p f s
    p=$(grep -c '^ok ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^skip ' "$out")
    grep -E '^(ok|FAIL|skip) ' "$out" | sed "s/^/${tag}${name}: /"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "${tag}${name}: FAIL exited with status $rc; last lines:"; tail -n 15 "$out" | sed 's/^/    /'
        f=$((f + 1))
    elif [ "$f" -gt 0 ]; then
        grep -vE '^(ok|skip) ' "$out" | tail -n 25 | sed 's/^/    /'
    fi
    echo "  (${tag}${name}: $p passed, $f failed, $s skipped, $(( $(date +%s) - t0 ))s)"
    pass=$((pass + p)); failn=$((failn + f)); skipn=$((skipn + s))
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    if [ $vg = 1 ]; then
        run_one "$n" valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$t"
    else
        run_one "$n" "$t"
    fi
done

if [ $unit_only = 0 ]; then
    for s in tests/it_*.sh; do
        [ -f "$s" ] || continue
        run_one "$(basename "$s" .sh)" bash "$s" "$BUILD"
    done
fi

echo "${pass} passed, ${failn} failed, ${skipn} skipped"
[ "$failn" -eq 0 ]
