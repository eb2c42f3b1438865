#!/usr/bin/env bash
# nfs:// through libnfs against a real NFS server in userspace (nfs-ganesha,
# tests/servers/nfs.sh): bytes equal over NFSv3 and NFSv4, a dataset verified,
# a path with a space in a subfolder, clear errors for a missing file and a
# missing export, the fault matrix, and the read rate.
source "$(dirname "$0")/lib.sh" "$1"
source "$ROOT/tests/servers/nfs.sh"
IOR="$BUILD/bench/io_read"
D="$TB/it_nfs"
rm -rf "$D"
mkdir -p "$D"
TB_SAVED=$TB
TB=$D
trap 'nfs_stop; rm -rf "$D"' EXIT

for t in "$IOR" "$BUILD/bench/mkpgs"; do
    [ -x "$t" ] || { fail nfs_tools "$t not built"; exit 0; }
done
if ! grep -q '^Libs.private:.*-lnfs' "$BUILD/pagestream.pc"; then
    expect_fail nfs_unavailable_message "built without libnfs; nfs:// is unavailable \(install libnfs-dev and rebuild\)" \
        "$IOR" nfs://127.0.0.1/export/x
    skip nfs_all "this build has no libnfs (install libnfs-dev and rebuild)"
    exit 0
fi
if ! nfs_start; then
    skip nfs_all "$NFS_WHY"
    exit 0
fi
ok nfs_ganesha_started
E=$NFS_EXPORT
head -c $((40 << 20)) /dev/urandom > "$E/obj.bin"
mkdir -p "$E/sub dir"
head -c 3000001 /dev/urandom > "$E/sub dir/odd size.bin"
"$BUILD/bench/mkpgs" "$E/d.pgs" --size 24M > "$D/mkpgs.log" 2>&1 || { fail nfs_mkpgs "$(tail -n 1 "$D/mkpgs.log")"; exit 0; }
SIZE=$(stat -c %s "$E/obj.bin")

same_bytes() { # name url file off len [io_read args]
    local name=$1 url=$2 file=$3 off=$4 len=$5; shift 5
    if ! "$IOR" "$url" --dump "$off" "$len" "$@" > "$D/got.bin" 2> "$D/err.txt"; then
        fail "$name" "$(tail -n 1 "$D/err.txt")"; return
    fi
    tail -c +$((off + 1)) "$file" | head -c "$len" > "$D/want.bin"
    if cmp -s "$D/got.bin" "$D/want.bin"; then ok "$name"; else fail "$name" "bytes differ"; fi
}
same_bytes nfs_v3_bytes "$NFS_URL/obj.bin" "$E/obj.bin" 0 "$SIZE" --bs 4M
same_bytes nfs_v3_odd_range "$NFS_URL/obj.bin" "$E/obj.bin" 4097 9999999 --bs 3M
same_bytes nfs_v4_bytes "$NFS_URL/obj.bin?version=4" "$E/obj.bin" 0 "$SIZE" --bs 4M
same_bytes nfs_space_in_path "$NFS_URL/sub%20dir/odd%20size.bin" "$E/sub dir/odd size.bin" 0 3000001
check nfs_verify_dataset "$PS" verify "$NFS_URL/d.pgs"
expect_fail nfs_missing_file "export/nope.bin: cannot open /nope.bin in export /export: .*NOENT" \
    "$IOR" "$NFS_URL/nope.bin"
expect_fail nfs_missing_export "no export of 127.0.0.1 contains /elsewhere/x.bin" \
    "$IOR" "nfs://127.0.0.1/elsewhere/x.bin"
expect_fail nfs_bad_option "unknown option \"foo=1\"" "$IOR" "$NFS_URL/obj.bin?foo=1"

F="seed=5,error=0.05,http429=0.01,reset=0.01,short=0.05,stall=0.001,stall_ms=500"
if out=$("$IOR" "$NFS_URL/obj.bin" --bs 1M --qd 8 --fault "$F" 2>&1); then
    r=$(printf '%s' "$out" | grep -o 'retries=[0-9]*' | cut -d= -f2)
    f=$(printf '%s' "$out" | grep -o 'faults=[0-9]*' | cut -d= -f2)
    if [ "${f:-0}" -gt 0 ]; then ok "nfs_fault_matrix ($f faults, $r retries, 40 reads)"; else fail nfs_fault_matrix "$out"; fi
else
    fail nfs_fault_matrix "$(printf '%s' "$out" | tail -n 1)"
fi
PAGESTREAM_FAULT="$F" same_bytes nfs_fault_matrix_bytes "$NFS_URL/obj.bin" "$E/obj.bin" 0 "$SIZE" --bs 1M

out=$("$IOR" "$NFS_URL/obj.bin" --bs 4M --qd 8 --time 2 2>&1)
echo "throughput nfs (ganesha, loopback): $(printf '%s' "$out" | grep -o 'MiB/s=[0-9.]*')"
if printf '%s' "$out" | grep -q 'MiB/s='; then ok nfs_throughput_measured; else fail nfs_throughput_measured "$out"; fi
TB=$TB_SAVED
