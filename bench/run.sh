#!/usr/bin/env bash
# bench/run.sh BUILD - what `make bench` runs: the benchmark scenarios (RAM, EBS-like, S3, HTTP, NFS),
# each against its peer or ceiling measured in the same run; writes bench/RESULTS.md and bench/results.png.
#   BENCH_SCENARIOS="ram ebs s3 http nfs"   which scenarios (default all)
#   BENCH_DATA=DIR      ImageFolder sets DIR/inet2k and DIR/low2k (default: generated under BUILD/benchrun/data)
#   BENCH_WORK=DIR      scratch (default BUILD/benchrun); BENCH_OUT=DIR where RESULTS.md/results.png go (default bench/)
#   BENCH_KEEP=1        keep the 4 GiB EBS disk image between runs
#   BENCH_QUICK=1       smaller sizes and shorter runs (a smoke test, not a record)
#   BENCH_ROUNDS=N      RAM scenario: runs of pagestream, PyTorch and the decode loop in turn, best kept (default 2)
# Servers, loop devices, mounts and cgroups it makes are removed on exit, also on failure.
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
B=$(cd "$BUILD" 2>/dev/null && pwd) || { echo "bench/run.sh: no build folder $BUILD (run make first)" >&2; exit 2; }
PS=$B/pagestream
TOOLS=$B/bench
PY=/usr/bin/python3
W=${BENCH_WORK:-$B/benchrun}
OUT=${BENCH_OUT:-$ROOT/bench}
QUICK=${BENCH_QUICK:-0}
ROUNDS=${BENCH_ROUNDS:-2}
[ "$QUICK" = 1 ] && ROUNDS=1
SCEN=${BENCH_SCENARIOS:-ram ebs s3 http nfs}
NPROC=$(nproc)
R=$W/results
TB=$W/tb                       # scratch of the server scripts (tests/servers/*.sh)
export TB
export PAGESTREAM_LOG=${PAGESTREAM_LOG:-1}
mkdir -p "$W" "$R" "$TB" "$OUT"
rm -f "$R"/*
T_START=$(date +%s)

log() { printf '[bench %s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - T_START ))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for t in "$PS" "$TOOLS/mkpgs" "$TOOLS/curl_ceiling"; do
    [ -x "$t" ] || die "$t missing: run 'make BUILD=$BUILD' first"
done

# ---------------------------------------------------------------- cleanup (always)
LOOP=""; MNT=""; CG_BLK=""; CG_MEM=""; SERVERS=""
cleanup() {
    local rc=$?
    set +e
    for s in $SERVERS; do "${s}_stop" >/dev/null 2>&1; done
    if [ -n "$MNT" ] && mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    for cg in "$CG_BLK" "$CG_MEM"; do
        [ -n "$cg" ] && [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
    done
    if [ -n "$LOOP$MNT" ] && [ "${BENCH_KEEP:-0}" != 1 ]; then rm -f "$W/ebs/disk.img"; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- helpers
# jget FILE EXPR: a value from a JSON file (EXPR in Python over d)
jget() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }
# mean of epochs after the first (steady state) of a `pagestream bench --json` file: images/s and payload MB/s
steady() { "$PY" - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); key = sys.argv[2]
ep = d["epochs"][1:] or d["epochs"]
secs = sum(e["seconds"] for e in ep)
if key == "images_per_s": print(sum(e["images"] for e in ep) / secs)
elif key == "payload_mb_per_s": print(sum(e["payload_bytes"] for e in ep) / secs / 1e6)
elif key == "read_mb_per_s": print(sum(e["bytes_read"] for e in ep) / secs / 1e6)
elif key == "cpu_ms": print(sum(e["cpu_ms_per_image"] * e["images"] for e in ep) / max(1, sum(e["images"] for e in ep)))
elif key == "amp": print(sum(e["bytes_read"] for e in ep) / max(1, sum(e["payload_bytes"] for e in ep)))
elif key == "wait_io": print(sum(e["workers_wait_storage_s"] for e in ep))
elif key == "wait_caller": print(sum(e["caller_wait_s"] for e in ep))
elif key == "seconds": print(secs)
elif key == "all_images_per_s": print(sum(e["images"] for e in d["epochs"]) / sum(e["seconds"] for e in d["epochs"]))
elif key == "classes": print(sum(e["classes_per_batch"] * e["batches"] for e in ep) / max(1, sum(e["batches"] for e in ep)))
EOF
}
# best_of KIND OUT FILES...: copy the best run among FILES to OUT (other jobs on a shared machine only
# ever slow a run down, so the best round is the least disturbed one); prints "KIND a/b/c".
# KIND: ps_images, ps_payload, ps_read (pagestream bench --json, epochs after the first), ps_all_images (all epochs,
# from open), torch (peer_torch.py),
# decode (decode_bench, the line of $DEC_PATH), ceiling (a "MiB/s=" line)
best_of() { DEC_PATH=${DEC_PATH:-b} "$PY" - "$@" <<'EOF'
import json, os, re, shutil, sys
kind, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
def value(p):
    if kind.startswith("ps_"):
        d = json.load(open(p)); ep = d["epochs"] if kind == "ps_all_images" else (d["epochs"][1:] or d["epochs"])
        num = sum(e["payload_bytes" if kind == "ps_payload" else "bytes_read" if kind == "ps_read" else "images"]
                  for e in ep)
        return num / sum(e["seconds"] for e in ep)
    if kind == "torch":
        return json.load(open(p))["steady_images_per_s"]
    for line in open(p):
        if kind == "decode" and line.startswith("(%s) " % os.environ["DEC_PATH"]):
            return float(re.split(r"\s{2,}", line.strip())[1])
        if kind == "ceiling" and "MiB/s=" in line:
            return float(line.rsplit("MiB/s=", 1)[1].split()[0])
    raise ValueError(p)
vals = []
for p in files:
    try:
        vals.append((value(p), p))
    except (OSError, ValueError, KeyError, IndexError, ZeroDivisionError):
        pass
if vals:
    shutil.copy(max(vals)[1], out)
    scale = 1e-6 if kind in ("ps_payload", "ps_read") else 1
    print("%s %s" % (kind, "/".join("%.0f" % (v * scale) for v, _ in vals)))
EOF
}
# row SCENARIO FIGURE VALUE UNIT REF_NAME REF_VALUE GOAL(min ratio, or -) NOTE
# ratio = VALUE / REF_VALUE; the renderer turns rows into the table.
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$R/rows.tsv"; }
# note SCENARIO TEXT: evidence printed under the table (why a figure is what it is)
note() { printf '%s\t%s\n' "$1" "$2" >> "$R/notes.tsv"; }
skipped() { printf '%s\t%s\n' "$1" "$2" >> "$R/skipped.tsv"; log "skip $1: $2"; }
fmt() { printf '%.*f' "${2:-1}" "$1"; }
calc() { "$PY" -c "print($*)"; }

# ---------------------------------------------------------------- the machine
{
    echo "nproc=$NPROC"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "kernel=$(uname -r)"
    echo "mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+changes')"
    echo "torch=$("$PY" -c 'import torch, torchvision, PIL; print("torch", torch.__version__, "torchvision", torchvision.__version__, "Pillow", PIL.__version__)' 2>/dev/null)"
} > "$R/machine.txt"
log "machine: $NPROC cores, $(sed -n 's/^cpu=//p' "$R/machine.txt"), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- datasets (ImageFolder sets)
INET=""; LOW=""
get_sets() {
    local d=${BENCH_DATA:-$W/data} n=2000
    [ "$QUICK" = 1 ] && n=600
    if [ -n "${BENCH_DATA:-}" ]; then
        INET=$d/inet2k; LOW=$d/low2k
    else
        INET=$d/inet$n; LOW=$d/low$n
    fi
    if [ -d "$INET" ] && [ -d "$LOW" ]; then return 0; fi
    [ -n "${BENCH_DATA:-}" ] && { log "BENCH_DATA=$d lacks inet2k/ or low2k/"; return 1; }
    if [ ! -x bench/get_photos.sh ] || [ ! -f bench/gen_images.py ]; then
        log "bench/get_photos.sh or bench/gen_images.py missing: cannot make the image sets"; return 1
    fi
    mkdir -p "$d"
    if [ ! -d "$d/photos" ] || [ -z "$(ls -A "$d/photos" 2>/dev/null)" ]; then
        log "fetching the sample photos (Debian packages) into $d/photos"
        bench/get_photos.sh "$d/photos" >&2 || { log "get_photos.sh failed"; return 1; }
    fi
    local p
    for p in imagenet lowentropy; do
        local dst=$INET; [ $p = lowentropy ] && dst=$LOW
        [ -d "$dst" ] && continue
        log "generating $n $p images into $dst"
        "$PY" bench/gen_images.py --photos "$d/photos" --out "$dst.tmp" --count $n --classes 10 --profile $p >&2 \
            || { log "gen_images.py failed"; rm -rf "$dst.tmp"; return 1; }
        mv "$dst.tmp" "$dst"
    done
}

# dec_field FILE PATH N: field N (1 images/s, 2 CPU ms/image) of decode_bench's line for PATH (a, b, e...)
dec_field() { "$PY" - "$@" <<'EOF'
import re, sys
for line in open(sys.argv[1]):
    if line.startswith("(%s) " % sys.argv[2]):
        f = re.split(r"\s{2,}", line.strip())
        print(float(f[int(sys.argv[3])].split()[0]))
        break
EOF
}
# images of an ImageFolder as a list file (decode_bench reads one folder or a list)
list_jpegs() { find "$1/" -type f \( -iname '*.jpg' -o -iname '*.jpeg' \) | sort > "$2"; }

# ================================================================= RAM / decode-bound
scenario_ram() {
    get_sets || { skipped ram "no image sets (see the log above)"; return; }
    local set dir name epochs=6 tepochs=3
    [ "$QUICK" = 1 ] && { epochs=3; tepochs=2; }
    for set in inet low; do
        if [ $set = inet ]; then dir=$INET; name="ImageNet-like"; else dir=$LOW; name="low-entropy"; fi
        local pgs=$W/$set.pgs
        # packed each run, with the defaults of this build's pack (they decide what decode costs)
        log "ram/$set: packing $dir (pagestream pack, default options)"
        "$PS" pack "$dir" -o "$pgs" -q || { skipped "ram/$set" "pack failed"; continue; }
        cat "$pgs" > /dev/null
        find "$dir/" -type f -exec cat {} + > /dev/null
        local nimg; nimg=$(find "$dir/" -type f -iname '*.jp*g' | wc -l)
        local kb; kb=$(du -sk --apparent-size "$dir/" | cut -f1)
        # the three run in turn, ROUNDS times; each keeps its best round (other jobs on a shared
        # machine only ever slow a run down, so the best round is the least disturbed one)
        local r torch_ok=0 dec_ok=0 ps_ok=0
        [ -x "$TOOLS/decode_bench" ] && list_jpegs "$dir" "$R/ram_${set}.list"
        # the ceiling decodes the bytes pagestream decodes: pack stores JPEGs with a restart marker
        # every MCU by default, and decode_bench makes such copies itself with --restart (its path e)
        local dec_args=(--only ab) dec_name="(b) crop-aware decode"
        DEC_PATH=b
        if [ "$("$PS" inspect "$pgs" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("restart_markers"))' 2>/dev/null)" = True ]; then
            dec_args=(--restart --only abe); DEC_PATH=e; dec_name="(e) crop-aware decode, restart marker every MCU"
        fi
        export DEC_PATH
        for r in $(seq "$ROUNDS"); do
            log "ram/$set round $r/$ROUNDS: pagestream bench ($epochs epochs, quasi_random, rrc 224, $NPROC threads)"
            "$PS" bench "$pgs" --order quasi_random --transform rrc --crop 224 --threads "$NPROC" --epochs $epochs \
                --cache-size 2G --json > "$R/ram_${set}_ps.$r.json" 2> "$R/ram_${set}_ps.err" && ps_ok=1
            log "ram/$set round $r/$ROUNDS: PyTorch DataLoader peer ($tepochs epochs, $NPROC workers)"
            "$PY" bench/peer_torch.py "$dir" --workers "$NPROC" --batch 256 --epochs $tepochs \
                > "$R/ram_${set}_torch.$r.json" 2> "$R/ram_${set}_torch.err" && torch_ok=1
            if [ -x "$TOOLS/decode_bench" ]; then
                log "ram/$set round $r/$ROUNDS: decode ceiling (bench/decode_bench)"
                "$TOOLS/decode_bench" "$R/ram_${set}.list" --threads "$NPROC" --crop 224 --rounds 1 "${dec_args[@]}" \
                    > "$R/ram_${set}_decode.$r.txt" 2>&1 && dec_ok=1
            fi
        done
        [ $ps_ok = 1 ] || { skipped "ram/$set" "pagestream bench failed: $(tail -n 2 "$R/ram_${set}_ps.err")"; continue; }
        {
            best_of ps_all_images "$R/ram_${set}_ps.json" "$R"/ram_${set}_ps.[0-9]*.json
            best_of torch "$R/ram_${set}_torch.json" "$R"/ram_${set}_torch.[0-9]*.json
            best_of decode "$R/ram_${set}_decode.txt" "$R"/ram_${set}_decode.[0-9]*.txt
        } > "$R/ram_${set}_rounds.txt"
        local ps_ips ps_cpu torch_ips dec_ips dec_ms full_ips
        # pagestream: every epoch from open (start-up included, and no batches decoded ahead of the clock);
        # PyTorch: epochs after the first (its worker start-up left out, its prefetched batches counted):
        # both choices lean against pagestream
        ps_ips=$(steady "$R/ram_${set}_ps.json" all_images_per_s)
        ps_cpu=$(steady "$R/ram_${set}_ps.json" cpu_ms)
        if [ $torch_ok = 1 ]; then
            torch_ips=$(jget "$R/ram_${set}_torch.json" 'd["steady_images_per_s"]')
            row "RAM, $name" "pagestream vs PyTorch DataLoader (images/s)" "$ps_ips" "images/s" \
                "PyTorch DataLoader, $NPROC workers" "$torch_ips" 3 \
                "$nimg images, mean $((kb / nimg)) KiB; RandomResizedCrop 224 + flip, uint8"
        else
            skipped "ram/$set torch" "peer_torch.py failed: $(tail -n 2 "$R/ram_${set}_torch.err" | tr '\n' ' ')"
        fi
        if [ $dec_ok = 1 ]; then
            dec_ips=$(dec_field "$R/ram_${set}_decode.txt" $DEC_PATH 1)
            dec_ms=$(dec_field "$R/ram_${set}_decode.txt" $DEC_PATH 2)
            full_ips=$(dec_field "$R/ram_${set}_decode.txt" a 1)
            row "RAM, $name" "pagestream vs bare crop-aware decode loop (images/s)" "$ps_ips" "images/s" \
                "decode_bench $dec_name, $NPROC threads" "$dec_ips" 0.769 "goal: within 1.3x of the ceiling"
            note "RAM, $name" "images/s of each round ($(paste -sd ' ' "$R/ram_${set}_rounds.txt" 2>/dev/null); the best is kept): pagestream $(fmt "$ps_ips" 0) images/s at $(fmt "$ps_cpu" 2) CPU ms/image in its workers; the bare crop-aware loop $(fmt "$dec_ips" 0) images/s at $(fmt "$dec_ms" 2) ms/image; full decode + crop + resize (FFCV's way) $(fmt "$full_ips" 0) images/s; PyTorch $(fmt "${torch_ips:-0}" 0) images/s."
            echo "\"$name\" $ps_ips ${torch_ips:-0} $dec_ips $full_ips" >> "$R/plot_ram.dat"
        else
            skipped "ram/$set decode ceiling" "bench/decode_bench not built or failed"
        fi
    done
    # the doctor's verdict on the realistic set, as a user would see it
    if [ -s "$W/inet.pgs" ]; then
        log "ram: pagestream doctor on the ImageNet-like set"
        "$PS" doctor "$W/inet.pgs" --seconds 3 --cache-size 2G > "$R/ram_doctor.txt" 2>/dev/null \
            || log "doctor failed (see $R/ram_doctor.txt)"
    fi
}

# ================================================================= EBS-like throttled device
in_cgroups() {   # run a command inside the blkio and memory groups
    sh -c 'echo $$ > "$1/cgroup.procs" && echo $$ > "$2/cgroup.procs" && shift 2 && exec "$@"' sh "$CG_BLK" "$CG_MEM" "$@"
}
reset_memcg() { echo 0 > "$CG_MEM/memory.max_usage_in_bytes" 2>/dev/null; echo 0 > "$CG_MEM/memory.failcnt" 2>/dev/null; }

scenario_ebs() {
    [ "$(id -u)" = 0 ] || { skipped ebs "needs root (loop device, cgroups)"; return; }
    [ -w /sys/fs/cgroup/blkio ] && [ -w /sys/fs/cgroup/memory ] || { skipped ebs "cgroup v1 blkio/memory not writable"; return; }
    command -v fio >/dev/null || { skipped ebs "fio not installed"; return; }
    local size=4G img_size=5800M mb=60 rssb=40
    [ "$QUICK" = 1 ] && { size=1G; img_size=1700M; mb=12; rssb=8; }
    local jdir
    get_sets && jdir=$INET
    mkdir -p "$W/ebs/mnt"
    MNT=$W/ebs/mnt
    mountpoint -q "$MNT" && umount "$MNT"
    rm -f "$W/ebs/disk.img"
    fallocate -l $img_size "$W/ebs/disk.img" || { skipped ebs "fallocate failed"; return; }
    LOOP=$(losetup --find --show --direct-io=on "$W/ebs/disk.img") || { LOOP=""; skipped ebs "losetup failed"; return; }
    mkfs.ext4 -q -F "$LOOP" && mount "$LOOP" "$MNT" || { skipped ebs "mkfs/mount failed"; return; }
    local ds=$MNT/train.pgs shuf=""
    if [ -n "${jdir:-}" ]; then
        # the ImageNet-like JPEGs repeated to SIZE, listed as an ImageFolder of 1000 classes would list them
        # (class by class) and packed without the shuffle: the worst case for page-level shuffling
        list_jpegs "$jdir" "$R/ebs_jpegs.list"
        "$PY" - "$R/ebs_jpegs.list" "$size" "$W/ebs/sorted.list" "$W/ebs/shuffled.list" <<'EOF2' || { skipped ebs "list failed"; return; }
import os, sys
paths = [l.strip() for l in open(sys.argv[1]) if l.strip()]
units = {"G": 1 << 30, "M": 1 << 20}
want = int(sys.argv[2][:-1]) * units[sys.argv[2][-1]]
mean = sum(os.path.getsize(p) for p in paths) / len(paths)
n = int(want / mean) + len(paths)
with open(sys.argv[3], "w") as f:
    for k in range(n):
        f.write("%s\t%d\n" % (paths[k % len(paths)], k * 1000 // n))
with open(sys.argv[4], "w") as f:          # a quarter as many, for the shuffled (default) pack
    for k in range(0, n, 4):
        f.write("%s\t%d\n" % (paths[k % len(paths)], k * 1000 // n))
EOF2
        log "ebs: packing the ImageNet-like JPEGs repeated to $size, class-sorted, 1000 classes (pack --no-shuffle)"
        "$PS" pack "$W/ebs/sorted.list" -o "$ds" --no-shuffle --no-validate -q > "$R/ebs_pack.txt" 2>&1 \
            || { skipped ebs "pack failed: $(tail -n 1 "$R/ebs_pack.txt")"; return; }
        shuf=$MNT/shuffled.pgs
        log "ebs: packing a quarter of that list with the default shuffle (shuffle-quality reference)"
        "$PS" pack "$W/ebs/shuffled.list" -o "$shuf" --no-validate -q >> "$R/ebs_pack.txt" 2>&1 || shuf=""
    else
        log "ebs: no image set: writing $size of random bytes (storage path only)"
        "$TOOLS/mkpgs" "$ds" --size $size --classes 1000 > "$R/ebs_mkpgs.txt" 2>&1 || { skipped ebs "mkpgs failed"; return; }
    fi
    sync
    for f in "$ds" $shuf; do
        "$PY" -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$f"
    done
    local mm; mm=$(lsblk -dno MAJ:MIN "$LOOP" | tr -d ' ')
    CG_BLK=/sys/fs/cgroup/blkio/psbench.$$; CG_MEM=/sys/fs/cgroup/memory/psbench.$$
    mkdir -p "$CG_BLK" "$CG_MEM" || { skipped ebs "cannot make cgroups"; return; }
    echo "$mm 131072000" > "$CG_BLK/blkio.throttle.read_bps_device"
    echo "$mm 3000" > "$CG_BLK/blkio.throttle.read_iops_device"
    echo 1G > "$CG_MEM/memory.limit_in_bytes"
    local limit_mb; limit_mb=$(calc "131072000/1e6")
    local fsize; fsize=$(stat -c %s "$ds")
    log "ebs: $(numfmt --to=iec "$fsize") dataset on $LOOP ($mm), 125 MiB/s + 3000 IOPS, memory 1 GiB"
    printf 'ebs_dataset=%s samples, %s\n' "$("$PS" inspect "$ds" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["samples"])' 2>/dev/null)" \
        "$(numfmt --to=iec "$fsize")" >> "$R/machine.txt"

    # the measured ceiling: fio sequential O_DIRECT read in the same groups
    log "ebs: fio sequential O_DIRECT read (ceiling)"
    in_cgroups fio --name=ceiling --filename="$ds" --readonly --direct=1 --ioengine=io_uring --rw=read --bs=4M \
        --iodepth=8 --time_based --runtime=10 --ramp_time=2 --output-format=json > "$R/ebs_fio.json" 2> "$R/ebs_fio.err"
    local fio_mb; fio_mb=$(jget "$R/ebs_fio.json" 'd["jobs"][0]["read"]["bw_bytes"]/1e6')
    local common=(--direct --threads "$NPROC" --json)

    log "ebs: pagestream quasi_random, raw bytes (storage path), 1 epoch, cache 512M"
    reset_memcg
    in_cgroups "$PS" bench "$ds" "${common[@]}" --order quasi_random --transform none --cache-size 512M --epochs 1 \
        > "$R/ebs_quasi_none.json" 2> "$R/ebs_quasi_none.err" || log "failed: $(tail -n 2 "$R/ebs_quasi_none.err")"
    if [ -s "$R/ebs_quasi_none.json" ]; then
        local pay rd amp
        pay=$(steady "$R/ebs_quasi_none.json" payload_mb_per_s); rd=$(steady "$R/ebs_quasi_none.json" read_mb_per_s)
        amp=$(steady "$R/ebs_quasi_none.json" amp)
        row "EBS-like (125 MiB/s, 3000 IOPS)" "quasi_random payload bytes/s vs device limit" "$pay" "MB/s" \
            "device limit 125 MiB/s" "$limit_mb" 0.95 "O_DIRECT, cache 512M, memory cgroup 1G, raw bytes"
        [ -n "$fio_mb" ] && row "EBS-like (125 MiB/s, 3000 IOPS)" "quasi_random payload bytes/s vs fio seq read" "$pay" "MB/s" \
            "fio seq 4M QD8 O_DIRECT" "$fio_mb" - "same cgroups"
        note "EBS-like (125 MiB/s, 3000 IOPS)" "quasi_random: read $(fmt "$rd") MB/s from the device ($(calc "round(100*$rd/$limit_mb,1)")% of the limit), payload $(fmt "$pay") MB/s; read amplification $(fmt "$amp" 3) (page fill and page slack); fio sequential: $(fmt "${fio_mb:-0}") MB/s; peak RSS $(numfmt --to=iec "$(jget "$R/ebs_quasi_none.json" 'd["peak_rss"]')") in a 1 GiB memory cgroup (max usage $(numfmt --to=iec "$(cat "$CG_MEM/memory.max_usage_in_bytes")"), oom_kill $(awk '/oom_kill / {print $2}' "$CG_MEM/memory.oom_control"))."
        echo "\"EBS quasi-random\" $(calc "100*$pay/$limit_mb") 95" >> "$R/plot_storage.dat"
    fi

    log "ebs: pagestream quasi_random with decode (rrc 224), $mb batches"
    in_cgroups "$PS" bench "$ds" "${common[@]}" --order quasi_random --transform rrc --cache-size 512M --epochs 1 \
        --max-batches $mb > "$R/ebs_quasi_rrc.json" 2> "$R/ebs_quasi_rrc.err" || log "failed: $(tail -n 2 "$R/ebs_quasi_rrc.err")"
    if [ -s "$R/ebs_quasi_rrc.json" ] && [ "$(jget "$R/ebs_quasi_rrc.json" 'd["epochs"][0]["images"]')" != 0 ]; then
        local pay ips
        pay=$(steady "$R/ebs_quasi_rrc.json" payload_mb_per_s); ips=$(steady "$R/ebs_quasi_rrc.json" images_per_s)
        row "EBS-like (125 MiB/s, 3000 IOPS)" "quasi_random + decode: payload bytes/s vs device limit" "$pay" "MB/s" \
            "device limit 125 MiB/s" "$limit_mb" - "$(fmt "$ips" 0) images/s decoded, $mb batches"
    fi

    log "ebs: pagestream random order (single-sample reads), raw bytes, $mb batches"
    in_cgroups "$PS" bench "$ds" "${common[@]}" --order random --transform none --cache-size 512M --epochs 1 \
        --max-batches $mb > "$R/ebs_random.json" 2> "$R/ebs_random.err" || log "failed: $(tail -n 2 "$R/ebs_random.err")"
    if [ -s "$R/ebs_random.json" ]; then
        local pay rd amp
        pay=$(steady "$R/ebs_random.json" payload_mb_per_s); rd=$(steady "$R/ebs_random.json" read_mb_per_s)
        amp=$(steady "$R/ebs_random.json" amp)
        row "EBS-like (125 MiB/s, 3000 IOPS)" "random payload bytes/s vs device limit" "$pay" "MB/s" \
            "device limit 125 MiB/s" "$limit_mb" - "single-sample reads (sample_reads=$(jget "$R/ebs_random.json" 'd["sample_reads"]'))"
        note "EBS-like (125 MiB/s, 3000 IOPS)" "random: read $(fmt "$rd") MB/s, payload $(fmt "$pay") MB/s, read amplification $(fmt "$amp" 3) (4 KiB alignment of O_DIRECT single-sample reads); $(jget "$R/ebs_random.json" 'round(d["epochs"][0]["images"]/d["epochs"][0]["seconds"])') reads/s against the 3000 IOPS limit."
        echo "\"EBS random\" $(calc "100*$pay/$limit_mb") 0" >> "$R/plot_storage.dat"
    fi

    # issue 4's figures: peak RSS and shuffle quality against --cache-size
    local cs
    for cs in 128M 256M 512M; do
        log "ebs: peak RSS and shuffle quality at --cache-size $cs (quasi_random, rrc, $rssb batches)"
        reset_memcg
        in_cgroups "$PS" bench "$ds" "${common[@]}" --order quasi_random --transform rrc --cache-size $cs --epochs 1 \
            --max-batches $rssb > "$R/ebs_rss_$cs.json" 2> "$R/ebs_rss_$cs.err" || { log "failed: $(tail -n 2 "$R/ebs_rss_$cs.err")"; continue; }
        local f=$R/ebs_rss_$cs.json cgmax shq="" shref=""
        cgmax=$(cat "$CG_MEM/memory.max_usage_in_bytes")
        if [ -n "$shuf" ]; then
            in_cgroups "$PS" bench "$shuf" "${common[@]}" --order quasi_random --transform none --cache-size $cs \
                --epochs 1 --max-batches 12 > "$R/ebs_shuf_$cs.json" 2> "$R/ebs_shuf_$cs.err" \
                && { shq=$(jget "$R/ebs_shuf_$cs.json" 'd["epochs"][0]["classes_per_batch"]'); shref=$(jget "$R/ebs_shuf_$cs.json" 'd["reference_classes_per_batch"]'); }
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cs" "$(jget "$f" 'd["cache_bytes"]')" "$(jget "$f" 'd["fixed_bytes"]')" \
            "$(jget "$f" 'd["peak_rss"]')" "$cgmax" \
            "$(jget "$f" 'd["epochs"][0]["classes_per_batch"]')" "$(jget "$f" 'd["reference_classes_per_batch"]')" \
            "$(jget "$f" 'd["window_pages"]')" "$(steady "$f" payload_mb_per_s)" "$shq" "$shref" >> "$R/memory.tsv"
    done

    # tear down now: the other scenarios need neither the device nor the groups
    umount "$MNT" && MNT=""
    losetup -d "$LOOP" && LOOP=""
    rmdir "$CG_BLK" "$CG_MEM" 2>/dev/null && { CG_BLK=""; CG_MEM=""; }
    [ "${BENCH_KEEP:-0}" = 1 ] || rm -f "$W/ebs/disk.img"
}

# ================================================================= network datasets (S3, HTTP, NFS)
NET_DS=""
NET_EPOCHS=3 NET_CACHE=256M
[ "$QUICK" = 1 ] && { NET_EPOCHS=2; NET_CACHE=64M; }
net_dataset() {   # a 1 GiB raw-bytes dataset shared by S3, HTTP and NFS (pagestream runs NET_EPOCHS epochs over it)
    local size=1G
    [ "$QUICK" = 1 ] && size=256M
    NET_DS=$W/net.pgs
    if [ ! -s "$NET_DS" ]; then
        log "net: writing a $size dataset of random bytes (mkpgs)"
        "$TOOLS/mkpgs" "$NET_DS" --size $size --classes 1000 > "$R/net_mkpgs.txt" 2>&1 || return 1
    fi
}

ceiling_mb() { sed -n 's/.*MiB\/s=\([0-9.]*\).*/\1/p' "$1" | awk '{printf "%.3f", $1 * 1.048576}'; }

scenario_s3() {
    # shellcheck source=../tests/servers/swift.sh
    [ -f tests/servers/swift.sh ] || { skipped s3 "tests/servers/swift.sh missing"; return; }
    source tests/servers/swift.sh
    net_dataset || { skipped s3 "mkpgs failed"; return; }
    log "s3: starting Swift (s3api) on loopback"
    swift_start || { skipped s3 "$SWIFT_WHY"; return; }
    SERVERS="$SERVERS swift"
    local netrc=$W/swift.netrc size par=8
    size=$(stat -c %s "$NET_DS")
    printf 'machine 127.0.0.1 login test:tester password testing\n' > "$netrc"
    local sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --netrc-file "$netrc")
    curl -sf "${sig[@]}" -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
        -X PUT "$SWIFT_URL/psbench" -o /dev/null || { skipped s3 "bucket creation failed"; swift_stop; return; }
    log "s3: uploading $(numfmt --to=iec "$size")"
    curl -sf "${sig[@]}" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$NET_DS" "$SWIFT_URL/psbench/net.pgs" -o /dev/null \
        || { skipped s3 "upload failed"; swift_stop; return; }
    local r
    for r in $(seq "$ROUNDS"); do
        log "s3 round $r/$ROUNDS: curl_ceiling, 4 MiB range GETs, $par in parallel, SigV4"
        "$TOOLS/curl_ceiling" "$SWIFT_URL/psbench/net.pgs" "$size" 4M $par $((2 * size)) --sigv4 "test:tester:testing:us-east-1" \
            > "$R/s3_ceiling.$r.txt" 2>&1 || log "curl_ceiling reported errors: $(tail -n 2 "$R/s3_ceiling.$r.txt")"
        log "s3 round $r/$ROUNDS: pagestream bench s3:// (raw bytes, quasi_random, queue depth $par, $NET_EPOCHS epochs)"
        AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 \
            "$PS" bench s3://psbench/net.pgs --endpoint "$SWIFT_URL" --transform none --order quasi_random \
            --queue-depth $par --cache-size $NET_CACHE --epochs $NET_EPOCHS --threads "$NPROC" --json > "$R/s3_ps.$r.json" 2> "$R/s3_ps.err" \
            || log "pagestream failed: $(tail -n 2 "$R/s3_ps.err")"
        if [ -x "$TOOLS/io_read" ]; then
            log "s3 round $r/$ROUNDS: io_read (pagestream's s3 backend alone, 4 MiB reads, queue depth $par)"
            AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 \
                "$TOOLS/io_read" s3://psbench/net.pgs --endpoint "$SWIFT_URL" --qd $par --bs 4M > "$R/s3_ioread.$r.txt" 2>&1 \
                || log "io_read failed: $(tail -n 1 "$R/s3_ioread.$r.txt")"
        fi
    done
    net_best s3
    log "s3: diagnostic: pagestream with --order sequential (read-ahead not bounded by a window)"
    AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 \
        "$PS" bench s3://psbench/net.pgs --endpoint "$SWIFT_URL" --transform none --order sequential \
        --queue-depth $par --cache-size $NET_CACHE --epochs $NET_EPOCHS --threads "$NPROC" --json > "$R/s3_seq.json" 2> "$R/s3_seq.err" \
        || rm -f "$R/s3_seq.json"
    net_rows "S3 (Swift s3api, loopback)" s3 "curl multi range GETs + SigV4, $par parallel"
    swift_stop
}

net_best() {  # PREFIX: keep the best round of the ceiling and of pagestream
    {
        best_of ceiling "$R/$1_ceiling.txt" "$R"/$1_ceiling.[0-9]*.txt
        best_of ps_read "$R/$1_ps.json" "$R"/$1_ps.[0-9]*.json
        best_of ceiling "$R/$1_ioread.txt" "$R"/$1_ioread.[0-9]*.txt | sed 's/^ceiling/io_read/'
    } > "$R/$1_rounds.txt"
}

net_rows() {  # SCENARIO PREFIX CEILING_DESC
    local scen=$1 p=$2 desc=$3 cmb pay rd amp
    cmb=$(ceiling_mb "$R/${p}_ceiling.txt")
    if [ ! -s "$R/${p}_ps.json" ]; then skipped "$p" "pagestream bench failed: $(tail -n 2 "$R/${p}_ps.err" | tr '\n' ' ')"; return; fi
    if [ -z "$cmb" ]; then skipped "$p" "ceiling failed: $(tail -n 2 "$R/${p}_ceiling.txt" | tr '\n' ' ')"; return; fi
    pay=$(steady "$R/${p}_ps.json" payload_mb_per_s); rd=$(steady "$R/${p}_ps.json" read_mb_per_s)
    amp=$(steady "$R/${p}_ps.json" amp)
    # like for like: bytes pagestream fetched per second against bytes the plain loop fetched per second
    row "$scen" "bytes read/s vs raw range-GET ceiling" "$rd" "MB/s" "$desc" "$cmb" 0.9 \
        "4 MiB pages, cache $NET_CACHE, raw bytes"
    row "$scen" "payload bytes/s vs the same ceiling" "$pay" "MB/s" "$desc" "$cmb" - \
        "payload includes pages kept in the cache across epoch boundaries"
    note "$scen" "pagestream read $(fmt "$rd") MB/s, delivered $(fmt "$pay") MB/s of payload (read amplification $(fmt "$amp" 3): pages kept in the cache from one epoch to the next are not read again), $(jget "$R/${p}_ps.json" 'd["retries"]') retries; ceiling $(fmt "$cmb") MB/s ($(sed -n 's/.*\(requests=[0-9]*\).*/\1/p' "$R/${p}_ceiling.txt")); rounds (MiB/s of the ceiling and of io_read, MB/s read by pagestream; best of each kept): $(paste -sd ' ' "$R/${p}_rounds.txt" 2>/dev/null)."
    echo "\"${p^^}\" $(calc "100*$rd/$cmb") 90" >> "$R/plot_storage.dat"
    local iomb
    iomb=$(ceiling_mb "$R/${p}_ioread.txt" 2>/dev/null)
    [ -n "$iomb" ] && row "$scen" "bytes read/s vs pagestream's backend alone" "$rd" "MB/s" \
        "io_read: the $p backend, QD 8, 4 MiB sequential" "$iomb" - "separates the backend's share of a gap from the loader's"
    if [ -s "$R/${p}_seq.json" ]; then
        row "$scen" "diagnostic: order sequential, bytes read/s vs the ceiling" "$(steady "$R/${p}_seq.json" read_mb_per_s)" "MB/s" \
            "$desc" "$cmb" - "no quasi-random window: read-ahead is bounded by the cache only"
    fi
}

scenario_http() {
    [ -f tests/servers/nginx.sh ] || { skipped http "tests/servers/nginx.sh missing"; return; }
    # shellcheck source=../tests/servers/nginx.sh
    source tests/servers/nginx.sh
    net_dataset || { skipped http "mkpgs failed"; return; }
    log "http: starting nginx (+50 ms first-byte latency on /delay/)"
    nginx_start || { skipped http "$NGINX_WHY"; return; }
    SERVERS="$SERVERS nginx"
    mkdir -p "$TB/www"
    ln -f "$NET_DS" "$TB/www/net.pgs" 2>/dev/null || cp "$NET_DS" "$TB/www/net.pgs"
    local url=$NGINX_URL/delay/net.pgs size par=8 lat
    size=$(stat -c %s "$NET_DS")
    lat=$(curl -s -o /dev/null -r 0-0 -w '%{time_starttransfer}' "$url")
    local r
    for r in $(seq "$ROUNDS"); do
        log "http round $r/$ROUNDS: curl_ceiling, 4 MiB range GETs, $par in parallel (first byte after ${lat}s)"
        "$TOOLS/curl_ceiling" "$url" "$size" 4M $par $((2 * size)) > "$R/http_ceiling.$r.txt" 2>&1 \
            || log "curl_ceiling reported errors: $(tail -n 2 "$R/http_ceiling.$r.txt")"
        log "http round $r/$ROUNDS: pagestream bench http:// (raw bytes, quasi_random, queue depth $par, $NET_EPOCHS epochs)"
        "$PS" bench "$url" --transform none --order quasi_random --queue-depth $par --cache-size $NET_CACHE \
            --epochs $NET_EPOCHS --threads "$NPROC" --json > "$R/http_ps.$r.json" 2> "$R/http_ps.err" \
            || log "pagestream failed: $(tail -n 2 "$R/http_ps.err")"
        if [ -x "$TOOLS/io_read" ]; then
            log "http round $r/$ROUNDS: io_read (pagestream's http backend alone, 4 MiB reads, queue depth $par)"
            "$TOOLS/io_read" "$url" --qd $par --bs 4M > "$R/http_ioread.$r.txt" 2>&1 || log "io_read failed: $(tail -n 1 "$R/http_ioread.$r.txt")"
        fi
    done
    net_best http
    log "http: diagnostic: pagestream with --order sequential (read-ahead not bounded by a window)"
    "$PS" bench "$url" --transform none --order sequential --queue-depth $par --cache-size $NET_CACHE \
        --epochs $NET_EPOCHS --threads "$NPROC" --json > "$R/http_seq.json" 2> "$R/http_seq.err" || rm -f "$R/http_seq.json"
    net_rows "HTTP (nginx, +50 ms first byte)" http "curl multi range GETs, $par parallel"
    note "HTTP (nginx, +50 ms first byte)" "measured time to first byte through /delay/: ${lat} s."
    nginx_stop
    rm -f "$TB/www/net.pgs"
}

scenario_nfs() {
    [ -f tests/servers/nfs.sh ] || { skipped nfs "tests/servers/nfs.sh missing"; return; }
    # shellcheck source=../tests/servers/nfs.sh
    source tests/servers/nfs.sh
    net_dataset || { skipped nfs "mkpgs failed"; return; }
    log "nfs: starting nfs-ganesha"
    nfs_start || { skipped nfs "${NFS_WHY:-nfs_start failed}"; return; }
    SERVERS="$SERVERS nfs"
    cp "$NET_DS" "$NFS_EXPORT/net.pgs"
    local url=$NFS_URL/net.pgs size t0 t1
    size=$(stat -c %s "$NET_DS")
    log "nfs: ceiling: nfs-cat to /dev/null"
    t0=$(date +%s.%N)
    if nfs-cat "$url" > /dev/null 2> "$R/nfs_ceiling.err"; then
        t1=$(date +%s.%N)
        printf 'curl_ceiling: nfs-cat bytes=%s seconds=%s MiB/s=%s\n' "$size" "$(calc "$t1-$t0")" \
            "$(calc "$size/($t1-$t0)/1048576")" > "$R/nfs_ceiling.txt"
    else
        : > "$R/nfs_ceiling.txt"
    fi
    if [ -x "$TOOLS/io_read" ]; then
        log "nfs: io_read (ps_io nfs backend alone, 4 MiB reads, queue depth 8)"
        "$TOOLS/io_read" "$url" --qd 8 --bs 4M --total "$size" > "$R/nfs_ioread.txt" 2>&1 || log "io_read failed: $(tail -n 1 "$R/nfs_ioread.txt")"
    fi
    log "nfs: pagestream bench nfs:// (raw bytes, quasi_random, $NET_EPOCHS epochs)"
    "$PS" bench "$url" --transform none --order quasi_random --cache-size $NET_CACHE --epochs $NET_EPOCHS --threads "$NPROC" --json \
        > "$R/nfs_ps.json" 2> "$R/nfs_ps.err" || log "pagestream failed: $(tail -n 2 "$R/nfs_ps.err")"
    if [ -s "$R/nfs_ps.json" ] && [ -s "$R/nfs_ceiling.txt" ]; then
        local pay cmb
        pay=$(steady "$R/nfs_ps.json" payload_mb_per_s); cmb=$(ceiling_mb "$R/nfs_ceiling.txt")
        row "NFS (nfs-ganesha, loopback)" "payload bytes/s vs nfs-cat to /dev/null" "$pay" "MB/s" \
            "nfs-cat (libnfs, sequential)" "$cmb" - "4 MiB pages, cache $NET_CACHE, raw bytes"
        local iomb; iomb=$(sed -n 's/.*MiB\/s=\([0-9.]*\).*/\1/p' "$R/nfs_ioread.txt" 2>/dev/null | awk '{printf "%.3f", $1 * 1.048576}')
        [ -n "$iomb" ] && row "NFS (nfs-ganesha, loopback)" "payload bytes/s vs the nfs backend alone" "$pay" "MB/s" \
            "io_read: ps_io nfs, QD 8, 4 MiB sequential" "$iomb" - "the loader's overhead over its own backend"
        note "NFS (nfs-ganesha, loopback)" "pagestream read $(fmt "$(steady "$R/nfs_ps.json" read_mb_per_s)") MB/s; nfs-cat streamed the file in $(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' "$R/nfs_ceiling.txt") s."
        echo "\"NFS (vs nfs-cat)\" $(calc "100*$pay/$cmb") 0" >> "$R/plot_storage.dat"
    else
        skipped nfs "pagestream or the ceiling failed: $(tail -n 2 "$R/nfs_ps.err" "$R/nfs_ceiling.err" 2>/dev/null | tr '\n' ' ')"
    fi
    nfs_stop
    rm -f "$NFS_EXPORT/net.pgs"
}

# ================================================================= run
for s in $SCEN; do
    case $s in
        ram|ebs|s3|http|nfs) log "=== scenario $s"; "scenario_$s" ;;
        *) die "unknown scenario $s (ram ebs s3 http nfs)" ;;
    esac
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$R/machine.txt"
echo "seconds=$(( $(date +%s) - T_START ))" >> "$R/machine.txt"

# ================================================================= RESULTS.md and the plot
log "writing $OUT/RESULTS.md"
"$PY" bench/render.py "$R" "$OUT/RESULTS.md" || die "render failed"
if command -v gnuplot >/dev/null; then
    gnuplot -e "dir='$R'; out='$OUT/results.png'" bench/plot.gp 2> "$R/gnuplot.err" \
        && log "wrote $OUT/results.png" || log "gnuplot failed: $(tail -n 3 "$R/gnuplot.err")"
else
    log "gnuplot not installed: no plot"
fi
cat "$OUT/RESULTS.md" | sed -n '/^| scenario/,/^$/p'
log "done in $(( $(date +%s) - T_START )) s"
