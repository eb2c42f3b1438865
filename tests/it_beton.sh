#!/usr/bin/env bash
# tests/it_beton.sh - FFCV .beton files through the CLI: inspect, verify, cat against the
# manifests, convert to .pgs (bytes kept, checksums gained), damaged copies, s3:// through the
# local Swift server, and bench of .beton versus the same data as .pgs.
source "$(dirname "$0")/lib.sh" "$1"

FX=$ROOT/../shared/fixtures/ffcv
PY=/usr/bin/python3
JPG=ffcv_jpg_int
RAW=ffcv_raw_int_float_bytes
if [ ! -f "$FX/$JPG.beton" ] || [ ! -f "$FX/$RAW.beton" ] || [ ! -f "$FX/$JPG.manifest.json" ]; then
    skip beton_all "FFCV fixtures not found in $FX (../shared/fixtures/ffcv from the repository root)"
    exit 0
fi
if [ ! -x "$PS" ]; then
    fail beton_cli "$PS not built"
    exit 1
fi
W=$TB/beton.$$
rm -rf "$W"
mkdir -p "$W"
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    if declare -f swift_stop >/dev/null; then swift_stop; fi
    rm -rf "$W"
}
trap cleanup EXIT

# manifest lookups: mf FILE INDEX KEY
mf() {
    "$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["samples"][int(sys.argv[2])][sys.argv[3]])' \
        "$FX/$1.manifest.json" "$2" "$3"
}

# ---- inspect ----
out=$("$PS" inspect "$FX/$JPG.beton" 2>&1)
if grep -q '^format: *beton version 2' <<<"$out" && grep -q '^samples: *300$' <<<"$out" &&
    grep -q '^fields: *image (image), label (int)$' <<<"$out" && grep -q 'checksums: *none' <<<"$out"; then
    ok beton_inspect_jpg
else fail beton_inspect_jpg "$(head -c 400 <<<"$out")"; fi
out=$("$PS" inspect "$FX/$RAW.beton" 2>&1)
if grep -q '^samples: *300$' <<<"$out" &&
    grep -q '^fields: *image (image), label (int), score (float), blob (bytes)$' <<<"$out"; then
    ok beton_inspect_raw
else fail beton_inspect_raw "$(head -c 400 <<<"$out")"; fi

# --json: sample count and field names/types against the manifests' info
for b in $JPG $RAW; do
    if "$PS" inspect --json "$FX/$b.beton" >"$W/$b.json" 2>"$W/err" &&
        r=$("$PY" - "$W/$b.json" "$FX/$b.manifest.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); m = json.load(open(sys.argv[2]))["info"]
types = {0: "float", 1: "int", 2: "image", 3: "bytes"}
want = [(f["name"], types[f["type_id"]]) for f in m["fields"]]
got = [(f["name"], f["type"]) for f in j["fields"]]
bad = []
if j["format"] != "beton": bad.append("format %s" % j["format"])
if j["samples"] != 300 or m["num_samples"] != 300: bad.append("samples %s" % j["samples"])
if j["page_size"] != m["page_size"]: bad.append("page size %s" % j["page_size"])
if got != want: bad.append("fields %s != %s" % (got, want))
if j["label_field"] != "label" or j["image_field"] != "image": bad.append("label/image field")
if j["page_checksums"] or j["sample_checksums"]: bad.append("claims checksums")
print("; ".join(bad))
EOF
        ) && [ -z "$r" ]; then
        ok "beton_inspect_json_$b"
    else fail "beton_inspect_json_$b" "${r:-$(tail -n 2 "$W/err")}"; fi
done

# ---- verify: passes and says there is nothing to checksum ----
for b in $JPG $RAW; do
    out=$("$PS" verify "$FX/$b.beton" 2>&1)
    rc=$?
    if [ "$rc" = 0 ] && grep -q '300 samples' <<<"$out" && grep -qi 'no checksums' <<<"$out"; then
        ok "beton_verify_$b"
    else fail "beton_verify_$b" "rc=$rc: $out"; fi
done

# ---- cat: the bytes at the manifest's pointer ----
cat_vs_manifest() { # NAME FILE INDEX FIELD
    local ptr size
    if ! ptr=$(mf "$2" "$3" "$4.ptr") || ! size=$(mf "$2" "$3" "$4.size"); then
        fail "$1" "manifest lookup"
        return
    fi
    dd if="$FX/$2.beton" of="$W/want" iflag=skip_bytes,count_bytes skip="$ptr" count="$size" bs=65536 status=none
    if ! "$PS" cat "$FX/$2.beton" "$3" --field "$4" >"$W/got" 2>"$W/err"; then
        fail "$1" "$(tail -n 1 "$W/err")"
    elif [ "$(stat -c %s "$W/want")" != "$size" ]; then
        fail "$1" "dd got $(stat -c %s "$W/want") bytes, wanted $size"
    elif cmp -s "$W/want" "$W/got"; then ok "$1"
    else fail "$1" "cat $2 $3 --field $4 differs from $size bytes at $ptr"; fi
}
cat_vs_manifest beton_cat_jpg_17_image $JPG 17 image
cat_vs_manifest beton_cat_raw_17_image $RAW 17 image
cat_vs_manifest beton_cat_raw_17_blob $RAW 17 blob
want=$(mf $RAW 17 label); got=$("$PS" cat "$FX/$RAW.beton" 17 --field label 2>&1)
if [ "$got" = "$want" ]; then ok beton_cat_label; else fail beton_cat_label "got '$got', manifest '$want'"; fi
want=$(mf $RAW 17 score); got=$("$PS" cat "$FX/$RAW.beton" 17 --field score 2>&1)
if "$PY" -c 'import sys; sys.exit(float(sys.argv[1]) != float(sys.argv[2]))' "$got" "$want" 2>/dev/null; then
    ok beton_cat_float
else fail beton_cat_float "got '$got', manifest '$want'"; fi

# ---- convert, then verify; the .pgs holds the same bytes per sample ----
# indices 0..99 lie in page 2 of the JPEG fixture, 100..199 in page 1, 250.. in page 3
IDX="0 17 99 100 199 249 250 299"
for b in $JPG $RAW; do
    if ! "$PS" convert "$FX/$b.beton" "$W/$b.pgs" >"$W/conv.out" 2>&1; then
        fail "beton_convert_$b" "$(tail -n 2 "$W/conv.out")"
        continue
    fi
    ok "beton_convert_$b"
    if out=$("$PS" verify "$W/$b.pgs" 2>&1) && grep -q 'every checksum matches' <<<"$out"; then
        ok "beton_convert_verify_$b"
    else fail "beton_convert_verify_$b" "$out"; fi
    fields=image,label
    kind=jpeg
    if [ "$b" = $RAW ]; then fields=image,label,score,blob kind=raw; fi
    out=$("$PS" inspect "$W/$b.pgs" 2>&1)
    if [ "$b" = $JPG ]; then wantf="image (jpeg), label (int)"; else wantf="image (raw), label (int), score (float), blob (bytes)"; fi
    if grep -q "^fields: *$wantf\$" <<<"$out" && grep -q '^samples: *300$' <<<"$out" &&
        grep -q 'CRC32C per page and per sample' <<<"$out"; then ok "beton_convert_schema_$b"
    else fail "beton_convert_schema_$b" "$(grep -E '^(fields|samples|checksums)' <<<"$out" | tr '\n' ' ')"; fi
    bad=""
    for i in $IDX; do
        for f in ${fields//,/ }; do
            "$PS" cat "$FX/$b.beton" "$i" --field "$f" >"$W/a" 2>&1
            "$PS" cat "$W/$b.pgs" "$i" --field "$f" >"$W/p" 2>&1
            cmp -s "$W/a" "$W/p" && [ -s "$W/a" ] || bad="$bad $i/$f"
        done
        # the image also against the manifest's digest, not only against our own .beton reader
        "$PS" cat "$W/$b.pgs" "$i" --field image >"$W/p" 2>&1
        [ "$(sha256sum <"$W/p" | cut -c1-64)" = "$(mf "$b" "$i" image.sha256)" ] || bad="$bad $i/image-sha256"
    done
    if [ -z "$bad" ]; then ok "beton_convert_same_bytes_$b ($kind, samples $IDX)"
    else fail "beton_convert_same_bytes_$b" "differ:$bad"; fi
done

# the other read paths give byte-identical files: one thread, sample-by-sample reads, stdout
if [ -f "$W/$JPG.pgs" ]; then
    "$PS" convert -q --threads 1 "$FX/$JPG.beton" "$W/t1.pgs" 2>"$W/err" &&
        "$PS" convert -q --read-buffer 1M "$FX/$JPG.beton" "$W/sm.pgs" 2>>"$W/err" &&
        "$PS" convert -q "$FX/$JPG.beton" - >"$W/so.pgs" 2>>"$W/err"
    if cmp -s "$W/t1.pgs" "$W/$JPG.pgs" && cmp -s "$W/sm.pgs" "$W/$JPG.pgs" && cmp -s "$W/so.pgs" "$W/$JPG.pgs"; then
        ok beton_convert_paths_identical
    else fail beton_convert_paths_identical "$(tail -n 2 "$W/err")"; fi
    out=$("$PS" convert --read-buffer 1M "$FX/$JPG.beton" "$W/sm2.pgs" 2>&1)
    if grep -q 'sample by sample' <<<"$out" && grep -q '0 whole pages, 300 single samples' <<<"$out"; then
        ok beton_convert_sample_reads
    else fail beton_convert_sample_reads "$out"; fi
fi

# --shuffle: a permutation of the same samples, flagged as shuffled
if "$PS" convert -q --shuffle --seed 7 "$FX/$JPG.beton" "$W/sh.pgs" 2>"$W/err"; then
    a=$("$PS" inspect "$W/$JPG.pgs" | grep -E '^(payload|samples)|^ +[0-9]+ +[0-9]+$')
    s=$("$PS" inspect "$W/sh.pgs" | grep -E '^(payload|samples)|^ +[0-9]+ +[0-9]+$')
    if [ "$a" = "$s" ] && "$PS" inspect "$W/sh.pgs" | grep -q 'shuffled (seed 7)' &&
        ! cmp -s "$W/sh.pgs" "$W/$JPG.pgs" && "$PS" verify -q "$W/sh.pgs"; then
        ok beton_convert_shuffle
    else fail beton_convert_shuffle "payload/labels or flag differ"; fi
else fail beton_convert_shuffle "$(tail -n 1 "$W/err")"; fi

# an RGBImage field mixing JPEG and raw: refused, naming the sample; --mixed-images bytes keeps the bytes.
# Sample 5's mode byte (row 48 bytes from 4188, mode at 0) becomes 0 = JPEG; .beton does not check JPEGs.
cp "$FX/$RAW.beton" "$W/mixed.beton"
printf '\000' | dd of="$W/mixed.beton" bs=1 seek=$((4188 + 48 * 5)) conv=notrunc status=none
expect_fail beton_convert_mixed_refused "mixed\.beton: field 'image' mixes JPEG and raw images \(1 JPEG, 299 raw\), the first JPEG one at sample 5" \
    "$PS" convert "$W/mixed.beton" "$W/mixed.pgs"
# nothing under OUT's name, nor a temporary file
left() { local f; for f in "$W/$1" "$W/.$1".*; do [ -e "$f" ] && printf '%s ' "${f##*/}"; done; }
if [ -n "$(left mixed.pgs)" ]; then fail beton_convert_mixed_nothing_left "left behind: $(left mixed.pgs)"
else ok beton_convert_mixed_nothing_left; fi
if "$PS" convert -q --mixed-images bytes "$W/mixed.beton" "$W/mixed.pgs" 2>/dev/null &&
    "$PS" inspect "$W/mixed.pgs" | grep -q '^fields: *image (bytes), label (int), score (float), blob (bytes)$' &&
    cmp -s <("$PS" cat "$W/mixed.beton" 5) <("$PS" cat "$W/mixed.pgs" 5) &&
    cmp -s <("$PS" cat "$W/mixed.beton" 6) <("$PS" cat "$W/mixed.pgs" 6); then
    ok beton_convert_mixed_as_bytes
else fail beton_convert_mixed_as_bytes "schema or bytes differ"; fi

# A hand-made .beton (written here, FFCV's layout) with what the fixtures lack: JSON and NDArray fields,
# the image field after variable fields, pages interleaved as by two writer processes, empty Bytes.
cat >"$W/mkbeton.py" <<'EOF'
import struct, sys, json, random
# fields: label Int, meta JSON, arr NDArray <f4 (4,), blob Bytes, image RGBImage raw 8x6
out = sys.argv[1]; badjson = len(sys.argv) > 2
PS = 2 << 20; N = 40
fields = [(1, b"label"), (5, b"meta"), (4, b"arr"), (3, b"blob"), (2, b"image")]
hdr_end = 24 + 1041 * len(fields)
ROW = 64  # label@0 meta@8 arr@24 blob@32 image@48 (13 bytes) -> 61 -> 64
desc = b""
for t, n in fields:
    args = bytearray(1024)
    if t == 4:
        struct.pack_into("<Q", args, 0, 4)
        d = b'[["", "<f4"]]'
        struct.pack_into("<Q", args, 256, len(d)); args[264:264 + len(d)] = d
    desc += bytes([t]) + n.ljust(16, b"\0") + bytes(args)
meta_end = hdr_end + ROW * N
first_page = (meta_end + PS - 1) // PS
# chunks of 10 samples to pages as two writer processes would: 0-9 -> p+1, 10-19 -> p, 20-29 -> p+1, 30-39 -> p+2
page_of_chunk = [first_page + 1, first_page, first_page + 1, first_page + 2]
npages = first_page + 3
data = bytearray(npages * PS)
fill = {p: p * PS for p in set(page_of_chunk)}
rows = bytearray(ROW * N); alloc = []
rnd = random.Random(5)
def put(i, payload):
    p = page_of_chunk[i // 10]
    ptr = fill[p]; data[ptr:ptr + len(payload)] = payload; fill[p] += len(payload)
    alloc.append((i, ptr, len(payload))); return ptr
for i in range(N):
    m = json.dumps({"i": i, "name": "s%d" % i}).encode() + (b"" if badjson and i == 7 else b"\0")
    arr = struct.pack("<4f", i, i / 2, -i, 1.5)
    blob = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
    img = bytes(rnd.randrange(256) for _ in range(8 * 6 * 3))
    struct.pack_into("<q", rows, ROW * i, i % 3)
    pm = put(i, m); struct.pack_into("<QQ", rows, ROW * i + 8, pm, len(m))
    pa = put(i, arr); struct.pack_into("<Q", rows, ROW * i + 24, pa)
    pb = put(i, blob) if blob else 0; struct.pack_into("<QQ", rows, ROW * i + 32, pb, len(blob))
    if not blob: alloc.append((i, 0, 0))
    pi = put(i, img); struct.pack_into("<BHHQ", rows, ROW * i + 48, 1, 8, 6, pi)
alloc_ptr = npages * PS
head = struct.pack("<HHIQQ", 2, len(fields), PS, N, alloc_ptr)
data[0:hdr_end] = head + desc; data[hdr_end:meta_end] = rows
rnd.shuffle(alloc)
with open(out, "wb") as f:
    f.write(data); f.write(b"".join(struct.pack("<QQQ", *a) for a in alloc))
EOF
if "$PY" "$W/mkbeton.py" "$W/hand.beton" && "$PY" "$W/mkbeton.py" "$W/badjson.beton" bad; then
    if out=$("$PS" convert "$W/hand.beton" "$W/hand.pgs" 2>&1) &&
        grep -q "fields: label (int), image (raw, was image), meta (bytes, was json), arr (bytes, was ndarray), blob (bytes)" <<<"$out" &&
        grep -q "ndarray) is stored as bytes" <<<"$out" && "$PS" verify -q "$W/hand.pgs"; then
        bad=""
        for i in 0 7 15 39; do
            for f in label meta arr blob image; do
                cmp -s <("$PS" cat "$W/hand.beton" "$i" --field "$f") <("$PS" cat "$W/hand.pgs" "$i" --field "$f") ||
                    bad="$bad $i/$f"
            done
        done
        # the image field stays the one the loader takes (first variable field of the .pgs)
        "$PS" inspect --json "$W/hand.pgs" | grep -q '"image_field": "image"' || bad="$bad image_field"
        if [ -z "$bad" ]; then ok beton_convert_json_ndarray; else fail beton_convert_json_ndarray "differ:$bad"; fi
    else fail beton_convert_json_ndarray "$(tail -n 3 <<<"$out")"; fi
    expect_fail beton_convert_json_without_nul "badjson\.beton: sample 7 field 'meta': JSON value without its trailing NUL" \
        "$PS" convert "$W/badjson.beton" "$W/badjson.pgs"
else fail beton_convert_json_ndarray "could not write the hand-made .beton"; fi

# .pgs in: samples bigger than a page (raw images in 64K pages) re-paged and back, checksums checked on the way
mkdir -p "$W/img/a" "$W/img/b"
for i in $(seq 0 11); do "$PS" cat "$FX/$JPG.beton" "$i" >"$W/img/$([ $((i % 2)) = 0 ] && echo a || echo b)/$i.jpg"; done
if "$PS" pack "$W/img" -o "$W/r64.pgs" --mode raw --page-size 64K --no-shuffle >/dev/null 2>"$W/err" &&
    "$PS" convert -q "$W/r64.pgs" "$W/r1m.pgs" --page-size 1M 2>>"$W/err" &&
    "$PS" convert -q "$W/r1m.pgs" "$W/r64b.pgs" --page-size 64K 2>>"$W/err"; then
    if cmp -s "$W/r64.pgs" "$W/r64b.pgs" && "$PS" verify -q "$W/r1m.pgs"; then ok beton_convert_pgs_roundtrip
    else fail beton_convert_pgs_roundtrip "64K -> 1M -> 64K is not the same file"; fi
    cp "$W/r1m.pgs" "$W/bad.pgs"
    printf 'X' | dd of="$W/bad.pgs" bs=1 seek=$((4096 + 1048576 + 5000)) conv=notrunc status=none
    expect_fail beton_convert_pgs_bad_page "bad\.pgs: page 1 .*checksum mismatch" "$PS" convert "$W/bad.pgs" "$W/bad2.pgs"
    # it failed after OUT was opened: the temporary file is gone too
    if [ -n "$(left bad2.pgs)" ]; then fail beton_convert_failed_nothing_left "left behind: $(left bad2.pgs)"
    else ok beton_convert_failed_nothing_left; fi
    cp "$W/r64.pgs" "$W/bad.pgs"
    printf 'X' | dd of="$W/bad.pgs" bs=1 seek=$((4096 + 100)) conv=notrunc status=none
    expect_fail beton_convert_pgs_bad_sample "bad\.pgs: sample 0 .*checksum mismatch" "$PS" convert "$W/bad.pgs" "$W/bad2.pgs"
else fail beton_convert_pgs_roundtrip "$(tail -n 2 "$W/err")"; fi

# ---- damaged copies: the message names the file, exit status 1 (test_beton.c checks every rule) ----
F=$FX/$JPG.beton
size=$(stat -c %s "$F")
head -c 5000 "$F" >"$W/cut_meta.beton"
head -c 5000000 "$F" >"$W/cut_pages.beton"
head -c $((size - 10)) "$F" >"$W/cut_table.beton"
cp "$F" "$W/unfinished.beton"; printf '\0\0\0\0\0\0\0\0' | dd of="$W/unfinished.beton" bs=1 seek=16 conv=notrunc status=none
cp "$F" "$W/version.beton"; printf '\003' | dd of="$W/version.beton" bs=1 seek=0 conv=notrunc status=none
# sample 17's image pointer (metadata from 2106, 24-byte rows, data_ptr at 5) moved off its allocation
cp "$F" "$W/badptr.beton"; printf '\010\000\020' | dd of="$W/badptr.beton" bs=1 seek=$((2106 + 24 * 17 + 5)) conv=notrunc status=none
damaged() { # NAME FILE PATTERN
    local cmd out rc
    for cmd in inspect verify; do
        out=$("$PS" $cmd "$W/$2" 2>&1)
        rc=$?
        if [ $rc = 1 ] && grep -q "$W/$2: " <<<"$out" && grep -Eq -- "$3" <<<"$out"; then ok "beton_${cmd}_$1"
        else fail "beton_${cmd}_$1" "rc=$rc (want 1): $(tail -n 1 <<<"$out")"; fi
    done
}
damaged truncated_metadata cut_meta.beton "runs past the end of the file"
damaged truncated_pages cut_pages.beton "past the end of the file"
damaged truncated_table cut_table.beton "not a whole number of 24-byte records"
damaged unfinished unfinished.beton "writer did not finish"
damaged version version.beton "version 3"
damaged bad_pointer badptr.beton "sample 17"
expect_fail beton_convert_damaged "cut_pages\.beton: .*past the end" "$PS" convert "$W/cut_pages.beton" "$W/x.pgs"

# ---- bench: .beton against the same data converted to .pgs, same run, interleaved, best of 3 ----
ips() { "$PS" bench "$1" --epochs 2 --batch-size 50 --order random 2>/dev/null |
    sed -n 's/^summary: .* s, \([0-9.]*\) images\/s.*/\1/p'; }
if [ -f "$W/$JPG.pgs" ]; then
    bb=0 bp=0
    for _ in 1 2 3; do
        x=$(ips "$FX/$JPG.beton"); [ -n "$x" ] && bb=$("$PY" -c "print(max($bb, $x))")
        x=$(ips "$W/$JPG.pgs"); [ -n "$x" ] && bp=$("$PY" -c "print(max($bp, $x))")
    done
    if [ "$bb" != 0 ] && [ "$bp" != 0 ]; then
        ratio=$("$PY" -c "print('%.2f' % ($bp / $bb))")
        echo "bench: $JPG.beton $bb images/s, converted .pgs $bp images/s, pgs/beton $ratio (decode + random crop, 2 epochs x 3, best)"
        # decode dominates both; only a gross gap (beyond machine noise) is a failure
        if "$PY" -c "import sys; sys.exit(not (0.33 < $ratio < 3))"; then
            ok "beton_bench_vs_pgs (.beton $bb images/s, .pgs $bp images/s, ratio $ratio)"
        else fail beton_bench_vs_pgs ".beton $bb vs .pgs $bp images/s"; fi
    else fail beton_bench_vs_pgs "bench gave no figure (beton '$bb', pgs '$bp')"; fi
fi

# ---- s3:// through the local Swift server ----
if [ ! -f "$ROOT/tests/servers/swift.sh" ]; then
    skip beton_s3 "tests/servers/swift.sh not present"
    exit $((T_FAILED > 0))
fi
source "$ROOT/tests/servers/swift.sh"
if ! "$PY" -c 'import boto3' 2>/dev/null; then
    skip beton_s3 "python3-boto3 not installed (upload needs it)"
    exit $((T_FAILED > 0))
fi
if ! swift_start; then
    skip beton_s3 "$SWIFT_WHY"
    exit $((T_FAILED > 0))
fi
export AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AWS_ENDPOINT_URL=$SWIFT_URL
unset AWS_PROFILE AWS_SESSION_TOKEN
if ! "$PY" - "$SWIFT_URL" "$FX" >"$W/up.err" 2>&1 <<'EOF'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="test:tester",
                  aws_secret_access_key="testing", region_name="us-east-1")
s3.create_bucket(Bucket="bucket")
for b in ("ffcv_jpg_int.beton", "ffcv_raw_int_float_bytes.beton"):
    s3.upload_file(sys.argv[2] + "/" + b, "bucket", b)
EOF
then
    fail beton_s3_upload "$(tail -n 2 "$W/up.err")"
    exit 1
fi
U=s3://bucket/$JPG.beton
out=$("$PS" inspect "$U" 2>&1)
if grep -q '^samples: *300$' <<<"$out" && grep -q '^fields: *image (image), label (int)$' <<<"$out"; then
    ok beton_s3_inspect
else fail beton_s3_inspect "$(tail -n 2 <<<"$out")"; fi
if out=$("$PS" verify "$U" 2>&1) && grep -qi 'no checksums' <<<"$out"; then ok beton_s3_verify; else fail beton_s3_verify "$out"; fi
"$PS" cat "$U" 17 >"$W/s3cat" 2>"$W/err"
if cmp -s "$W/s3cat" <("$PS" cat "$F" 17); then ok beton_s3_cat; else fail beton_s3_cat "$(tail -n 1 "$W/err")"; fi
out=$("$PS" bench "$U" --epochs 1 --batch-size 50 --order random 2>&1)
if grep -q '^summary: 300 images' <<<"$out"; then ok "beton_s3_bench ($(sed -n 's/^summary: .* s, \([0-9.]*\) images\/s.*/\1/p' <<<"$out") images/s)"
else fail beton_s3_bench "$(tail -n 2 <<<"$out")"; fi
for b in $JPG $RAW; do
    if "$PS" convert -q "s3://bucket/$b.beton" "$W/s3_$b.pgs" 2>"$W/err" && cmp -s "$W/s3_$b.pgs" "$W/$b.pgs"; then
        ok "beton_s3_convert_$b"
    else fail "beton_s3_convert_$b" "$(tail -n 1 "$W/err")"; fi
done
if "$PS" convert -q "$U" "s3://bucket/$JPG.pgs" 2>"$W/err" && "$PS" verify -q "s3://bucket/$JPG.pgs" 2>>"$W/err"; then
    ok beton_s3_convert_to_s3
else fail beton_s3_convert_to_s3 "$(tail -n 1 "$W/err")"; fi

exit $((T_FAILED > 0))
