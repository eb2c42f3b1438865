#!/usr/bin/env bash
# Low-memory node: a cgroup-v1 memory group four times smaller than the
# dataset. A full epoch completes, nothing is OOM-killed, and the loader's
# peak RSS stays within --cache-size plus the documented fixed overhead.
source "$(dirname "$0")/lib.sh" "$1"
MK="$BUILD/bench/mkpgs"
CGROOT=/sys/fs/cgroup/memory
if ! is_root || [ ! -w "$CGROOT" ]; then
    skip memcg "needs root and a writable cgroup-v1 memory hierarchy at $CGROOT"
    exit 0
fi
CG=$CGROOT/pagestream_test_$$
cleanup() { [ -d "$CG" ] && { cat "$CG/cgroup.procs" 2>/dev/null | while read -r p; do echo "$p" > $CGROOT/cgroup.procs; done; rmdir "$CG" 2>/dev/null; }; rm -f "$TB"/memcg*.pgs; }
trap cleanup EXIT
mkdir -p "$CG"
LIMIT=$((256 << 20))
echo $LIMIT > "$CG/memory.limit_in_bytes"

evict() { /usr/bin/python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$1"; }
# run_in_cg OUT CMD...: run CMD inside the memory group, output to OUT; returns its status
run_in_cg() { local out=$1; shift; sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG" "$@" > "$out" 2>&1; }
json_get() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

# 1) raw bytes, 1 GiB dataset, 128 MiB cache, 256 MiB limit
"$MK" "$TB/memcg.pgs" --size 1G --sample-size 110K --page-size 4M >/dev/null || { fail memcg_make "mkpgs failed"; exit 0; }
evict "$TB/memcg.pgs"
before=$(grep -E '^oom_kill ' "$CG/memory.oom_control" | awk '{print $2}')
if run_in_cg "$TB/memcg1.json" "$PS" bench "$TB/memcg.pgs" --epochs 1 --cache-size 128M --transform none --batch-size 64 --json; then
    ok memcg_raw_epoch_completes
else
    fail memcg_raw_epoch_completes "exit $?: $(tail -n 3 "$TB/memcg1.json")"
fi
after=$(grep -E '^oom_kill ' "$CG/memory.oom_control" | awk '{print $2}')
[ "${after:-0}" = "${before:-0}" ] && ok memcg_raw_no_oom_kill || fail memcg_raw_no_oom_kill "oom_kill went from $before to $after"
if [ -s "$TB/memcg1.json" ] && head -c1 "$TB/memcg1.json" | grep -q '{'; then
    rss=$(json_get "$TB/memcg1.json" "d['peak_rss']")
    cache=$(json_get "$TB/memcg1.json" "d['cache_bytes']")
    fixed=$(json_get "$TB/memcg1.json" "d['fixed_bytes']")
    imgs=$(json_get "$TB/memcg1.json" "d['epochs'][0]['images']")
    n=$(json_get "$TB/memcg1.json" "d['samples']")
    # documented overhead: fixed (ring + tables) + 32 MiB (code, libraries, stacks, allocator)
    bound=$((cache + fixed + (32 << 20)))
    echo "# raw: dataset $(stat -c %s "$TB/memcg.pgs") bytes, limit $LIMIT, cache $cache, fixed $fixed, peak RSS $rss (bound $bound), $imgs of $n samples"
    [ "$rss" -le "$bound" ] && ok memcg_raw_rss_within_bound || fail memcg_raw_rss_within_bound "peak RSS $rss > cache $cache + fixed $fixed + 32 MiB"
    [ "$imgs" -ge $((n - 64)) ] && ok memcg_raw_full_epoch || fail memcg_raw_full_epoch "$imgs of $n samples"
else
    fail memcg_raw_rss_within_bound "no JSON output"
fi

# 2) the default cache size comes from the cgroup limit
if run_in_cg "$TB/memcg2.json" "$PS" bench "$TB/memcg.pgs" --epochs 1 --max-batches 5 --transform none --batch-size 64 --json; then
    cache=$(json_get "$TB/memcg2.json" "d['cache_bytes']")
    [ "$cache" -le $((LIMIT / 2)) ] && [ "$cache" -ge $((LIMIT / 4)) ] && ok memcg_default_cache_from_limit \
        || fail memcg_default_cache_from_limit "cache $cache for a limit of $LIMIT"
else
    fail memcg_default_cache_from_limit "$(tail -n 2 "$TB/memcg2.json")"
fi

# 3) JPEG decode path, dataset of real-looking JPEGs repeated to 1 GiB
JDIR=$(test_images 300)
if [ -z "$JDIR" ]; then
    fail memcg_jpeg "could not generate test images"
else
    "$MK" "$TB/memcgj.pgs" --size 1G --jpeg-dir "$JDIR" --page-size 4M >/dev/null
    evict "$TB/memcgj.pgs"
    if run_in_cg "$TB/memcg3.json" "$PS" bench "$TB/memcgj.pgs" --epochs 1 --cache-size 96M --batch-size 32 --crop 160 --json; then
        rss=$(json_get "$TB/memcg3.json" "d['peak_rss']")
        cache=$(json_get "$TB/memcg3.json" "d['cache_bytes']")
        fixed=$(json_get "$TB/memcg3.json" "d['fixed_bytes']")
        bound=$((cache + fixed + (48 << 20)))
        echo "# jpeg: cache $cache, fixed $fixed, peak RSS $rss (bound $bound)"
        [ "$rss" -le "$bound" ] && ok memcg_jpeg_rss_within_bound || fail memcg_jpeg_rss_within_bound "peak RSS $rss > $bound"
    else
        fail memcg_jpeg_epoch_completes "$(tail -n 3 "$TB/memcg3.json")"
    fi
fi
exit 0
