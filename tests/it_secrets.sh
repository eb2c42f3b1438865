#!/usr/bin/env bash
# Secrets and TLS: every command that can reach S3 (inspect, verify, cat,
# bench --json, pack -o s3://, convert both ways, doctor --json) is run with
# debug logging against Swift (right and wrong secrets, from the environment
# and from a credentials file), against a closed port and against an endpoint
# that never answers; stdout, stderr and every file written (also the objects
# uploaded) are searched for sentinel secrets, plain, URL-encoded, base64 and
# hex. Also: a password in an http:// URL is never shown; the credentials file
# warning (644/640 warn, 600 does not); no option takes a secret; TLS is
# verified by default (self-signed nginx) and --insecure works and warns.
source "$(dirname "$0")/lib.sh" "$1"
source "$ROOT/tests/servers/swift.sh"
source "$ROOT/tests/servers/nginx.sh"
PY=/usr/bin/python3
MK="$BUILD/bench/mkpgs"
D="$TB/it_secrets"
rm -rf "$D"
mkdir -p "$D"
TB_SAVED=$TB
TB=$D
TLS_PID=""
cleanup() {
    swift_stop
    nginx_stop
    [ -n "$TLS_PID" ] && kill "$TLS_PID" 2>/dev/null
    cd / && { [ -n "${KEEP:-}" ] || rm -rf "$D"; }
}
trap cleanup EXIT
cd "$D" || exit 1
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_SECURITY_TOKEN AWS_PROFILE \
    AWS_SHARED_CREDENTIALS_FILE AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL PAGESTREAM_FAULT \
    CURL_CA_BUNDLE SSL_CERT_FILE AWS_CA_BUNDLE # the default CA bundle, whatever the machine sets
export HOME=$D

# Sentinels: characters that S3 secrets really have ('/', '+', '='), so that
# URL-encoding and base64 change them; a core of hex digits that survives most
# encodings. The right secret of the Swift test user is "testing": it is
# searched for too (as a whole word).
SECRET='Sentinel/Secret+7f3a9c1e5b0d=Zq'
TOKEN='SentinelToken/9b2d4e6f8a1c+QX=='
FILESECRET='FileSentinel/c0ffee5ec2e7+Kw'
FILETOKEN='FileToken/d15ea5eb0a7+T0k'
PASSWORD='UrlPassw0rd5e47c1'

[ -x "$MK" ] || { fail secrets_tools "$MK not built"; exit 0; }
"$MK" d.pgs --size 2M --sample-size 8K --page-size 64K > mk.log 2>&1 || { fail secrets_mkpgs "$(tail -n 1 mk.log)"; exit 0; }
mkdir -p imgs/cls out written
for j in baseline baseline444 progressive gray; do cp "$ROOT/tests/corpus/jpeg/$j.jpg" imgs/cls/; done

# ---- no option takes a secret ----
bad_opts=""
for c in pack inspect verify cat bench convert doctor; do
    "$PS" "$c" --help > "help.$c" 2>&1
    if grep -iqE -- '--[a-z-]*(secret|access-key|key-id|token|passw|credential)' "help.$c"; then bad_opts="$bad_opts $c"; fi
done
if [ -z "$bad_opts" ]; then ok "secrets_no_option_takes_a_secret (help of 7 commands)"
else fail secrets_no_option_takes_a_secret "options that take a secret in:$bad_opts"; fi
expect_fail secrets_secret_flag_refused "unknown option '--aws-secret-access-key'" "$PS" inspect --aws-secret-access-key x s3://b/k

# ---- the credentials file: readable by others -> warning naming it; 600 -> none ----
printf '[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = %s\n' "$FILESECRET" > creds.perm
for mode in 644 640 600; do
    chmod "$mode" creds.perm
    AWS_SHARED_CREDENTIALS_FILE=$D/creds.perm AWS_ENDPOINT_URL=http://127.0.0.1:1 \
        "$PS" inspect s3://bkt/d.pgs > "out/perm$mode.txt" 2>&1
    if [ "$mode" = 600 ]; then
        if grep -q "readable by" "out/perm$mode.txt"; then fail secrets_creds_600_no_warning "$(head -n 1 "out/perm$mode.txt")"
        else ok secrets_creds_600_no_warning; fi
    elif grep -qF "warning: $D/creds.perm is readable by group or others (mode $mode): run chmod 600 $D/creds.perm" "out/perm$mode.txt"; then
        ok "secrets_creds_${mode}_warns"
    else
        fail "secrets_creds_${mode}_warns" "$(head -n 2 "out/perm$mode.txt" | tr '\n' ' ')"
    fi
done

# ---- every S3 command, with debug logs, in each setting ----
# run_all SCENARIO EXPECT(ok|fail) URL-ENV...: runs the commands with the env given
run_all() {
    local scen=$1 want=$2 n rc
    shift 2
    local -a E=(env "$@" PAGESTREAM_LOG=3)
    local -a cmds=(
        "inspect|$PS inspect s3://bkt/d.pgs"
        "inspect_json|$PS inspect --json s3://bkt/d.pgs"
        "verify|$PS verify s3://bkt/d.pgs"
        "verify_json|$PS verify --json s3://bkt/d.pgs"
        "cat|$PS cat s3://bkt/d.pgs 5"
        "bench_json|$PS bench s3://bkt/d.pgs --transform none --epochs 1 --json --retries 6 --timeout-ms 2000 --fault seed=5,error=0.1,http429=0.02,reset=0.02,short=0.02 --ids-out written/$scen.ids"
        "pack|$PS pack imgs -o s3://bkt/p-$scen.pgs"
        "convert_up|$PS convert -q d.pgs s3://bkt/c-$scen.pgs"
        "convert_down|$PS convert -q s3://bkt/d.pgs written/$scen-local.pgs"
        "doctor_json|$PS doctor s3://bkt/d.pgs --seconds 1 --images 4 --transform none --json"
    )
    local bad=""
    for c in "${cmds[@]}"; do
        n=${c%%|*}
        # shellcheck disable=SC2086
        timeout 120 "${E[@]}" ${c#*|} > "out/$scen.$n.stdout" 2> "out/$scen.$n.stderr"
        rc=$?
        echo "$rc" > "out/$scen.$n.rc"
        if [ "$rc" = 124 ]; then bad="$bad $n(hung)"
        elif [ "$want" = ok ] && [ "$rc" != 0 ]; then bad="$bad $n(exit $rc: $(tail -n 1 "out/$scen.$n.stderr"))"
        elif [ "$want" = fail ] && [ "$rc" = 0 ]; then bad="$bad $n(succeeded)"
        fi
    done
    if [ -z "$bad" ]; then ok "secrets_run_$scen (${#cmds[@]} commands, expected: $want)"
    else fail "secrets_run_$scen" "$bad"; fi
}

s3_why=""
if ! "$PY" -c 'import boto3' 2> /dev/null; then
    s3_why="python3-boto3 is not installed (needed to upload the test object)"
elif ! swift_start; then
    s3_why=$SWIFT_WHY
fi
cat > s3.py <<'EOF'
import sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="test:tester", aws_secret_access_key="testing",
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
if sys.argv[2] == "setup":
    s3.create_bucket(Bucket="bkt")
    s3.upload_file(sys.argv[3], "bkt", "d.pgs")
else:  # fetch every object of the bucket except d.pgs into a folder
    for o in s3.list_objects_v2(Bucket="bkt").get("Contents", []):
        if o["Key"] != "d.pgs":
            s3.download_file("bkt", o["Key"], sys.argv[3] + "/s3-" + o["Key"])
            print(o["Key"])
EOF
if [ -z "$s3_why" ]; then
    "$PY" s3.py "$SWIFT_URL" setup d.pgs > s3setup.log 2>&1 || s3_why="upload to Swift failed: $(tail -n 1 s3setup.log)"
fi
if [ -n "$s3_why" ]; then
    skip secrets_s3 "$s3_why"
else
    EP=AWS_ENDPOINT_URL=$SWIFT_URL
    # right secret (the Swift user's), a sentinel session token (Swift ignores it)
    run_all env_right ok "$EP" AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_SESSION_TOKEN="$TOKEN"
    # wrong sentinel secret
    run_all env_wrong fail "$EP" AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY="$SECRET" AWS_SESSION_TOKEN="$TOKEN"
    # credentials files: a wrong sentinel secret in [default], the right one in [good]
    printf '[default]\naws_access_key_id = test:tester\naws_secret_access_key = %s\naws_session_token = %s\n\n[good]\naws_access_key_id = test:tester\naws_secret_access_key = testing\naws_session_token = %s\n' \
        "$FILESECRET" "$FILETOKEN" "$FILETOKEN" > creds.file
    chmod 600 creds.file
    run_all file_wrong fail "$EP" AWS_SHARED_CREDENTIALS_FILE="$D/creds.file"
    run_all file_right ok "$EP" AWS_SHARED_CREDENTIALS_FILE="$D/creds.file" AWS_PROFILE=good
    # the wrong-secret errors say what is wrong
    if grep -q "signature mismatch: check AWS_SECRET_ACCESS_KEY" out/env_wrong.inspect.stderr &&
        grep -q "signature mismatch: check aws_secret_access_key of profile default" out/file_wrong.inspect.stderr; then
        ok secrets_wrong_secret_message
    else
        fail secrets_wrong_secret_message "$(tail -n 1 out/env_wrong.inspect.stderr) / $(tail -n 1 out/file_wrong.inspect.stderr)"
    fi
    # the objects the successful runs uploaded
    if "$PY" s3.py "$SWIFT_URL" fetch written > fetched.log 2>&1; then
        ok "secrets_uploads_fetched ($(wc -l < fetched.log) objects)"
    else
        fail secrets_uploads_fetched "$(tail -n 1 fetched.log)"
    fi
    # the server gone: a closed port, then an endpoint that never answers (nginx /hang/)
    swift_stop
    run_all dead fail AWS_ENDPOINT_URL=http://127.0.0.1:1 AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY="$SECRET" AWS_SESSION_TOKEN="$TOKEN"
    if nginx_start; then
        t0=$(date +%s)
        env AWS_ENDPOINT_URL="$NGINX_URL/hang" AWS_SHARED_CREDENTIALS_FILE="$D/creds.file" PAGESTREAM_LOG=3 \
            "$PS" bench s3://bkt/d.pgs --transform none --json --timeout-ms 1000 --retries 2 > out/hang.stdout 2> out/hang.stderr
        rc=$?
        el=$(( $(date +%s) - t0 ))
        if [ "$rc" = 1 ] && [ "$el" -le 20 ] && grep -q "s3://bkt/d.pgs" out/hang.stderr; then
            ok "secrets_silent_endpoint_bounded (${el} s)"
        else
            fail secrets_silent_endpoint_bounded "exit $rc after ${el} s: $(tail -n 1 out/hang.stderr)"
        fi
    else
        skip secrets_silent_endpoint_bounded "$NGINX_WHY"
    fi
fi

# ---- a password in an http:// URL ----
if [ -n "${NGINX_URL:-}" ] || nginx_start; then
    cp d.pgs "$D/www/d.pgs"
    pu="http://reader:$PASSWORD@127.0.0.1:$NGINX_PORT"
    PAGESTREAM_LOG=3 "$PS" verify "$pu/d.pgs" > out/pw_ok.stdout 2> out/pw_ok.stderr
    PAGESTREAM_LOG=3 "$PS" inspect "$pu/none.pgs" > out/pw_404.stdout 2> out/pw_404.stderr
    PAGESTREAM_LOG=3 "$PS" bench "$pu/d.pgs" --transform none --epochs 1 --json --fault seed=2,error=0.3 > out/pw_bench.stdout 2> out/pw_bench.stderr
    if grep -q '^http://\*\*\*@127.0.0.1:[0-9]*/d.pgs: OK' out/pw_ok.stdout && grep -q 'http://\*\*\*@127.0.0.1:[0-9]*/none.pgs: HTTP 404' out/pw_404.stderr; then
        ok secrets_url_password_redacted
    else
        fail secrets_url_password_redacted "$(tail -n 1 out/pw_ok.stdout) / $(tail -n 1 out/pw_404.stderr)"
    fi
    nginx_stop
else
    skip secrets_url_password "$NGINX_WHY"
fi

# ---- search everything for the sentinels ----
cat > leaks.py <<'EOF'
# leaks.py DIR... -- SENTINEL...: no sentinel, in any usual encoding, in any file under the folders.
import base64, os, re, sys, urllib.parse
sep = sys.argv.index("--")
dirs, sentinels = sys.argv[1:sep], sys.argv[sep + 1:]
forms = []
for s in sentinels:
    b = s.encode()
    f = {s, urllib.parse.quote(s, safe=""), urllib.parse.quote_plus(s), urllib.parse.quote(s),
         s.replace("/", "\\/"), b.hex(), b.hex().upper()}
    # base64 of the secret wherever it starts inside a larger base64 text: 3 alignments,
    # leaving out the characters that depend on the neighbouring bytes
    for k in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            e = enc(b"\0" * k + b).decode()
            f.add(e[(4 * k + 2) // 3 + 1:-4])
    # the longest run of letters and digits: no encoding of the other characters changes it
    f.add(max(re.findall(r"[A-Za-z0-9]+", s), key=len))
    forms += [(s, x) for x in f if len(x) >= 6]
files, hits = 0, []
for d in dirs:
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            data = open(p, "rb").read()
            files += 1
            for s, x in forms:
                if x.encode() in data:
                    hits.append(f"{p}: {x!r} (a form of {s!r})")
            # the Swift user's right secret, as a word
            if re.search(rb"(?<![A-Za-z])testing(?![A-Za-z])", data):
                hits.append(f"{p}: the right secret 'testing'")
print(f"{files} files searched for {len(forms)} forms of {len(sentinels)} sentinels")
for h in hits[:20]:
    print("LEAK", h)
sys.exit(1 if hits else 0)
EOF
# the search finds what it looks for: a control folder with encoded sentinels in it
mkdir -p control
printf 'x-amz-security-token: %s\n' "$("$PY" -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$TOKEN")" > control/a
printf 'Authorization: Basic %s\n' "$(printf 'ab:%s' "$SECRET" | base64 -w0)" > control/b
printf '{"k": "%s"}\n' "$(printf '%s' "$FILESECRET" | od -An -tx1 | tr -d ' \n')" > control/c
printf 'pw=%s\n' "$PASSWORD" > control/d
if "$PY" leaks.py control -- "$SECRET" "$TOKEN" "$FILESECRET" "$FILETOKEN" "$PASSWORD" > control.out 2>&1; then
    fail secrets_search_finds_planted_leaks "the search found nothing in the control files"
elif [ "$(grep -o '^LEAK control/[a-d]' control.out | sort -u | wc -l)" = 4 ]; then
    ok "secrets_search_finds_planted_leaks (URL-encoded, base64, hex, plain)"
else
    fail secrets_search_finds_planted_leaks "found only: $(grep '^LEAK' control.out | tr '\n' ' ')"
fi
if out=$("$PY" leaks.py "$D/out" "$D/written" -- "$SECRET" "$TOKEN" "$FILESECRET" "$FILETOKEN" "$PASSWORD" 2>&1); then
    ok "secrets_never_printed_or_written ($(printf '%s' "$out" | head -n 1))"
else
    fail secrets_never_printed_or_written "$(printf '%s' "$out" | tr '\n' ' ' | cut -c 1-600)"
fi
# debug logging ran (so the search looked at debug output, not at silence)
lines=$(cat out/*.stderr 2>/dev/null | wc -l)
dbg=$(cat out/*.stderr 2>/dev/null | grep -c '^pagestream: debug:')
if [ -n "$s3_why" ]; then
    skip secrets_debug_logs_searched "no S3 runs: $s3_why"
elif [ "$dbg" -gt 0 ]; then
    ok "secrets_debug_logs_searched ($lines stderr lines, $dbg at debug level)"
else
    fail secrets_debug_logs_searched "no debug line in $lines stderr lines: PAGESTREAM_LOG=3 had no effect?"
fi

# ---- TLS: verification on by default, --insecure works and warns ----
tls_why=""
# shellcheck source=servers/tls.sh
source "$ROOT/tests/servers/tls.sh"
tls_start "$D/tls" d.pgs || tls_why=$TLS_WHY
tport=${TLS_PORT:-0}
if [ -n "$tls_why" ]; then
    skip secrets_tls "$tls_why"
else
    T="https://127.0.0.1:$tport/d.pgs"
    # the server really serves the file over TLS (curl, told where the certificate is)
    if curl -s --cacert tls/cert.pem -o tls/got.pgs "$T" && cmp -s tls/got.pgs d.pgs; then ok secrets_tls_server_works
    else fail secrets_tls_server_works "curl --cacert could not fetch $T"; fi
    for c in inspect verify; do
        expect_fail "secrets_tls_verified_by_default_$c" "^pagestream $c: https://127.0.0.1:$tport/d.pgs: .*(certificate|self-signed|self signed)" "$PS" "$c" "$T"
    done
    expect_fail secrets_tls_verified_by_default_bench "https://127.0.0.1:$tport/d.pgs: .*(certificate|self-signed|self signed)" \
        "$PS" bench "$T" --transform none --epochs 1
    if "$PS" verify --insecure "$T" > tls/ins.out 2>&1 && grep -q ": OK: 257 samples" tls/ins.out &&
        grep -q "warning: https://127.0.0.1:$tport/d.pgs: TLS certificate verification is off (--insecure)" tls/ins.out; then
        ok secrets_tls_insecure_works_and_warns
    else
        fail secrets_tls_insecure_works_and_warns "$(tail -n 2 tls/ins.out | tr '\n' ' ')"
    fi
    # verification is real: with the certificate named as the CA, the same URL works, no warning
    for v in CURL_CA_BUNDLE SSL_CERT_FILE; do
        if env "$v=$D/tls/cert.pem" "$PS" verify "$T" > "tls/ca.$v" 2>&1 && grep -q ": OK: 257 samples" "tls/ca.$v" &&
            ! grep -q "verification is off" "tls/ca.$v"; then
            ok "secrets_tls_private_ca_$v"
        else
            fail "secrets_tls_private_ca_$v" "$v=cert.pem: $(tail -n 1 "tls/ca.$v")"
        fi
    done
    if "$PS" bench "$T" --insecure --transform none --epochs 1 --json > tls/bench.json 2> tls/bench.err &&
        "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["epochs"][0]["images"] == 256 else 1)' tls/bench.json; then
        ok secrets_tls_insecure_bench
    else
        fail secrets_tls_insecure_bench "$(tail -n 1 tls/bench.err)"
    fi
    kill "$TLS_PID" 2>/dev/null
    wait "$TLS_PID" 2>/dev/null
    TLS_PID=""
fi
TB=$TB_SAVED
