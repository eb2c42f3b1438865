#!/usr/bin/env bash
# Crashes and signals during loading: a loader killed with SIGKILL and
# restarted from its saved position delivers the rest of the epoch exactly
# (no sample lost or repeated); SIGINT stops cleanly; a dead server fails
# within a bounded time.
source "$(dirname "$0")/lib.sh" "$1"
MK="$BUILD/bench/mkpgs"
D="$TB/crash"; rm -rf "$D"; mkdir -p "$D"
trap 'rm -rf "$D"' EXIT
"$MK" "$D/ds.pgs" --size 24M --sample-size 8K --page-size 256K >/dev/null || { fail crash_make "mkpgs failed"; exit 0; }
N=$("$PS" inspect "$D/ds.pgs" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["samples"])')

# check_ids FILE N EPOCH: every id of EPOCH in FILE exactly once
check_ids() {
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import sys
path, n, epoch = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seen = {}
for line in open(path):
    f = line.split()
    if len(f) < 2 or f[0] != epoch:
        continue
    for i in f[2:]:
        seen[int(i)] = seen.get(int(i), 0) + 1
rep = [i for i, c in seen.items() if c > 1]
miss = [i for i in range(n) if i not in seen]
print(f"{len(seen)} distinct of {n}, {len(rep)} repeated, {len(miss)} missing")
sys.exit(0 if not rep and not miss else 1)
PY
}

for order in quasi_random random; do
    ids="$D/ids-$order.txt"; rm -f "$ids"
    # a slow consumer (ring depth 1) so the kill lands mid-epoch
    "$PS" bench "$D/ds.pgs" --epochs 1 --transform none --batch-size 16 --order "$order" --keep-last \
        --cache-size 2M --ring-depth 1 --fault latency_ms=3 --ids-out "$ids" > "$D/run1.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        [ -f "$ids" ] && [ "$(wc -l < "$ids")" -ge 30 ] && break
        sleep 0.02
    done
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    lines=$(wc -l < "$ids")
    total=$(( (N + 15) / 16 ))
    if [ "$lines" -ge "$total" ]; then
        fail "sigkill_resume_exact_$order" "the first run finished all $total batches before the kill: nothing tested"
        continue
    fi
    if "$PS" bench "$D/ds.pgs" --epochs 1 --transform none --batch-size 16 --order "$order" --keep-last \
        --cache-size 2M --ids-out "$ids" --resume > "$D/run2.log" 2>&1; then
        if res=$(check_ids "$ids" "$N" 0); then
            ok "sigkill_resume_exact_$order"
            echo "# $order: killed after $lines batches, resumed: $res"
        else
            fail "sigkill_resume_exact_$order" "$res (killed after $lines batch lines)"
        fi
    else
        fail "sigkill_resume_exact_$order" "resume run failed: $(tail -n 2 "$D/run2.log")"
    fi
done

# SIGINT: a clean stop with a report, exit 130
"$PS" bench "$D/ds.pgs" --epochs 50 --transform none --batch-size 16 --cache-size 2M --fault latency_ms=3 > "$D/int.log" 2>&1 &
pid=$!
sleep 0.7
kill -INT $pid
wait $pid; rc=$?
if [ $rc = 130 ] && grep -q "stopped by signal" "$D/int.log"; then ok sigint_clean_stop; else fail sigint_clean_stop "exit $rc: $(tail -n 2 "$D/int.log")"; fi

# a server that is gone: clear error within the bounded time
port=$((20000 + RANDOM % 20000))
start=$(date +%s)
out=$(timeout 60 "$PS" bench "http://127.0.0.1:$port/none.pgs" --epochs 1 --timeout-ms 1000 --retries 3 2>&1); rc=$?
el=$(( $(date +%s) - start ))
if [ $rc != 0 ] && [ $rc != 124 ] && [ $el -le 30 ] && printf '%s' "$out" | grep -q "127.0.0.1:$port"; then
    ok dead_server_fails_fast
    echo "# dead server: failed in ${el}s: $(printf '%s' "$out" | tail -n 1)"
else
    fail dead_server_fails_fast "exit $rc after ${el}s: $(printf '%s' "$out" | tail -n 1)"
fi
exit 0
