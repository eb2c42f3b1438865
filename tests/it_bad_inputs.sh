#!/usr/bin/env bash
# The bad-input catalogue (tests/BAD_INPUTS.md): every row is run here, its
# exit status and message checked, and the committed table compared with what
# the code prints now.
#   bash tests/it_bad_inputs.sh BUILD             run and check (tests/run.sh does this)
#   bash tests/it_bad_inputs.sh BUILD --markdown  print the table from this run
#   bash tests/it_bad_inputs.sh BUILD --update    rewrite the table in tests/BAD_INPUTS.md
# Servers: nginx (tests/servers/nginx.sh), Swift S3 (tests/servers/swift.sh),
# a TLS nginx with a self-signed certificate (openssl) and a small Python
# server that misbehaves on purpose (wrong Content-Range, short bodies...).
# Rows whose server cannot start are skipped with the reason.
source "$(dirname "$0")/lib.sh" "$1"
source "$ROOT/tests/servers/nginx.sh"
source "$ROOT/tests/servers/swift.sh"
MODE=${2:-}
PY=/usr/bin/python3
MK="$BUILD/bench/mkpgs"
DOC="$ROOT/tests/BAD_INPUTS.md"
SELF="$ROOT/tests/it_bad_inputs.sh"
D="$TB/it_bad_inputs"
rm -rf "$D"
mkdir -p "$D"
TB_SAVED=$TB
TB=$D # the servers' files live under this test's folder
BAD_PID=""
TLS_PID=""
cleanup() {
    nginx_stop
    swift_stop
    [ -n "$BAD_PID" ] && kill "$BAD_PID" 2>/dev/null
    [ -n "$TLS_PID" ] && kill "$TLS_PID" 2>/dev/null
    cd / && rm -rf "$D"
}
trap cleanup EXIT
cd "$D" || exit 1
# no credentials or settings of the machine's user
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_SECURITY_TOKEN AWS_PROFILE \
    AWS_SHARED_CREDENTIALS_FILE AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL PAGESTREAM_FAULT \
    CURL_CA_BUNDLE SSL_CERT_FILE AWS_CA_BUNDLE # the default CA bundle, whatever the machine sets
export HOME=$D
export PAGESTREAM_LOG=1

[ -x "$MK" ] || { fail bad_inputs_tools "$MK not built"; exit 0; }

ROWS="$D/rows.md"     # generated table rows, in order
RAN="$D/ran.txt"      # ids that ran (not skipped)
: > "$ROWS"
: > "$RAN"

# Message shown in the table: the lines pagestream printed (errors and
# warnings; the "Try ... --help" line left out), at most 3, with what varies
# between runs (ports, milliseconds, seconds) replaced by fixed words.
normalise() {
    sed -E -e 's/127\.0\.0\.1:[0-9]{4,5}/127.0.0.1:PORT/g' \
        -e 's/after [0-9]+ ms/after N ms/g' \
        -e 's/ in [0-9]+\.[0-9]+ s\)/ in N s)/g' \
        -e 's/transferred the last [0-9]+ seconds/transferred the last N seconds/g' \
        -e 's/ port [0-9]{4,5} after/ port PORT after/g' \
        -e 's#OpenSSL/[0-9][0-9a-z.]*#OpenSSL/VERSION#g'
}
shown_message() { # file with the output
    local sel
    sel=$(grep -E '^pagestream' "$1" | grep -v "^Try 'pagestream")
    [ -n "$sel" ] || sel=$(grep -v "^Try 'pagestream" "$1")
    # a line repeated N times in a row is shown once, followed by "(N times)"
    printf '%s\n' "$sel" | normalise | sed -e 's/|/\\|/g' -e 's/`/'"'"'/g' | awk '
        function out() { if (n && shown < 3) { printf "%s`%s`%s", (shown ? "<br>" : ""), prev, (n > 1 ? " (" n " times)" : ""); shown++ } }
        $0 == prev { n++; next }
        { out(); prev = $0; n = 1 }
        END { out() }'
}
shown_command() {
    local a out=""
    for a in "$@"; do
        if [ "$a" = "$PS" ]; then a=pagestream; fi
        out="$out $(printf '%q' "$a")"
    done
    printf '%s' "${out# }" | normalise | sed -e 's/|/\\|/g' -e "s#$D/##g"
}

# row ID "INPUT" EXIT PATTERN CMD...: run CMD (at most 60 s), check its exit
# status and that its output matches PATTERN (grep -E), record the table row.
row() {
    local id=$1 input=$2 want=$3 pat=$4 rc
    shift 4
    timeout 60 "$@" > "$D/out.$id" 2>&1 < /dev/null
    rc=$?
    echo "$id" >> "$RAN"
    printf '| %s | %s | `%s` | %s | %s |\n' "$id" "$input" "$(shown_command "$@")" "$rc" \
        "$(shown_message "$D/out.$id")" >> "$ROWS"
    if [ "$rc" = 124 ]; then
        fail "bad_input_$id" "no answer within 60 s (hangs): $input"
    elif [ "$rc" != "$want" ]; then
        fail "bad_input_$id" "exit $rc, expected $want: $(tail -n 2 "$D/out.$id" | tr '\n' ' ')"
    elif ! grep -Eq -- "$pat" "$D/out.$id"; then
        fail "bad_input_$id" "output does not match /$pat/: $(tail -n 2 "$D/out.$id" | tr '\n' ' ')"
    else
        ok "bad_input_$id"
    fi
}
# skip_rows REASON ID...: rows that cannot run here
skip_rows() {
    local why=$1 id
    shift
    for id in "$@"; do skip "bad_input_$id" "$why"; done
}

# ====================================================================
# dataset files
# ====================================================================
"$MK" d.pgs --size 2M --sample-size 8K --page-size 64K > mk.log 2>&1 || { fail bad_inputs_mkpgs "$(tail -n 1 mk.log)"; exit 0; }
"$PY" - d.pgs "$ROOT/tests/corpus/beton/head-unfinished-writer" <<'EOF' || { fail bad_inputs_craft "python crafting failed"; exit 0; }
# Writes the bad files of the catalogue next to d.pgs (a good 2 MiB .pgs of
# 64 KiB pages, fields data+label). Where a test needs a structural error to be
# seen behind a checksum, the checksum is recomputed (CRC32C, FORMAT.md §1).
import struct, sys
src, beton = sys.argv[1], sys.argv[2]
good = open(src, "rb").read()
S = len(good)

T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

def put(name, b):
    open(name, "wb").write(bytes(b))

FO = S - 64  # footer
foot = dict(zip(["table_crc", "nsamples", "npages", "off_samples", "off_pages", "off_classes", "header_crc"],
                struct.unpack_from("<IQQQQQI", good, FO + 12)))
nf = struct.unpack_from("<I", good, 16)[0]
ROW = 16 + 8 * nf

def fix_header(b):
    struct.pack_into("<I", b, 4092, crc32c(b[:4092]))
    # the footer carries a copy of the header CRC, and its own CRC
    struct.pack_into("<I", b, FO + 56, struct.unpack_from("<I", b, 4092)[0])
    fix_footer(b)
def fix_tables(b):
    struct.pack_into("<I", b, FO + 12, crc32c(b[foot["off_samples"]:FO]))
    fix_footer(b)
def fix_footer(b):
    struct.pack_into("<I", b, FO + 60, crc32c(b[FO:FO + 60]))
def sample_at(i):
    return foot["off_samples"] + i * ROW
def page_at(p):
    return foot["off_pages"] + p * 16

put("empty.pgs", b"")
put("tiny.pgs", good[:10])
put("cut-4095.pgs", good[:4095])
put("cut-4096.pgs", good[:4096])
put("cut-100000.pgs", good[:100000])
put("cut-pages.pgs", good[:4096 + 5 * 65536])
put("cut-footer.pgs", good[:S - 64])
put("cut-1.pgs", good[:S - 1])
b = bytearray(good); b[0:8] = b"PGSTREAX"; put("magic.pgs", b)
b = bytearray(good); struct.pack_into("<I", b, 8, 7); put("version.pgs", b)
b = bytearray(good); b[3000] ^= 0x40; put("header-flip.pgs", b)
b = bytearray(good); struct.pack_into("<I", b, 12, 5000); fix_header(b); put("page-size.pgs", b)
b = bytearray(good); struct.pack_into("<I", b, 16, 0); fix_header(b); put("no-fields.pgs", b)
b = bytearray(good); b[40] = 9; fix_header(b); put("field-type.pgs", b)
b = bytearray(good); b[FO + 20] ^= 0x01; put("footer-flip.pgs", b)
b = bytearray(good); struct.pack_into("<I", b, FO + 8, 2); fix_footer(b); put("footer-version.pgs", b)
b = bytearray(good); struct.pack_into("<I", b, FO + 56, 12345); fix_footer(b); put("foreign-footer.pgs", b)
b = bytearray(good); struct.pack_into("<Q", b, FO + 24, 1000000); fix_footer(b); put("npages.pgs", b)
b = bytearray(good); struct.pack_into("<Q", b, FO + 16, 1 << 40); fix_footer(b); put("nsamples.pgs", b)
b = bytearray(good); struct.pack_into("<Q", b, FO + 32, foot["off_samples"] + 4096); fix_footer(b); put("off-samples.pgs", b)
b = bytearray(good); b[sample_at(3) + 13] ^= 0x10; put("table-flip.pgs", b)
b = bytearray(good); struct.pack_into("<Q", b, sample_at(5), S * 4); fix_tables(b); put("sample-outside.pgs", b)
b = bytearray(good); struct.pack_into("<Q", b, sample_at(5), struct.unpack_from("<Q", good, sample_at(4))[0]); fix_tables(b); put("sample-overlap.pgs", b)
b = bytearray(good); v = struct.unpack_from("<I", good, page_at(3))[0]; struct.pack_into("<I", b, page_at(3), v + 1); fix_tables(b); put("first-sample.pgs", b)
b = bytearray(good); struct.pack_into("<I", b, page_at(2) + 8, 65537); fix_tables(b); put("page-used.pgs", b)
last = foot["npages"] - 1
b = bytearray(good); v = struct.unpack_from("<I", good, page_at(last) + 4)[0]; struct.pack_into("<I", b, page_at(last) + 4, v + 1); fix_tables(b); put("page-count.pgs", b)
b = bytearray(good); v = struct.unpack_from("<I", good, sample_at(7) + 16)[0]; struct.pack_into("<I", b, sample_at(7) + 16, v + 1); fix_tables(b); put("field-len.pgs", b)
b = bytearray(good); b[4096 + 100] ^= 0x01; put("page-flip.pgs", b)
b = bytearray(good); b[4096 + foot["npages"] * 65536 - 1] ^= 0x01; put("padding-flip.pgs", b)
put("text.pgs", (b"this is a text file, not a dataset\n" * 300)[:8192])

# .beton: a header FFCV's writer left unfinished (alloc table pointer 0), and variants of it
h = bytearray(open(beton, "rb").read())
put("unfinished.beton", h)
b = bytearray(h); struct.pack_into("<H", b, 0, 3); put("version3.beton", b)
b = bytearray(h); struct.pack_into("<I", b, 4, 3 << 20); struct.pack_into("<Q", b, 16, 4096); put("page-size.beton", b)
b = bytearray(h); struct.pack_into("<H", b, 2, 0); struct.pack_into("<Q", b, 16, 4096); put("no-fields.beton", b)
b = bytearray(h); struct.pack_into("<Q", b, 8, 0); struct.pack_into("<Q", b, 16, 4096); put("no-samples.beton", b)
b = bytearray(h) + bytes(4096); struct.pack_into("<Q", b, 8, 1); struct.pack_into("<Q", b, 16, 1 << 30); put("alloc-past-end.beton", b)
b = bytearray(h); struct.pack_into("<Q", b, 8, 1 << 40); struct.pack_into("<Q", b, 16, 4096); put("many-samples.beton", b)
put("short.beton", h[:20])
EOF
mkdir -p folder

row F01 "empty file (0 bytes)" 1 "empty.pgs: 0 bytes: too small" "$PS" inspect empty.pgs
row F02 "10-byte file" 1 "tiny.pgs: 10 bytes: too small" "$PS" inspect tiny.pgs
row F03 "truncated inside the header (4095 bytes)" 1 "cut-4095.pgs: 4095 bytes: truncated header" "$PS" inspect cut-4095.pgs
row F04 "truncated right after the header block (4096 bytes)" 1 "cut-4096.pgs: 4096 bytes: truncated" "$PS" inspect cut-4096.pgs
row F05 "truncated in the middle of a page (100000 bytes)" 1 "cut-100000.pgs: 100000 bytes: truncated" "$PS" verify cut-100000.pgs
row F06 "truncated at a page boundary (header + 5 pages, no tables, no footer)" 1 "cut-pages.pgs: no footer at the end" "$PS" bench cut-pages.pgs --transform none
row F07 "footer cut off (file minus its last 64 bytes)" 1 "cut-footer.pgs: [0-9]+ bytes: truncated" "$PS" inspect cut-footer.pgs
row F08 "last byte missing" 1 "cut-1.pgs: [0-9]+ bytes: truncated" "$PS" cat cut-1.pgs 0
row F09 "bad magic (PGSTREAX)" 1 "magic.pgs: not a pagestream \(.pgs\) or FFCV \(.beton\) dataset" "$PS" inspect magic.pgs
row F10 "text file named .pgs" 1 "text.pgs: not a pagestream" "$PS" verify text.pgs
row F11 "unknown format version (7)" 1 "version.pgs: format version 7 \(this build reads version 1\)" "$PS" inspect version.pgs
row F12 "header byte flipped (reserved area)" 1 "header-flip.pgs: header checksum mismatch" "$PS" inspect header-flip.pgs
row F13 "page size 5000 in the header (checksums fixed)" 1 "page-size.pgs: page size 5000 invalid" "$PS" inspect page-size.pgs
row F14 "0 fields in the header (checksums fixed)" 1 "no-fields.pgs: 0 fields" "$PS" inspect no-fields.pgs
row F15 "unknown field type 9 (checksums fixed)" 1 "field-type.pgs: field 0: unknown type 9" "$PS" inspect field-type.pgs
row F16 "footer byte flipped" 1 "footer-flip.pgs: footer checksum mismatch" "$PS" inspect footer-flip.pgs
row F17 "footer version 2, header version 1" 1 "footer-version.pgs: footer version 2, header version 1" "$PS" inspect footer-version.pgs
row F18 "footer of another file (header checksum copy differs)" 1 "foreign-footer.pgs: footer and header do not belong together" "$PS" inspect foreign-footer.pgs
row F19 "page count 1000000 in the footer: pages outside the file" 1 "npages.pgs: 1000000 pages of 65536 bytes do not fit" "$PS" inspect npages.pgs
row F20 "sample count 2^40 in the footer" 1 "nsamples.pgs: .*(does not fit|sample table)" "$PS" inspect nsamples.pgs
row F21 "sample table offset moved by 4096" 1 "off-samples.pgs: sample table at [0-9]+, expected" "$PS" inspect off-samples.pgs
row F22 "sample table byte flipped" 1 "table-flip.pgs: table checksum mismatch" "$PS" inspect table-flip.pgs
row F23 "sample offset outside the file (table checksum fixed)" 1 "sample-outside.pgs: sample 5: offset [0-9]+ outside the pages" "$PS" inspect sample-outside.pgs
row F24 "sample overlapping the one before it" 1 "sample-overlap.pgs: sample 5: offset [0-9]+ overlaps" "$PS" inspect sample-overlap.pgs
row F25 "page index: first sample of page 3 off by one" 1 "first-sample.pgs: page 3: first sample" "$PS" inspect first-sample.pgs
row F26 "page index: page 2 uses more bytes than a page" 1 "page-used.pgs: page 2: 65537 bytes used" "$PS" inspect page-used.pgs
row F27 "page index counts one sample more than the footer" 1 "page-count.pgs: .*(samples|counts)" "$PS" inspect page-count.pgs
row F28 "field length of sample 7 one byte longer than the sample" 1 "field-len.pgs: sample 7: field" "$PS" inspect field-len.pgs
row F29 "page byte flipped (page 0, sample 0): verify" 1 "page-flip.pgs: page 0 \(samples 0-[0-9]+\): checksum mismatch" "$PS" verify page-flip.pgs
row F30 "page byte flipped: cat of the sample in it" 1 "page-flip.pgs: sample 0 \(page 0\): checksum mismatch" "$PS" cat page-flip.pgs 0
row F31 "page byte flipped: the loader re-reads, then fails" 1 "page-flip.pgs: page 0: checksum mismatch after [0-9]+ re-reads" "$PS" bench page-flip.pgs --transform none --epochs 1 --order sequential
row F32 "padding byte flipped in the last page (no sample touched)" 1 "padding-flip.pgs: page 35 \(sample 256\): checksum mismatch" "$PS" verify padding-flip.pgs
row F33 "file does not exist" 1 "missing.pgs: cannot open: No such file or directory" "$PS" inspect missing.pgs
row F34 "a folder instead of a file" 1 "folder: is a directory, not a file" "$PS" verify folder
row B01 ".beton whose writer did not finish (allocation table pointer 0)" 1 "unfinished.beton: allocation table pointer is 0: the writer did not finish" "$PS" inspect unfinished.beton
row B02 ".beton version 3" 1 "version3.beton: FFCV file format version 3" "$PS" inspect version3.beton
row B03 ".beton page size 3 MiB (not a power of two)" 1 "page-size.beton: page size [0-9]+ is not a power of two" "$PS" inspect page-size.beton
row B04 ".beton with 0 fields" 1 "no-fields.beton: the header declares 0 fields" "$PS" inspect no-fields.beton
row B05 ".beton with 0 samples" 1 "no-samples.beton: the header declares 0 samples" "$PS" inspect no-samples.beton
row B06 ".beton allocation table pointer past the end" 1 "alloc-past-end.beton: allocation table pointer [0-9]+ is past the end of the file" "$PS" inspect alloc-past-end.beton
row B07 ".beton sample count 2^40 (metadata past the end)" 1 "many-samples.beton: metadata for [0-9]+ samples" "$PS" bench many-samples.beton --transform none
row B08 ".beton cut to 20 bytes" 1 "short.beton: 20 bytes: too (short|small)" "$PS" inspect short.beton

# ====================================================================
# URLs
# ====================================================================
row U01 "unknown scheme ftp://" 1 "ftp://host/x.pgs: unknown URL scheme" "$PS" inspect ftp://host/x.pgs
row U02 "control character in the URL" 1 "invalid URL: control character" "$PS" inspect "http://127.0.0.1/a$(printf '\001')b.pgs"
row U03 "port 99999" 1 "invalid URL: port out of range \(1-65535\)" "$PS" inspect http://example.com:99999/x.pgs
row U04 "port not a number" 1 "invalid URL: port is not a number" "$PS" inspect http://127.0.0.1:http/x.pgs
row U05 "empty port" 1 "invalid URL: empty port" "$PS" bench http://127.0.0.1:/x.pgs
row U06 "empty host" 1 "http:///x.pgs: invalid URL: empty host" "$PS" inspect http:///x.pgs
row U07 "space in the host" 1 "invalid URL: space in host" "$PS" inspect "http://data server/x.pgs"
row U08 "space in the path" 1 "invalid URL: space in path \(write it as %20\)" "$PS" inspect "http://127.0.0.1/my data.pgs"
row U09 "bad percent-escape" 1 "invalid URL: bad percent-escape in path" "$PS" inspect "http://127.0.0.1/x%zz.pgs"
row U10 "unterminated IPv6 literal" 1 "invalid URL: unterminated '\[' in host" "$PS" inspect "http://[::1/x.pgs"
row U11 "s3:// with an empty bucket" 1 "s3:///key.pgs: invalid URL: empty bucket name" "$PS" inspect s3:///key.pgs
row U12 "s3:// without a key" 1 "s3://bucket: invalid URL: empty key \(use s3://bucket/key\)" "$PS" inspect s3://bucket
row U13 "s3:// bucket with a bad character" 1 "invalid URL: bad character in bucket name" "$PS" inspect 's3://my$bucket/x.pgs'
row U14 "s3:// bucket name of 64 characters" 1 "invalid URL: bucket name longer than 63 characters" "$PS" inspect "s3://$(printf 'b%.0s' $(seq 64))/x.pgs"
row U15 "nfs:// without an export path" 1 "nfs://127.0.0.1: invalid URL: no export path" "$PS" inspect nfs://127.0.0.1
row U16 "nfs:// with '..' in the path" 1 "invalid URL: '\.\.' in path" "$PS" inspect nfs://127.0.0.1/export/../etc/x.pgs
row U17 "empty URL" 1 "empty URL" "$PS" verify ""
row U18 "password in an http:// URL (refused connection): shown as ***" 1 "http://\*\*\*@127.0.0.1:1/x.pgs: .*onnect" "$PS" bench "http://user:hunter2@127.0.0.1:1/x.pgs" --retries 1
mkdir -p imgs/cls
cp "$ROOT/tests/corpus/jpeg/baseline.jpg" imgs/cls/a.jpg
row U19 "pack to an http:// URL" 1 "http://127.0.0.1/out.pgs: can only write to a path, \"-\" or s3://" "$PS" pack imgs -o http://127.0.0.1/out.pgs -q

# ====================================================================
# flags
# ====================================================================
row G01 "size with an unknown unit" 2 "--cache-size: '12X' is not a size" "$PS" bench d.pgs --cache-size 12X
row G02 "negative size" 2 "--cache-size: '-5' is not a size" "$PS" bench d.pgs --cache-size -5
row G03 "negative count" 2 "--batch-size: '-1' is not a number" "$PS" bench d.pgs --batch-size -1
row G04 "zero batch size" 2 "--batch-size must be 1 \.\. 1048576" "$PS" bench d.pgs --batch-size 0
row G05 "word where a number goes" 2 "--epochs: 'two' is not a number" "$PS" bench d.pgs --epochs two
row G06 "count too large" 2 "--queue-depth: 99999 is too large \(at most 4096\)" "$PS" verify d.pgs --queue-depth 99999
row G07 "--rank equal to --world-size" 2 "--rank 2 must be below --world-size 2" "$PS" bench d.pgs --rank 2 --world-size 2
row G08 "--world-size 0" 2 "--world-size must be 1 \.\. 65536" "$PS" bench d.pgs --world-size 0
row G09 "cache smaller than one page" 1 "d.pgs: cache size 4096 bytes is too small: .*at least 131072 bytes" "$PS" bench d.pgs --cache-size 4K --transform none
row G10 "--order nonsense" 2 "--order nonsense: use sequential, random or quasi_random" "$PS" bench d.pgs --order nonsense
row G11 "--transform unknown" 2 "--transform blur: use rrc, center or none" "$PS" bench d.pgs --transform blur
row G12 "image transform on a dataset without images" 1 "d.pgs: has no image field to crop" "$PS" bench d.pgs --transform rrc
row G13 "--page-size not a multiple of 4096" 2 "--page-size: 5000: must be a multiple of 4K from 64K to 64M" "$PS" pack imgs -o x.pgs --page-size 5000
row G14 "--page-size below 64K" 2 "--page-size: 32K: must be a multiple of 4K" "$PS" pack imgs -o x.pgs --page-size 32K
row G15 "--page-size with an unknown unit" 2 "--page-size: '12X' is not a size" "$PS" convert d.pgs x.pgs --page-size 12X
row G16 "unknown option" 2 "unknown option '--bogus' or missing argument" "$PS" bench d.pgs --bogus
row G17 "option without its argument" 2 "unknown option '--epochs' or missing argument" "$PS" bench d.pgs --epochs
row G18 "unknown short option" 2 "unknown option -z or missing argument" "$PS" verify -z d.pgs
row G19 "no dataset given" 2 "bench: missing URL" "$PS" bench
row G20 "two datasets given" 2 "verify: one dataset at a time" "$PS" verify d.pgs d.pgs
row G21 "unknown command" 2 "unknown command 'frobnicate'" "$PS" frobnicate d.pgs
row G22 "--fault not key=value" 1 "fault spec: \"chaos\" is not key=value" "$PS" bench d.pgs --transform none --fault chaos
row G23 "--fault probability above 1" 1 "fault spec: error=2 is not a probability in \[0, 1\]" "$PS" bench d.pgs --transform none --fault error=2
row G24 "--retries 0" 2 "--retries must be 1 \.\. 100" "$PS" bench d.pgs --retries 0
row G25 "--timeout-ms 0" 2 "--timeout-ms must be 1 \.\. 3600000" "$PS" bench d.pgs --timeout-ms 0
row G26 "--resume without --ids-out" 2 "--resume needs --ids-out FILE" "$PS" bench d.pgs --resume
row G27 "--ids-out in a folder that does not exist" 1 "nodir/ids.txt: No such file or directory" "$PS" bench d.pgs --transform none --ids-out nodir/ids.txt
row G28 "cat: sample index past the end" 1 "d.pgs: sample 99999 does not exist \(257 samples, 0-based\)" "$PS" cat d.pgs 99999
row G29 "cat: index not a number" 2 "INDEX: 'first' is not a number" "$PS" cat d.pgs first
row G30 "cat: unknown field" 2 "d.pgs: no field 'pixels' \(fields: data, label\)" "$PS" cat d.pgs 0 --field pixels
row G31 "pack without -o" 2 "where to\? \(-o OUT.pgs, or -o - for stdout\)" "$PS" pack imgs
row G32 "pack from a folder that does not exist" 1 "nosuch: No such file or directory" "$PS" pack nosuch -o x.pgs
row G33 "convert without OUT" 2 "convert IN OUT: OUT missing" "$PS" convert d.pgs
row G34 "cat: negative index (read as an option)" 2 "unknown option -1 or missing argument" "$PS" cat d.pgs -1
row G35 "doctor: count not a number (one message)" 2 "doctor: --images: 'many' is not a number" "$PS" doctor d.pgs --images many

# ====================================================================
# credentials (the endpoint is a closed port: these fail before any request)
# ====================================================================
mkdir -p creds
c() { printf '%b' "$2" > "creds/$1"; chmod 600 "creds/$1"; }
c noeq '[default]\naws_access_key_id AKIDEXAMPLE\n'
c nosection 'aws_access_key_id = AKIDEXAMPLE\n'
c unclosed '[default\naws_access_key_id = AKIDEXAMPLE\n'
c emptyname '[]\n'
c nosecret '[default]\naws_access_key_id = AKIDEXAMPLE\n'
c emptysecret '[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key =\n'
c other '[other]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = wJalrXUtnFEMI\n'
c badkey '[default]\naws access key = AKIDEXAMPLE\n'
c ctrl '[default]\naws_access_key_id = AKID\001EXAMPLE\n'
c good '[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = wJalrXUtnFEMI\n'
cp creds/good creds/open644
chmod 644 creds/open644
printf '[default]\naws_access_key_id = AKIDEXAMPLE\n\000\n' > creds/nul
chmod 600 creds/nul
{ printf '[default]\naws_access_key_id = '; head -c 9000 /dev/zero | tr '\0' A; printf '\n'; } > creds/long
chmod 600 creds/long
E=(env AWS_ENDPOINT_URL=http://127.0.0.1:1)
row C01 "credentials file: line without '='" 1 "creds/noeq: line 2: expected \"\[profile\]\" or \"key = value\"" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/noeq "$PS" inspect s3://bkt/d.pgs
row C02 "credentials file: key before any [profile]" 1 "creds/nosection: line 1: key before any \[profile\] section" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/nosection "$PS" inspect s3://bkt/d.pgs
row C03 "credentials file: section header without ']'" 1 "creds/unclosed: line 1: section header without '\]'" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/unclosed "$PS" inspect s3://bkt/d.pgs
row C04 "credentials file: empty section name" 1 "creds/emptyname: line 1: empty section name" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/emptyname "$PS" inspect s3://bkt/d.pgs
row C05 "credentials file: key name with spaces" 1 "creds/badkey: line 2: bad key name" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/badkey "$PS" inspect s3://bkt/d.pgs
row C06 "credentials file: control character in a value" 1 "creds/ctrl: line 2: control character" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/ctrl "$PS" inspect s3://bkt/d.pgs
row C07 "credentials file: NUL byte" 1 "creds/nul: contains a NUL byte" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/nul "$PS" inspect s3://bkt/d.pgs
row C08 "credentials file: line of 9000 bytes" 1 "creds/long: line 2: longer than 8192 bytes" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/long "$PS" inspect s3://bkt/d.pgs
row C09 "profile without aws_secret_access_key" 1 "profile default in creds/nosecret: aws_secret_access_key is missing or empty" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/nosecret "$PS" inspect s3://bkt/d.pgs
row C10 "empty aws_secret_access_key" 1 "profile default in creds/emptysecret: aws_secret_access_key is missing or empty" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/emptysecret "$PS" inspect s3://bkt/d.pgs
row C11 "AWS_PROFILE names a profile the file lacks" 1 "profile prod not found in creds/other" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/other AWS_PROFILE=prod "$PS" inspect s3://bkt/d.pgs
row C12 "AWS_PROFILE set, credentials file missing" 1 "creds/none: No such file or directory \(needed for profile prod" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/none AWS_PROFILE=prod "$PS" inspect s3://bkt/d.pgs
row C13 "credentials file is a folder" 1 "creds: not a regular file of at most 1 MiB" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds "$PS" inspect s3://bkt/d.pgs
row C14 "AWS_ACCESS_KEY_ID without AWS_SECRET_ACCESS_KEY" 1 "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not" "${E[@]}" AWS_ACCESS_KEY_ID=AKIDEXAMPLE "$PS" inspect s3://bkt/d.pgs
row C15 "AWS_SECRET_ACCESS_KEY without AWS_ACCESS_KEY_ID" 1 "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not" "${E[@]}" AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI "$PS" inspect s3://bkt/d.pgs
row C16 "empty AWS_SECRET_ACCESS_KEY" 1 "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not" "${E[@]}" AWS_ACCESS_KEY_ID=AKIDEXAMPLE AWS_SECRET_ACCESS_KEY= "$PS" inspect s3://bkt/d.pgs
row C17 "credentials file readable by others (mode 644): warning, then the request" 1 "warning: creds/open644 is readable by group or others \(mode 644\): run chmod 600 creds/open644" "${E[@]}" AWS_SHARED_CREDENTIALS_FILE=creds/open644 "$PS" inspect s3://bkt/d.pgs

# ====================================================================
# server answers
# ====================================================================
SERVER_ROWS_NGINX="S01 S02 S03 S04 S05 S06 S07"
if nginx_start; then
    cp d.pgs "$D/www/d.pgs"
    U=$NGINX_URL
    row S01 "HTTP 404 (no such file)" 1 "/none.pgs: HTTP 404 Not Found" "$PS" inspect "$U/none.pgs"
    row S02 "HTTP 503 on every attempt" 1 "/fail/d.pgs: HTTP 503 Service (Temporarily )?Unavailable \(gave up after 6 attempts\)" "$PS" inspect "$U/fail/d.pgs"
    row S03 "200 with the whole object to a range request: works, with a warning" 0 "warning: .*/norange/d.pgs: the server ignores byte ranges" "$PS" verify -q "$U/norange/d.pgs"
    row S04 "stalled body (4 KiB, then 1 byte/s)" 1 "/stall/d.pgs: .*(no data for 1.0 s|too slow)" "$PS" bench "$U/stall/d.pgs" --transform none --timeout-ms 1000 --retries 2
    row S05 "silent server (no answer at all)" 1 "/hang/d.pgs: .*(timed out|no answer|no data)" "$PS" bench "$U/hang/d.pgs" --transform none --timeout-ms 1000 --retries 2
    row S06 "https:// to a plain-http port" 1 "https://127.0.0.1:[0-9]+/d.pgs: .*(SSL|TLS|ssl|tls)" "$PS" inspect "https://127.0.0.1:$NGINX_PORT/d.pgs"
    port=$((20000 + RANDOM % 20000))
    row S07 "connection refused (no server on the port)" 1 "127.0.0.1:[0-9]+/d.pgs: Failed to connect .*\(gave up after 2 attempts" "$PS" bench "http://127.0.0.1:$port/d.pgs" --retries 2
    nginx_stop
else
    skip_rows "$NGINX_WHY" $SERVER_ROWS_NGINX
fi

# a server that answers wrongly on purpose
cat > badhttp.py <<'EOF'
# /MODE/FILE serves FILE of the folder argv[1] with one fault: ok (none),
# wrongcr (Content-Range one byte off), nocr (206 without Content-Range),
# short (the body stops half way, the connection closes), shortdata (the same
# for reads of pages only, not of the header and tables), size (Content-Range
# total differs from the size HEAD gave), etag (the ETag of GET differs from
# HEAD's), 429 (always, Retry-After: 1), 500, 401, 403 (always).
import os, re, socket, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
ROOT = sys.argv[1]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def plain(self, code, text, extra=()):
        body = text.encode()
        self.send_response(code)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    def answer(self):
        m = re.match(r"^/([a-z0-9]+)/([^/]+)$", self.path)
        if not m:
            return self.plain(404, "not found\n")
        mode, name = m.groups()
        if mode == "429":
            return self.plain(429, "slow down\n", [("Retry-After", "1")])
        if mode in ("500", "401", "403"):
            return self.plain(int(mode), "no\n")
        path = os.path.join(ROOT, name)
        if not os.path.isfile(path):
            return self.plain(404, "not found\n")
        data = open(path, "rb").read()
        size = len(data)
        etag = '"v2"' if mode == "etag" and self.command == "GET" else '"v1"'
        rng = self.headers.get("Range")
        if self.command == "HEAD" or not rng:
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(data)
            return
        a, b = (int(x) for x in re.match(r"bytes=(\d+)-(\d+)", rng).groups())
        b = min(b, size - 1)
        body = data[a:b + 1]
        self.send_response(206)
        self.send_header("ETag", etag)
        if mode == "wrongcr":
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a + 1, b + 1, size))
        elif mode == "size":
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, size + 4096))
        elif mode != "nocr":
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, size))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "short" or (mode == "shortdata" and a >= 4096 and b < size - (1 << 20)):
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)
    do_GET = answer
    do_HEAD = answer
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
EOF
SERVER_ROWS_BAD="S08 S09 S10 S11 S12 S13 S14 S15 S16 S17"
mkdir -p badroot
cp d.pgs badroot/d.pgs
"$PY" badhttp.py badroot > bad.port 2> bad.err &
BAD_PID=$!
for _ in $(seq 50); do [ -s bad.port ] && break; sleep 0.1; done
if [ -s bad.port ]; then
    B="http://127.0.0.1:$(cat bad.port)"
    row S08 "Content-Range one byte off the range asked for" 1 "wrongcr/d.pgs: reading the header: asked for bytes 0-4095, server answered 1-4096" "$PS" inspect "$B/wrongcr/d.pgs"
    row S09 "206 without Content-Range" 1 "nocr/d.pgs: reading the header: 206 answer without a valid Content-Range" "$PS" inspect "$B/nocr/d.pgs"
    row S10 "Content-Range total differs from the size first seen" 1 "size/d.pgs: reading the header: object size changed while reading" "$PS" inspect "$B/size/d.pgs"
    row S11 "ETag changed between HEAD and GET" 1 "etag/d.pgs: reading the header: object changed while reading \(ETag \"v2\", was \"v1\"\)" "$PS" inspect "$B/etag/d.pgs"
    row S12 "body shorter than Content-Length (connection closed)" 1 "short/d.pgs: .*(closed|ended|remaining).*gave up after 6 attempts" "$PS" inspect "$B/short/d.pgs"
    row S13 "HTTP 429 on every attempt (Retry-After: 1)" 1 "429/d.pgs: HTTP 429 Too Many Requests \(gave up after 2 attempts\)" "$PS" bench "$B/429/d.pgs" --retries 2
    row S14 "HTTP 500 on every attempt" 1 "500/d.pgs: HTTP 500 Internal Server Error \(gave up after 6 attempts\)" "$PS" inspect "$B/500/d.pgs"
    row S15 "HTTP 401" 1 "401/d.pgs: HTTP 401 Unauthorized" "$PS" inspect "$B/401/d.pgs"
    row S16 "HTTP 403 (plain http)" 1 "403/d.pgs: HTTP 403 Forbidden" "$PS" inspect "$B/403/d.pgs"
    row S17 "page reads cut short on every attempt (metadata reads fine)" 1 "shortdata/d.pgs: reading page 0: .*(closed|ended|remaining).*gave up after 2 attempts" "$PS" bench "$B/shortdata/d.pgs" --transform none --order sequential --retries 2 --queue-depth 1
    kill "$BAD_PID" 2>/dev/null
    wait "$BAD_PID" 2>/dev/null
    BAD_PID=""
else
    skip_rows "the Python test server did not start: $(tail -n 1 bad.err)" $SERVER_ROWS_BAD
fi

# TLS: a self-signed certificate
SERVER_ROWS_TLS="S18 S19"
tls_why=""
# shellcheck source=servers/tls.sh
source "$ROOT/tests/servers/tls.sh"
tls_start "$D/tls" d.pgs || tls_why=$TLS_WHY
tport=${TLS_PORT:-0}
if [ -z "$tls_why" ]; then
    row S18 "https:// with a self-signed certificate (verification is on by default)" 1 "https://127.0.0.1:[0-9]+/d.pgs: .*(certificate|self-signed|self signed)" "$PS" inspect "https://127.0.0.1:$tport/d.pgs"
    row S19 "the same with --insecure: works, with a warning" 0 "warning: https://127.0.0.1:[0-9]+/d.pgs: TLS certificate verification is off \(--insecure\)" "$PS" verify -q --insecure "https://127.0.0.1:$tport/d.pgs"
    kill "$TLS_PID" 2>/dev/null
    wait "$TLS_PID" 2>/dev/null
    TLS_PID=""
else
    skip_rows "$tls_why" $SERVER_ROWS_TLS
fi

# S3 answers from Swift, which checks SigV4 signatures
SERVER_ROWS_S3="S20 S21 S22 S23 S24 S25 S26 S27"
s3_why=""
if ! "$PY" -c 'import boto3' 2> /dev/null; then
    s3_why="python3-boto3 is not installed (needed to upload the test object)"
elif ! swift_start; then
    s3_why=$SWIFT_WHY
else
    cat > s3put.py <<'EOF'
import sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="test:tester", aws_secret_access_key="testing",
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket=sys.argv[2])
s3.upload_file(sys.argv[3], sys.argv[2], sys.argv[4])
EOF
    "$PY" s3put.py "$SWIFT_URL" bkt d.pgs d.pgs > s3put.log 2>&1 || s3_why="upload to Swift failed: $(tail -n 1 s3put.log)"
fi
if [ -z "$s3_why" ]; then
    R=(env AWS_ENDPOINT_URL="$SWIFT_URL" AWS_ACCESS_KEY_ID=test:tester)
    row S20 "S3: wrong secret (403 SignatureDoesNotMatch)" 1 "s3://bkt/d.pgs \(endpoint http://127.0.0.1:[0-9]+\): signature mismatch: check AWS_SECRET_ACCESS_KEY" "${R[@]}" AWS_SECRET_ACCESS_KEY=wrong-secret "$PS" inspect s3://bkt/d.pgs
    row S21 "S3: unknown access key" 1 "s3://bkt/d.pgs .*: (signature mismatch|the access key id is not known)" env AWS_ENDPOINT_URL="$SWIFT_URL" AWS_ACCESS_KEY_ID=nobody:nobody AWS_SECRET_ACCESS_KEY=x "$PS" verify s3://bkt/d.pgs
    row S22 "S3: no such key" 1 "s3://bkt/none.pgs .*: no such key" "${R[@]}" AWS_SECRET_ACCESS_KEY=testing "$PS" inspect s3://bkt/none.pgs
    row S23 "S3: no such bucket" 1 "s3://nobkt/d.pgs .*: no such bucket \"nobkt\"" "${R[@]}" AWS_SECRET_ACCESS_KEY=testing "$PS" inspect s3://nobkt/d.pgs
    row S24 "S3: wrong region" 1 "wrong region eu-west-1: the bucket is in us-east-1 \(set AWS_REGION=us-east-1\)" "${R[@]}" AWS_SECRET_ACCESS_KEY=testing AWS_REGION=eu-west-1 "$PS" inspect s3://bkt/d.pgs
    row S25 "S3: no credentials at all (anonymous request)" 1 "s3://bkt/d.pgs .*HTTP 400|s3://bkt/d.pgs .*anonymous" env AWS_ENDPOINT_URL="$SWIFT_URL" "$PS" inspect s3://bkt/d.pgs
    row S26 "S3: wrong secret when writing (convert to s3://)" 1 "s3://bkt/out.pgs .*: signature mismatch" "${R[@]}" AWS_SECRET_ACCESS_KEY=wrong-secret "$PS" convert -q d.pgs s3://bkt/out.pgs
    row S27 "S3: wrong secret when packing (pack -o s3://)" 1 "s3://bkt/packed.pgs .*: signature mismatch" "${R[@]}" AWS_SECRET_ACCESS_KEY=wrong-secret "$PS" pack imgs -o s3://bkt/packed.pgs -q
    swift_stop
else
    skip_rows "$s3_why" $SERVER_ROWS_S3
fi

# ====================================================================
# the table: print it, rewrite it, or check that the committed one matches
# ====================================================================
HEAD='| ID | Bad input | Command (run in the test folder) | Exit | Message (exact; PORT, N: numbers that vary) |
|---|---|---|---|---|'
# Rows whose message depends on which of two timers fires first (the backend's
# own no-progress watchdog or libcurl's low-speed limit, both at --timeout-ms):
# their cell lists every message seen, separated by "<br>*or:* " (--update adds a new one;
# remove by hand one the code no longer prints).
VARYING="S04 S05"
grep -oE '^ *row [A-Z][0-9]+ ' "$SELF" | awk '{ print $2 }' > "$D/ids.txt"
case $MODE in
    --markdown)
        printf '%s\n' "$HEAD"
        cat "$ROWS"
        ;;
    *)
        if [ "$MODE" = --update ] && [ "$T_FAILED" -gt 0 ]; then
            echo "not updating $DOC: $T_FAILED row(s) failed" >&2
            exit 1
        fi
        if [ ! -f "$DOC" ]; then
            fail bad_inputs_table_in_sync "$DOC is missing (make it with: bash tests/it_bad_inputs.sh BUILD --update)"
        elif res=$("$PY" - "${MODE:-check}" "$DOC" "$ROWS" "$HEAD" "$D/ids.txt" "$VARYING" <<'EOF'
# check: every row that ran is in the table as printed now (for a varying row, its
# message is one of those listed), and the table has no row the script lacks.
# --update: rewrite the table; skipped rows keep their text, varying rows gain the new message.
import re, sys
mode, doc, rows, head, ids, varying = sys.argv[1:7]
varying = set(varying.split())
SEP = "<br>*or:* "
text = open(doc).read()
pat = re.compile(r"^\| ([A-Z][0-9]+) \|")
def split(line):                      # (everything up to the message cell, [messages])
    body = line.rstrip("\n")
    head_part, msg = body[:-2].rsplit(" | ", 1)
    return head_part, msg.split(SEP)
new = {pat.match(l).group(1): l.rstrip("\n") for l in open(rows)}
old = {pat.match(l).group(1): l for l in text.splitlines() if pat.match(l)}
order = open(ids).read().split()
if mode == "--update":
    out = []
    for i in order:
        if i in new:
            line = new[i]
            if i in varying and i in old and split(old[i])[0] == split(line)[0]:
                msgs = split(old[i])[1]
                m = split(line)[1][0]
                if m not in msgs:
                    msgs.append(m)
                line = split(line)[0] + " | " + SEP.join(msgs) + " |"
            out.append(line)
        elif i in old:
            out.append(old[i])
    begin, end = "<!-- BEGIN generated table -->", "<!-- END generated table -->"
    if begin not in text or end not in text:
        sys.exit(f"{doc}: markers {begin} / {end} missing")
    a, b = text.index(begin) + len(begin), text.index(end)
    open(doc, "w").write(text[:a] + "\n" + head + "\n" + "\n".join(out) + "\n" + text[b:])
    print(f"{len(out)} rows written to {doc} ({len(new)} from this run)")
    sys.exit(0)
differ = []
for i, line in new.items():
    if i not in old:
        differ.append(i + "(missing)")
        continue
    h, m = split(line)
    oh, om = split(old[i])
    if h != oh or m[0] not in om:
        differ.append(i)
stale = [i for i in old if i not in order]
if differ or stale:
    print(f"rows differing from what the code prints: {' '.join(differ) or 'none'}; rows no test runs: "
          f"{' '.join(stale) or 'none'} (regenerate: bash tests/it_bad_inputs.sh BUILD --update)")
    sys.exit(1)
print(f"{len(new)} rows checked of {len(old)} in BAD_INPUTS.md")
EOF
        ); then
            if [ "$MODE" = --update ]; then echo "$res"; else ok "bad_inputs_table_in_sync ($res)"; fi
        else
            fail bad_inputs_table_in_sync "$res"
        fi
        ;;
esac
TB=$TB_SAVED
