#!/usr/bin/env bash
# The fault matrix on real servers: nginx (http://) and Swift (s3://), with
# 5% error answers, 1% 429 with Retry-After, 1% connection resets, 1% bodies
# cut short, 1% corrupted bodies and 0.1% 5-second stalls injected per
# request attempt by the HTTP backend.
#  - full epochs in quasi_random and random order deliver every sample exactly
#    once per epoch (bench --ids-out), with retries and re-fetches counted;
#  - intact: the sha256 of samples read with `pagestream cat` under the faults
#    equals their sha256 without faults (a corrupted read is refused by the
#    sample checksum, never printed), and `pagestream verify` under the same
#    faults finds every page intact (re-reading those corrupted in transit);
#  - the server gone for good (stopped, or frozen) mid-run: a clear error
#    within a bounded time (--timeout-ms, --retries).
source "$(dirname "$0")/lib.sh" "$1"
source "$ROOT/tests/servers/nginx.sh"
source "$ROOT/tests/servers/swift.sh"
PY=/usr/bin/python3
MK="$BUILD/bench/mkpgs"
D="$TB/it_faults_net"
rm -rf "$D"
mkdir -p "$D"
TB_SAVED=$TB
TB=$D
FROZEN=""
cleanup() {
    local p
    for p in $FROZEN; do kill -CONT -- "$p" 2>/dev/null; done
    nginx_stop
    swift_stop
    cd / && { [ -n "${KEEP:-}" ] || rm -rf "$D"; }
}
trap cleanup EXIT
cd "$D" || exit 1
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_SECURITY_TOKEN AWS_PROFILE \
    AWS_SHARED_CREDENTIALS_FILE AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL PAGESTREAM_FAULT \
    CURL_CA_BUNDLE SSL_CERT_FILE AWS_CA_BUNDLE # the default CA bundle, whatever the machine sets
export HOME=$D

# the matrix of issue 8 (probabilities per request attempt)
FAULTS="error=0.05,http429=0.01,reset=0.01,short=0.01,corrupt=0.01,stall=0.001,stall_ms=5000"
[ -x "$MK" ] || { fail faults_net_tools "$MK not built"; exit 0; }

# exactly_once FILE N EPOCHS: every id of [0, N) once in each epoch of FILE ("EPOCH BATCH id...")
exactly_once() {
    "$PY" - "$1" "$2" "$3" <<'EOF'
import sys
from collections import Counter
path, n, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = {}
for line in open(path):
    f = line.split()
    per.setdefault(int(f[0]), Counter()).update(int(i) for i in f[2:])
bad = []
for e in range(epochs):
    c = per.get(e, Counter())
    rep = sum(1 for v in c.values() if v > 1)
    miss = sum(1 for i in range(n) if i not in c)
    out = sum(1 for i in c if i >= n)
    if rep or miss or out:
        bad.append(f"epoch {e}: {miss} missing, {rep} repeated, {out} out of range")
extra = sorted(set(per) - set(range(epochs)))
if extra:
    bad.append(f"unexpected epochs {extra}")
print("; ".join(bad) if bad else f"{epochs} epochs x {n} samples, each exactly once")
sys.exit(1 if bad else 0)
EOF
}
jget() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# matrix NAME URL N ORDER EPOCHS CACHE SEED: one bench run under the faults, checked
matrix() {
    local name=$1 url=$2 n=$3 order=$4 epochs=$5 cache=$6 seed=$7 res t0 el
    rm -f "ids.$name"
    t0=$(date +%s)
    if ! timeout 300 "$PS" bench "$url" --transform none --order "$order" --epochs "$epochs" --cache-size "$cache" \
        --batch-size 64 --keep-last --queue-depth 8 --fault "seed=$seed,$FAULTS" --json --ids-out "ids.$name" \
        > "bench.$name.json" 2> "bench.$name.err"; then
        fail "faults_$name" "bench failed: $(tail -n 1 "bench.$name.err")"
        return
    fi
    el=$(( $(date +%s) - t0 ))
    local samples retries refetches mode
    samples=$(jget "bench.$name.json" 'sum(e["images"] for e in d["epochs"])')
    retries=$(jget "bench.$name.json" 'd["retries"]')
    refetches=$(jget "bench.$name.json" 'd["refetches"]')
    mode=$(jget "bench.$name.json" '"single samples" if d["sample_reads"] else "whole pages"')
    echo "# fault matrix $name: $epochs epochs, $samples samples delivered ($mode), $retries retries, $refetches re-fetches, ${el} s"
    if ! res=$(exactly_once "ids.$name" "$n" "$epochs"); then
        fail "faults_${name}_exactly_once" "$res"
    elif [ "$samples" != $((n * epochs)) ]; then
        fail "faults_${name}_exactly_once" "$samples samples delivered, expected $((n * epochs))"
    else
        ok "faults_${name}_exactly_once ($res)"
    fi
    # faults must really have happened, or the run proves nothing
    if [ "$retries" -gt 0 ]; then ok "faults_${name}_retried ($retries retries)"
    else fail "faults_${name}_retried" "0 retries: no fault was injected?"; fi
    # every re-fetch follows a checksum mismatch the loader logged
    local warned
    warned=$(grep -c 'checksum mismatch, reading it again' "bench.$name.err")
    if [ "$warned" = "$refetches" ]; then ok "faults_${name}_refetches_logged ($refetches)"
    else fail "faults_${name}_refetches_logged" "$refetches re-fetches counted, $warned logged"; fi
    REFETCH_SUM=$((REFETCH_SUM + refetches))
}

# digests NAME URL IDS...: sha256 of `pagestream cat URL i` without faults, then under
# the faults (a new fault seed per attempt, up to 6 attempts while the sample checksum
# refuses a corrupted read): the same digests, and never a wrong one.
digests() {
    local name=$1 url=$2
    shift 2
    "$PY" - "$PS" "$url" "$FAULTS" "$@" <<'EOF' > "digest.$name.txt" 2>&1
import hashlib, os, subprocess, sys
ps, url, faults, ids = sys.argv[1], sys.argv[2], sys.argv[3], [int(i) for i in sys.argv[4:]]
def cat(i, fault):
    env = dict(os.environ)
    env.pop("PAGESTREAM_FAULT", None)
    if fault:
        env["PAGESTREAM_FAULT"] = fault
    r = subprocess.run([ps, "cat", url, str(i)], capture_output=True, env=env, timeout=120)
    return r.returncode, hashlib.sha256(r.stdout).hexdigest(), r.stderr.decode(errors="replace")
ref = {}
for i in ids:
    rc, h, err = cat(i, None)
    if rc != 0:
        sys.exit(f"FAILED: cat {i} without faults: {err.strip()}")
    ref[i] = h
refused = attempts = 0
for i in ids:
    for a in range(6):
        attempts += 1
        rc, h, err = cat(i, f"seed={1000 + 7 * i + a},{faults}")
        if rc == 0:
            if h != ref[i]:
                sys.exit(f"FAILED: sample {i}: digest {h} under faults, {ref[i]} without")
            break
        if "checksum mismatch" not in err:
            sys.exit(f"FAILED: sample {i}: cat failed under faults, not for a checksum: {err.strip()}")
        refused += 1
    else:
        sys.exit(f"FAILED: sample {i}: refused 6 times")
# many corrupted bodies: the checksum refuses them, nothing wrong is ever printed
bad_ok = 0
heavy_refused = 0
for i in ids[:6]:
    for a in range(4):
        rc, h, err = cat(i, f"seed={5000 + 13 * i + a},corrupt=0.5")
        if rc == 0 and h != ref[i]:
            sys.exit(f"FAILED: sample {i}: wrong bytes printed with corrupt=0.5")
        if rc != 0:
            if "checksum mismatch" not in err:
                sys.exit(f"FAILED: sample {i}: corrupt=0.5: {err.strip()}")
            heavy_refused += 1
if heavy_refused == 0:
    sys.exit("FAILED: corrupt=0.5 never made cat refuse a read: no corruption reached a checksum?")
print(f"{len(ids)} samples: same sha256 under the faults ({attempts} cat runs, {refused} refused by a checksum); "
      f"corrupt=0.5: {heavy_refused} of {4 * len(ids[:6])} runs refused, none printed wrong bytes")
EOF
    if [ $? = 0 ]; then
        ok "faults_${name}_digests ($(tail -n 1 "digest.$name.txt"))"
    else
        fail "faults_${name}_digests" "$(tail -n 1 "digest.$name.txt")"
    fi
}

# verify_under NAME URL: `pagestream verify` under the same faults: every page arrives
# intact in the end (a page whose checksum fails is read again, up to twice, before it is
# called bad), no read error; with 10% corrupted bodies the re-reads are counted, and a
# page still bad after them is named as a checksum mismatch, never as a read error
verify_under() {
    local name=$1 url=$2 rc seed rereads=0 transient=0 named=0 rerr=0 msg=""
    PAGESTREAM_FAULT="seed=77,$FAULTS" "$PS" verify --json "$url" > "verify.$name.a.json" 2> "verify.$name.a.err"
    rc=$?
    if [ "$rc" = 0 ] && [ "$(jget "verify.$name.a.json" 'd["ok"] and d["read_errors"] == 0')" = True ]; then
        ok "faults_${name}_verify_same_faults ($(jget "verify.$name.a.json" 'str(d["pages"]) + " pages intact, " + str(d["rereads"]) + " re-read after a checksum mismatch"'))"
    else
        fail "faults_${name}_verify_same_faults" "exit $rc: $(tail -n 1 "verify.$name.a.err")"
    fi
    for seed in 78 79 80; do
        PAGESTREAM_FAULT="seed=$seed,${FAULTS/corrupt=0.01/corrupt=0.1}" "$PS" verify --json "$url" \
            > "verify.$name.b$seed.json" 2> "verify.$name.b$seed.err"
        rc=$?
        if [ ! -s "verify.$name.b$seed.json" ]; then
            # the metadata itself could not be read intact: must say so as a checksum error
            grep -q "checksum mismatch" "verify.$name.b$seed.err" || { msg="exit $rc: $(tail -n 1 "verify.$name.b$seed.err")"; break; }
            continue
        fi
        rereads=$((rereads + $(jget "verify.$name.b$seed.json" 'd["rereads"]')))
        transient=$((transient + $(jget "verify.$name.b$seed.json" 'd["transient_mismatches"]')))
        named=$((named + $(jget "verify.$name.b$seed.json" 'd["bad_pages"] + d["bad_samples"]')))
        rerr=$((rerr + $(jget "verify.$name.b$seed.json" 'd["read_errors"]')))
        if [ "$(jget "verify.$name.b$seed.json" 'd["ok"]')" = True ] && [ "$rc" != 0 ]; then msg="ok but exit $rc"; break; fi
        if [ "$(jget "verify.$name.b$seed.json" 'd["ok"]')" = False ] && [ "$rc" != 1 ]; then msg="not ok but exit $rc"; break; fi
    done
    if [ -z "$msg" ] && [ "$rereads" -gt 0 ] && [ "$transient" -gt 0 ] && [ "$rerr" = 0 ]; then
        ok "faults_${name}_verify_corruption_caught (3 runs with corrupt=0.1: $rereads re-reads, $transient pages corrupted in transit then read intact, $named still bad after 2 re-reads and named, 0 read errors)"
    else
        fail "faults_${name}_verify_corruption_caught" "${msg:-$rereads re-reads, $transient transient, $rerr read errors}"
    fi
    if "$PS" verify -q "$url" 2> "verify.$name.c.err"; then ok "faults_${name}_verify_clean_after"
    else fail "faults_${name}_verify_clean_after" "$(tail -n 1 "verify.$name.c.err")"; fi
}

# gone NAME URL STOPCMD: start a long bench, stop the server with STOPCMD after the first
# batches, and expect a clear error within the bound
gone() {
    local name=$1 url=$2 stop=$3 pid t0 el rc
    rm -f "ids.gone.$name"
    "$PS" bench "$url" --transform none --order random --epochs 50 --cache-size 4M --batch-size 16 \
        --timeout-ms 1000 --retries 3 --ids-out "ids.gone.$name" > "gone.$name.out" 2> "gone.$name.err" &
    pid=$!
    for _ in $(seq 100); do [ -s "ids.gone.$name" ] && break; sleep 0.1; done
    $stop
    t0=$(date +%s)
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"; wait "$pid" 2>/dev/null
        fail "faults_gone_${name}" "bench still running 60 s after the server went away"
        return
    fi
    wait "$pid"; rc=$?
    el=$(( $(date +%s) - t0 ))
    # attempts x timeout + backoff (at most 0.1+0.2+0.4 s) + the reads queued behind: well under 20 s
    if [ "$rc" = 1 ] && [ "$el" -le 20 ] && grep -Eq "^pagestream bench: .*$4" "gone.$name.err"; then
        ok "faults_gone_${name} (failed ${el} s after the server went: $(grep '^pagestream bench:' "gone.$name.err" | tail -n 1 | cut -c 1-160))"
    else
        fail "faults_gone_${name}" "exit $rc after ${el} s: $(tail -n 1 "gone.$name.err")"
    fi
}

REFETCH_SUM=0
# ================= http:// (nginx) =================
if nginx_start; then
    "$MK" "$D/www/f.pgs" --size 64M --sample-size 32K --page-size 1M > mk.log 2>&1 || { fail faults_mkpgs "$(tail -n 1 mk.log)"; exit 0; }
    N=$(jget <("$PS" inspect --json "$D/www/f.pgs") 'd["samples"]')
    U="$NGINX_URL/f.pgs"
    # quasi_random reads whole pages (cache 16 MiB of 66 pages: every epoch reads them all again);
    # random with a cache smaller than the data reads single samples
    matrix http_quasi_random "$U" "$N" quasi_random 4 16M 1
    matrix http_random "$U" "$N" random 2 16M 2
    digests http "$U" 0 1 31 500 1023 1024 1777 $((N - 1))
    verify_under http "$U"
    gone http_stopped "$U" nginx_stop "f.pgs: .*(onnect|refused|reset|timed out|no data)"
    # a frozen server: connections open, nothing answers
    if nginx_start; then
        freeze() { FROZEN="$NGINX_PID $(ps -o pid= --ppid "$NGINX_PID" | tr '\n' ' ')"; kill -STOP $FROZEN; }
        gone http_frozen "$U" freeze "f.pgs: .*(no data|timed out|no answer)"
        for p in $FROZEN; do kill -CONT "$p" 2>/dev/null; done
        FROZEN=""
        nginx_stop
    fi
else
    skip faults_http "$NGINX_WHY"
fi

# ================= s3:// (Swift) =================
s3_why=""
if ! "$PY" -c 'import boto3' 2> /dev/null; then
    s3_why="python3-boto3 is not installed (needed to upload the test object)"
elif ! swift_start; then
    s3_why=$SWIFT_WHY
else
    "$MK" s.pgs --size 16M --sample-size 32K --page-size 1M > mk.log 2>&1 || { fail faults_mkpgs_s3 "$(tail -n 1 mk.log)"; exit 0; }
    "$PY" - "$SWIFT_URL" s.pgs > s3put.log 2>&1 <<'EOF' || s3_why="upload to Swift failed: $(tail -n 1 s3put.log)"
import sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="test:tester", aws_secret_access_key="testing",
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="faults")
s3.upload_file(sys.argv[2], "faults", "s.pgs")
EOF
fi
if [ -n "$s3_why" ]; then
    skip faults_s3 "$s3_why"
else
    export AWS_ENDPOINT_URL=$SWIFT_URL AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing
    N=$(jget <("$PS" inspect --json s.pgs) 'd["samples"]')
    S="s3://faults/s.pgs"
    matrix s3_quasi_random "$S" "$N" quasi_random 8 4M 3
    matrix s3_random "$S" "$N" random 2 4M 4
    digests s3 "$S" 0 17 255 $((N - 1))
    verify_under s3 "$S"
    # the proxy frozen (its process group: the proxy and its workers), then thawed; then stopped
    freeze_s3() { FROZEN="-$(cat "$SWIFT_DIR/run/proxy.pid")"; kill -STOP -- "$FROZEN"; }
    gone s3_frozen "$S" freeze_s3 "s.pgs .*(no data|timed out|no answer)"
    kill -CONT -- "$FROZEN" 2>/dev/null
    FROZEN=""
    gone s3_stopped "$S" swift_stop "s.pgs .*(onnect|refused|reset|timed out|no data)"
fi
# corrupted bodies were re-read somewhere (1% of several thousand reads)
if [ "$REFETCH_SUM" -gt 0 ]; then ok "faults_refetches_happened ($REFETCH_SUM in all runs)"
elif [ -n "$s3_why" ] && [ -z "${NGINX_URL:-}" ]; then skip faults_refetches_happened "no server"
else fail faults_refetches_happened "no checksum re-fetch in any run: corruption was not injected?"; fi
TB=$TB_SAVED
