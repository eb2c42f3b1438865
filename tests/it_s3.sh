#!/usr/bin/env bash
# s3:// against OpenStack Swift + s3api (tests/servers/swift.sh), which
# verifies SigV4 signatures: reads byte for byte and a dataset verified with
# the right secret; a wrong secret refused with a one-line error that names
# the bucket and never shows the secret; a session token; virtual-hosted
# addressing through CURLOPT_RESOLVE; keys with spaces and '='; missing
# keys/buckets; `pack -o s3://` as a multipart upload; an aborted upload
# leaving nothing; throughput next to a plain libcurl SigV4 loop.
source "$(dirname "$0")/lib.sh" "$1"
source "$ROOT/tests/servers/swift.sh"
PY=/usr/bin/python3
IOR="$BUILD/bench/io_read"
CEIL="$BUILD/bench/curl_ceiling"
D="$TB/it_s3"
rm -rf "$D"
mkdir -p "$D"
TB_SAVED=$TB
TB=$D
trap 'swift_stop; rm -rf "$D"' EXIT

for t in "$IOR" "$CEIL" "$BUILD/bench/mkpgs"; do
    [ -x "$t" ] || { fail s3_tools "$t not built"; exit 0; }
done
if ! "$PY" -c 'import boto3' 2>/dev/null; then
    skip s3_all "python3-boto3 is not installed (needed to upload test objects)"
    exit 0
fi
if ! swift_start; then
    skip s3_all "$SWIFT_WHY"
    exit 0
fi
ok s3_swift_started

# the environment of a reader: endpoint and the right credentials
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_SECURITY_TOKEN AWS_SHARED_CREDENTIALS_FILE AWS_REGION AWS_DEFAULT_REGION
export AWS_ENDPOINT_URL=$SWIFT_URL AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing
export HOME=$D # no ~/.aws of the machine's user
B=pgs-bucket

head -c $((40 << 20)) /dev/urandom > "$D/obj.bin"
"$BUILD/bench/mkpgs" "$D/d.pgs" --size 24M > "$D/mkpgs.log" 2>&1 || { fail s3_mkpgs "$(tail -n 1 "$D/mkpgs.log")"; exit 0; }
SIZE=$(stat -c %s "$D/obj.bin")

cat > "$D/s3.py" <<'EOF'
import sys, boto3
from botocore.config import Config
ep, op = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="test:tester", aws_secret_access_key="testing",
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
if op == "mkbucket":
    s3.create_bucket(Bucket=sys.argv[3])
elif op == "put":
    s3.upload_file(sys.argv[5], sys.argv[3], sys.argv[4])
elif op == "exists":       # exit 0 if the object exists, 3 if not
    try:
        s3.head_object(Bucket=sys.argv[3], Key=sys.argv[4]); sys.exit(0)
    except s3.exceptions.ClientError:
        sys.exit(3)
elif op == "uploads":      # multipart uploads still open for a key
    r = s3.list_multipart_uploads(Bucket=sys.argv[3], Prefix=sys.argv[4])
    print(len(r.get("Uploads", [])))
elif op == "get":
    s3.download_file(sys.argv[3], sys.argv[4], sys.argv[5])
EOF
s3py() { "$PY" "$D/s3.py" "$SWIFT_URL" "$@"; }
if ! s3py mkbucket "$B" 2> "$D/py.err" || ! s3py put "$B" obj.bin "$D/obj.bin" 2>> "$D/py.err" ||
   ! s3py put "$B" d.pgs "$D/d.pgs" 2>> "$D/py.err" || ! s3py put "$B" "dir/a b=c+d.bin" "$D/obj.bin" 2>> "$D/py.err"; then
    fail s3_upload "boto3: $(tail -n 1 "$D/py.err")"
    exit 0
fi
ok s3_upload_boto3

# a client for what io_read has no flags for (resolve, addressing) and for ps_out_s3
LIBS=$(sed -n 's/^Libs.private: //p' "$BUILD/pagestream.pc")
cat > "$D/psclient.c" <<'EOF'
/* psclient get URL OFF LEN [--endpoint E] [--addressing N] [--resolve R]   bytes to stdout
 * psclient put URL FILE [--abort-after BYTES]                            ps_out_s3 upload */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/io.h"
int main(int argc, char **argv)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    long long abort_after = -1;
    ps_io_opts_init(&o);
    if (argc < 4) return 2;
    for (int i = 4; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--endpoint")) o.endpoint = argv[++i];
        else if (!strcmp(argv[i], "--addressing")) o.addressing = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--resolve")) o.resolve = argv[++i];
        else if (!strcmp(argv[i], "--abort-after")) abort_after = atoll(argv[++i]);
    }
    if (!strcmp(argv[1], "get")) {
        struct ps_io *io;
        if (argc < 5 || ps_io_open(argv[2], &o, &io, err) < 0) { fprintf(stderr, "psclient: %s\n", err); return 1; }
        uint64_t off = strtoull(argv[3], 0, 0), len = strtoull(argv[4], 0, 0);
        char *b = malloc(len ? len : 1);
        int bad = ps_io_pread(io, b, len, off) != (int64_t)len;
        if (bad) fprintf(stderr, "psclient: %s\n", ps_io_errmsg(io));
        else fwrite(b, 1, len, stdout);
        free(b);
        ps_io_close(io);
        return bad;
    }
    struct ps_out *out;
    static char buf[1 << 20];
    size_t n;
    long long tot = 0;
    FILE *f = fopen(argv[3], "rb");
    if (!f || ps_out_open(argv[2], &o, &out, err) < 0) { fprintf(stderr, "psclient: %s\n", f ? err : "no input"); if (f) fclose(f); return 1; }
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (ps_out_write(out, buf, n) < 0) { fprintf(stderr, "psclient: %s\n", ps_out_errmsg(out)); ps_out_close(out); fclose(f); return 1; }
        tot += (long long)n;
        if (abort_after >= 0 && tot >= abort_after) { ps_out_abort(out); ps_out_close(out); fclose(f); return 0; }
    }
    fclose(f);
    if (ps_out_commit(out) < 0) { fprintf(stderr, "psclient: %s\n", ps_out_errmsg(out)); ps_out_close(out); return 1; }
    ps_out_close(out);
    return 0;
}
EOF
# plain cc, or clang with the sanitizers when the library was built with them (make asan)
CLIENT_OK=1
# shellcheck disable=SC2086 # LIBS is a list of flags
if ! cc -std=c11 -D_GNU_SOURCE -O1 -I"$ROOT/include" -I"$ROOT" -o "$D/psclient" "$D/psclient.c" "$BUILD/libpagestream.a" $LIBS 2> "$D/cc.log" &&
   ! clang -std=c11 -D_GNU_SOURCE -O1 -fsanitize=address,undefined -I"$ROOT/include" -I"$ROOT" -o "$D/psclient" "$D/psclient.c" \
       "$BUILD/libpagestream.a" $LIBS 2>> "$D/cc.log"; then
    fail s3_psclient_build "$(tail -n 2 "$D/cc.log" | tr '\n' ' ')"
    CLIENT_OK=0
fi

same_bytes() { # name off len cmd...: the command prints bytes [off, off+len) of obj.bin
    local name=$1 off=$2 len=$3; shift 3
    if ! "$@" > "$D/got.bin" 2> "$D/err.txt"; then fail "$name" "$(tail -n 1 "$D/err.txt")"; return; fi
    tail -c +$((off + 1)) "$D/obj.bin" | head -c "$len" > "$D/want.bin"
    if cmp -s "$D/got.bin" "$D/want.bin"; then ok "$name"; else fail "$name" "bytes differ"; fi
}

# ---- the right secret: correct bytes, a verified dataset ----
same_bytes s3_bytes_whole 0 "$SIZE" "$IOR" "s3://$B/obj.bin" --dump 0 "$SIZE" --bs 4M
same_bytes s3_bytes_odd_range 999999 2345678 "$IOR" "s3://$B/obj.bin" --dump 999999 2345678
check s3_verify_dataset "$PS" verify "s3://$B/d.pgs"
same_bytes s3_key_space_equals 123 456789 "$IOR" "s3://$B/dir/a b=c+d.bin" --dump 123 456789

# ---- a wrong secret: refused by the server's signature check; one line; no secret ----
SECRET_SENTINEL="wrong-SECRET-7f3a9c"
out=$(AWS_SECRET_ACCESS_KEY=$SECRET_SENTINEL "$PS" verify "s3://$B/d.pgs" 2>&1); rc=$?
lines=$(printf '%s\n' "$out" | grep -c .)
if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && printf '%s' "$out" | grep -q "s3://$B/d.pgs (endpoint $SWIFT_URL): signature mismatch: check AWS_SECRET_ACCESS_KEY"; then
    ok s3_wrong_secret_refused
else
    fail s3_wrong_secret_refused "rc $rc, $lines lines: $out"
fi
if printf '%s' "$out" | grep -q "$SECRET_SENTINEL"; then fail s3_wrong_secret_not_shown "the secret is in the output"; else ok s3_wrong_secret_not_shown; fi
out=$(AWS_SECRET_ACCESS_KEY=$SECRET_SENTINEL "$IOR" "s3://$B/obj.bin" 2>&1)
if printf '%s' "$out" | grep -q "signature mismatch" && ! printf '%s' "$out" | grep -q "$SECRET_SENTINEL"; then
    ok s3_wrong_secret_io_read
else
    fail s3_wrong_secret_io_read "$out"
fi
expect_fail s3_unknown_key_id "s3://$B/d.pgs .*(signature mismatch|access key id|access denied)" \
    env AWS_ACCESS_KEY_ID=nobody:none "$PS" verify "s3://$B/d.pgs"
expect_fail s3_anonymous "s3://$B/d.pgs .*without credentials was refused \(HTTP 4[0-9][0-9].*set AWS_ACCESS_KEY_ID" \
    env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$PS" verify "s3://$B/d.pgs"

# ---- a session token: sent as x-amz-security-token. tempauth has no STS, so Swift
# ignores the header and still serves the read; that the header is sent and
# signed is proven against a scripted server in tests/test_url.c (test_s3_errors).
TOKEN_SENTINEL="FQoGZXIvYXdzEXAMPLE-token-2b8e"
out=$(AWS_SESSION_TOKEN=$TOKEN_SENTINEL "$PS" verify "s3://$B/d.pgs" 2>&1); rc=$?
if [ $rc -eq 0 ] && ! printf '%s' "$out" | grep -q "$TOKEN_SENTINEL"; then ok s3_session_token_read
else fail s3_session_token_read "rc $rc: $out"; fi
out=$(AWS_SESSION_TOKEN=$TOKEN_SENTINEL AWS_SECRET_ACCESS_KEY=$SECRET_SENTINEL "$PS" verify "s3://$B/d.pgs" 2>&1)
if printf '%s' "$out" | grep -Eq "$TOKEN_SENTINEL|$SECRET_SENTINEL"; then fail s3_token_not_shown "$out"; else ok s3_token_not_shown; fi

# ---- credentials from ~/.aws/credentials (profile), with the permission warning ----
mkdir -p "$HOME/.aws"
printf '[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n[swift]\naws_access_key_id = test:tester\naws_secret_access_key = testing\n' > "$HOME/.aws/credentials"
chmod 644 "$HOME/.aws/credentials"
out=$(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_PROFILE=swift "$PS" verify "s3://$B/d.pgs" 2>&1); rc=$?
if [ $rc -eq 0 ] && printf '%s' "$out" | grep -q "readable by group or others"; then ok s3_profile_file_and_warning
else fail s3_profile_file_and_warning "rc $rc: $out"; fi
chmod 600 "$HOME/.aws/credentials"
expect_fail s3_profile_wrong_secret "s3://$B/d.pgs .*signature mismatch: check aws_secret_access_key of profile default" \
    env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$PS" verify "s3://$B/d.pgs"
rm -rf "$HOME/.aws"

# ---- missing things ----
expect_fail s3_no_such_key "s3://$B/nope.pgs \(endpoint .*\): no such key" "$PS" verify "s3://$B/nope.pgs"
expect_fail s3_no_such_bucket "no such bucket \"no-bucket-here\"" "$PS" verify "s3://no-bucket-here/d.pgs"

if [ $CLIENT_OK = 1 ]; then
    # ---- virtual-hosted addressing (storage_domain s3.amazonaws.com) via CURLOPT_RESOLVE ----
    P=$SWIFT_PORT
    same_bytes s3_virtual_hosted 5 1000000 "$D/psclient" get "s3://$B/obj.bin" 5 1000000 \
        --endpoint "http://s3.amazonaws.com:$P" --addressing 2 --resolve "$B.s3.amazonaws.com:$P:127.0.0.1"
    out=$(AWS_SECRET_ACCESS_KEY=$SECRET_SENTINEL "$D/psclient" get "s3://$B/obj.bin" 0 10 \
        --endpoint "http://s3.amazonaws.com:$P" --addressing 2 --resolve "$B.s3.amazonaws.com:$P:127.0.0.1" 2>&1)
    if printf '%s' "$out" | grep -q "signature mismatch"; then ok s3_virtual_hosted_wrong_secret; else fail s3_virtual_hosted_wrong_secret "$out"; fi

    # ---- writing: ps_out_s3 multipart (3 parts of 8 MiB + rest), abort leaves nothing ----
    if "$D/psclient" put "s3://$B/up/whole obj.bin" "$D/obj.bin" 2> "$D/err.txt" &&
       "$IOR" "s3://$B/up/whole obj.bin" --dump 0 "$SIZE" --bs 4M > "$D/got.bin" 2>> "$D/err.txt" &&
       cmp -s "$D/got.bin" "$D/obj.bin"; then
        ok s3_multipart_upload
    else
        fail s3_multipart_upload "$(tail -n 1 "$D/err.txt")"
    fi
    "$D/psclient" put "s3://$B/up/aborted.bin" "$D/obj.bin" --abort-after $((20 << 20)) 2> "$D/err.txt"
    s3py exists "$B" up/aborted.bin; e=$?
    n=$(s3py uploads "$B" up/aborted.bin 2>/dev/null)
    if [ $e -eq 3 ] && [ "$n" = 0 ]; then ok s3_aborted_upload_leaves_nothing
    else fail s3_aborted_upload_leaves_nothing "exists=$e open uploads=$n $(tail -n 1 "$D/err.txt")"; fi
    expect_fail s3_upload_wrong_secret "s3://$B/up/x.bin .*signature mismatch" \
        env AWS_SECRET_ACCESS_KEY=$SECRET_SENTINEL "$D/psclient" put "s3://$B/up/x.bin" "$D/obj.bin"
else
    skip s3_client_tests "the test client could not be built"
fi

# ---- pack -o s3:// (an ImageFolder of 60 noise JPEGs, ~7 MiB) ----
if "$PY" -c 'import PIL' 2>/dev/null; then
    "$PY" - "$D/imgs" <<'EOF'
import os, random, sys
from PIL import Image
root = sys.argv[1]
rng = random.Random(3)
for c in ("a", "b"):
    os.makedirs(f"{root}/{c}", exist_ok=True)
for i in range(60):
    w, h = rng.randint(250, 350), rng.randint(250, 350)
    im = Image.frombytes("RGB", (w, h), bytes(rng.getrandbits(8) for _ in range(w * h * 3)))
    im.save(f"{root}/{'ab'[i % 2]}/{i:03d}.jpg", quality=95)
EOF
    if "$PS" pack "$D/imgs" -o "s3://$B/packed/train set.pgs" --page-size 1M -q > "$D/pack.log" 2>&1 &&
       "$PS" verify "s3://$B/packed/train set.pgs" > "$D/verify.log" 2>&1 &&
       grep -q "60 samples" "$D/verify.log"; then
        ok "s3_pack_multipart ($(grep -o '[0-9.]* MiB read' "$D/verify.log"))"
    else
        fail s3_pack_multipart "$(tail -n 2 "$D/pack.log" "$D/verify.log" | tr '\n' ' ')"
    fi
    expect_fail s3_pack_wrong_secret "signature mismatch" \
        env AWS_SECRET_ACCESS_KEY=$SECRET_SENTINEL "$PS" pack "$D/imgs" -o "s3://$B/packed/bad.pgs" -q
    s3py exists "$B" packed/bad.pgs; e=$?
    if [ $e -eq 3 ]; then ok s3_pack_failed_leaves_nothing; else fail s3_pack_failed_leaves_nothing "object exists"; fi
else
    skip s3_pack_multipart "python3-pil is not installed (needed to make JPEGs)"
fi

# ---- throughput: pagestream vs a plain libcurl SigV4 loop (4 MiB ranges, 8 in flight) ----
best_io=0; best_curl=0
for _ in 1 2; do
    c=$("$CEIL" "$SWIFT_URL/$B/obj.bin" "$SIZE" 4M 8 320M --sigv4 "test:tester:testing:us-east-1" 2>&1 |
        sed -n 's/.*MiB\/s=\([0-9.]*\).*/\1/p')
    p=$("$IOR" "s3://$B/obj.bin" --bs 4M --qd 8 --total 320M --time 3 2>&1 | sed -n 's/.*MiB\/s=\([0-9.]*\).*/\1/p')
    best_curl=$(awk -v a="$best_curl" -v b="${c:-0}" 'BEGIN{print (b>a)?b:a}')
    best_io=$(awk -v a="$best_io" -v b="${p:-0}" 'BEGIN{print (b>a)?b:a}')
done
ratio=$(awk -v a="$best_io" -v b="$best_curl" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print 0 }')
echo "throughput swift s3: pagestream ${best_io} MiB/s, curl_ceiling ${best_curl} MiB/s, ratio ${ratio}"
if awk -v r="$ratio" 'BEGIN{exit !(r >= 0.75)}'; then ok "s3_throughput_ratio $ratio"
else fail s3_throughput_ratio "ratio $ratio (pagestream $best_io MiB/s, curl $best_curl MiB/s)"; fi
TB=$TB_SAVED
