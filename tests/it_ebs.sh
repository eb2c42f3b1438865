#!/usr/bin/env bash
# EBS-like volume: a loop device (direct I/O) with ext4, throttled by a
# cgroup-v1 blkio group to 125 MiB/s and 3000 IOPS (TESTBED.md §4). Inside the
# group, fio (io_uring, O_DIRECT) sets the ceiling and io_read (ps_io) must
# reach >= 90% of it; io_read's bytes must match the file's.
source "$(dirname "$0")/lib.sh" "$1"
IOR="$BUILD/bench/io_read"
CGROOT=/sys/fs/cgroup/blkio
RUNTIME=${EBS_RUNTIME:-6}
THRESHOLD=${EBS_THRESHOLD:-0.90}

why=""
is_root || why="needs root (loop device, mount, cgroup)"
[ -z "$why" ] && for c in losetup mkfs.ext4 fio lsblk sha256sum; do
    command -v $c >/dev/null || { why="$c not installed"; break; }
done
[ -z "$why" ] && [ ! -w "$CGROOT/blkio.throttle.read_bps_device" ] && why="no cgroup-v1 blkio throttle at $CGROOT"
[ -z "$why" ] && [ ! -x "$IOR" ] && why="$IOR not built"
if [ -n "$why" ]; then
    skip ebs "$why"
    exit 0
fi

D=$TB/ebs_$$
CG=$CGROOT/pagestream_ebs_$$
LOOP=""
cleanup() {
    # nothing may be left in the group, or rmdir fails: move stragglers (and this shell) to the root
    if [ -d "$CG" ]; then
        echo $$ > "$CGROOT/cgroup.procs" 2>/dev/null
        while read -r p; do kill "$p" 2>/dev/null; echo "$p" > "$CGROOT/cgroup.procs" 2>/dev/null; done < "$CG/cgroup.procs"
        rmdir "$CG" 2>/dev/null
    fi
    mountpoint -q "$D/mnt" 2>/dev/null && umount "$D/mnt"
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mkdir -p "$D/mnt"
fallocate -l 1G "$D/disk.img" || { fail ebs_setup "fallocate failed"; exit 0; }
if ! LOOP=$(losetup --find --show --direct-io=on "$D/disk.img" 2>&1); then
    skip ebs "no free loop device: $LOOP"
    LOOP=""
    exit 0
fi
mkfs.ext4 -q -F "$LOOP" >/dev/null 2>&1 && mount "$LOOP" "$D/mnt" || { fail ebs_setup "mkfs/mount of $LOOP failed"; exit 0; }
F=$D/mnt/data.bin
# random bytes, so a block read from the wrong offset cannot look right
dd if=/dev/urandom of="$F" bs=4M count=128 oflag=direct status=none || { fail ebs_setup "writing $F failed"; exit 0; }
MM=$(lsblk -dno MAJ:MIN "$LOOP" | tr -d ' ')
mkdir "$CG" || { fail ebs_setup "cannot create $CG"; exit 0; }
echo "$MM 131072000" > "$CG/blkio.throttle.read_bps_device"   # 125 MiB/s
echo "$MM 3000" > "$CG/blkio.throttle.read_iops_device"
echo "# loop $LOOP ($MM), 512 MiB file, throttle 125 MiB/s + 3000 IOPS, ${RUNTIME}s per run"

in_cg() { sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$@"; }
cg_read_bytes() { awk -v mm="$MM" '$1 == mm && $2 == "Read" { print $3 }' "$CG/blkio.throttle.io_service_bytes"; }

# 1) the bytes: whole file through ps_io (O_DIRECT) against pread, and a region against dd
check ebs_verify_direct "$IOR" "$F" --direct --bs 4M --qd 8 --verify
h1=$("$IOR" "$F" --direct --dump 100M 64M | sha256sum | cut -d' ' -f1)
h2=$(dd if="$F" bs=1M skip=100 count=64 iflag=direct status=none | sha256sum | cut -d' ' -f1)
[ -n "$h1" ] && [ "$h1" = "$h2" ] && ok ebs_dump_matches_dd || fail ebs_dump_matches_dd "io_read $h1 vs dd $h2"

# 2) throughput inside the group: fio ceiling vs io_read, at two queue depths
for qd in 8 16; do
    fj=$D/fio_$qd.json
    if ! in_cg fio --name=ceiling --filename="$F" --size=512M --direct=1 --ioengine=io_uring --time_based \
        --runtime="$RUNTIME" --ramp_time=1 --rw=read --bs=4M --iodepth=$qd --output-format=json > "$fj" 2>"$D/fio.err"; then
        fail ebs_fio_qd$qd "$(tail -n 2 "$D/fio.err")"
        continue
    fi
    fio_mib=$(/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.1f' % (d['jobs'][0]['read']['bw_bytes'] / 1048576))" "$fj")
    before=$(cg_read_bytes)
    if ! out=$(in_cg "$IOR" "$F" --direct --bs 4M --qd $qd --time "$RUNTIME" 2>&1); then
        fail ebs_io_read_qd$qd "$out"
        continue
    fi
    after=$(cg_read_bytes)
    echo "# $out"
    ior_mib=$(printf '%s\n' "$out" | sed -n 's/.*MiB\/s=\([0-9.]*\).*/\1/p')
    ior_bytes=$(printf '%s\n' "$out" | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')
    ratio=$(awk -v a="$ior_mib" -v b="$fio_mib" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
    echo "# qd $qd: fio $fio_mib MiB/s, io_read $ior_mib MiB/s, ratio $ratio (pass >= $THRESHOLD)"
    # the reads went to the throttled device, not a cache: the group saw them
    dev=$(( ${after:-0} - ${before:-0} ))
    [ "$dev" -ge "$ior_bytes" ] && ok ebs_io_read_through_device_qd$qd \
        || fail ebs_io_read_through_device_qd$qd "device read $dev bytes, io_read reported $ior_bytes"
    # and the throttle is what limits both (125 MiB/s): neither can be above it by much
    awk -v a="$ior_mib" 'BEGIN { exit !(a < 140) }' && ok ebs_throttled_qd$qd \
        || fail ebs_throttled_qd$qd "io_read at $ior_mib MiB/s: throttle not in effect"
    awk -v r="$ratio" -v t="$THRESHOLD" 'BEGIN { exit !(r >= t) }' && ok ebs_ratio_qd$qd \
        || fail ebs_ratio_qd$qd "io_read $ior_mib MiB/s is $ratio of fio's $fio_mib MiB/s (< $THRESHOLD)"
done
exit 0
