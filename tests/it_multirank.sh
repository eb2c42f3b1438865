#!/usr/bin/env bash
# it_multirank.sh - 4 ranks on one machine reading one dataset from the local S3
# server (Swift + s3api, SigV4 checked), launched as a multi-node job launches
# them: torchrun-style RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT.
#  1. torchrun --nproc_per_node 4, quasi_random, drop_last=False: shares are
#     disjoint, their union is the dataset (padding: at most one repeat per
#     rank, sampler/sampler.h), every rank has the same number of batches, and
#     the ranks together read at most about twice the file (each its own share,
#     plus its read-ahead into the next epoch's share), not 4 times;
#  2. 4 plain processes with the variables set by hand, random order,
#     drop_last=True: disjoint, equal counts, floor(N/4) rounded down to whole batches.
# Each rank (tests/multirank_child.py) all-reduces once per batch in a gloo
# group, as DDP does, so unequal batch counts would hang (bounded) and fail.
# Prints the per-rank counts, the union check and the aggregate images/s.
source "$(dirname "$0")/lib.sh" "$1"
source "$ROOT/tests/servers/swift.sh"
PY=/usr/bin/python3
NRANKS=4
N=258          # images: 4 ranks x 64 + 2 (see below)
BS=16
D="$TB/it_multirank"
rm -rf "$D"
mkdir -p "$D"
TB=$D          # the S3 server's files live in this test's folder
trap 'swift_stop; rm -rf "$D"' EXIT

if [ ! -x "$PY" ]; then skip multirank "no /usr/bin/python3"; exit 0; fi
if [ ! -f "$BUILD/libpagestream.so" ]; then fail multirank "no $BUILD/libpagestream.so (make first)"; exit 1; fi
if ! "$PY" -c 'import numpy' 2>/dev/null && ! "$PY" -c 'import torch' 2>/dev/null; then
    skip multirank "neither PyTorch nor numpy for $PY (deploy/install-deps.sh test installs python3-torch)"
    exit 0
fi
if ! "$PY" -c 'import boto3' 2>/dev/null; then
    skip multirank "python3-boto3 is not installed (needed to upload the dataset)"
    exit 0
fi
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export PAGESTREAM_LIB="$BUILD/libpagestream.so" PAGESTREAM_CLI="$PS" PAGESTREAM_LOG=0
export OMP_NUM_THREADS=1   # torch would start one OpenMP thread per core in every rank

IMG=$(test_images 300) || { fail multirank-dataset "could not generate 300 test images"; exit 1; }
# N = 4*64 + 2 with batches of 16: 5 batches per rank; the last one has 1, 1, 0, 0 samples of the
# remainder on ranks 0..3, so ranks 2 and 3 must pad one repeat each (sampler/sampler.h)
(cd "$IMG" && find . -name '*.jpg' | LC_ALL=C sort | head -n "$N" |
    awk -F/ -v dir="$IMG" '{ printf "%s/%s\t%s\n", dir, substr($0, 3), $2 }') > "$D/list.txt"
[ "$(wc -l < "$D/list.txt")" = "$N" ] || { fail multirank-dataset "fewer than $N images in $IMG"; exit 1; }
"$PS" pack "$D/list.txt" -o "$D/train.pgs" --page-size 1M --threads 2 -q > "$D/pack.log" 2>&1 ||
    { fail multirank-dataset "pack: $(tail -n 2 "$D/pack.log" | tr '\n' ' ')"; exit 1; }

if ! swift_start; then
    skip multirank "$SWIFT_WHY"
    exit 0
fi
# the environment of a training job: endpoint and keys from variables, nothing on the command line
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_SECURITY_TOKEN AWS_SHARED_CREDENTIALS_FILE AWS_REGION AWS_DEFAULT_REGION
export AWS_ENDPOINT_URL=$SWIFT_URL AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing
export HOME=$D   # not the machine user's ~/.aws
if "$PY" - "$SWIFT_URL" "$D/train.pgs" > "$D/upload.log" 2>&1 <<'EOF'
import sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="test:tester",
                  aws_secret_access_key="testing", region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="multirank")
s3.upload_file(sys.argv[2], "multirank", "train.pgs")
print("uploaded %d bytes" % s3.head_object(Bucket="multirank", Key="train.pgs")["ContentLength"])
EOF
then
    ok multirank-upload
else
    fail multirank-upload "$(tail -n 2 "$D/upload.log" | tr '\n' ' ')"
    exit 1
fi
URL=s3://multirank/train.pgs
CHILD="$ROOT/tests/multirank_child.py"

free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 20000))
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return 0; fi
    done
    return 1
}

# check_ranks NAME OUTDIR KEEP_LAST: the shares, counts and rates of one run
check_ranks() {
    "$PY" - "$1" "$2" "$3" "$NRANKS" "$D/train.pgs" <<'EOF'
import json, os, sys
name, outdir, keep_last, world, path = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5]
fails = []
res = []
for r in range(world):
    p = os.path.join(outdir, "rank%d.json" % r)
    if not os.path.exists(p):
        print("FAIL %s: rank %d wrote no result" % (name, r))
        sys.exit(1)
    with open(p) as f:
        res.append(json.load(f))
n = res[0]["dataset_samples"]
bs = len(res[0]["batches"][0]) if res[0]["batches"] else 0
shares = [set(i for b in x["batches"] for i in b) for x in res]
for x, s in zip(res, shares):
    print("  rank %d/%d local_rank %s pid %d (%s%s): %d batches (len %d), %d samples, %d distinct, %d padded, "
          "%.1f MB read in %d requests, %.0f images/s" % (
              x["rank"], x["world_size"], x["local_rank"], x["pid"], x["launcher"],
              ", gloo group" if x["process_group"] else "", x["nbatches"], x["len"], x["samples"], len(s),
              x["padded"], x["bytes_read"] / 1e6, x["reads"], x["images_per_s"]))
if [x["rank"] for x in res] != list(range(world)) or any(x["world_size"] != world for x in res):
    fails.append("ranks/world sizes seen: %s" % [(x["rank"], x["world_size"]) for x in res])
if [x["local_rank"] for x in res] != list(range(world)):
    fails.append("LOCAL_RANK not seen: %s" % [x["local_rank"] for x in res])
if len(set(x["pid"] for x in res)) != world:
    fails.append("ranks did not run in %d processes" % world)
counts = [x["nbatches"] for x in res]
if len(set(counts)) != 1 or counts[0] != res[0]["len"] or counts[0] == 0:
    fails.append("batch counts differ or are not len(loader): %s, len %s" % (counts, [x["len"] for x in res]))
overlap = [(a, b, len(shares[a] & shares[b])) for a in range(world) for b in range(a + 1, world)
           if shares[a] & shares[b]]
if overlap:
    fails.append("shares overlap (rank, rank, samples): %s" % overlap)
union = set().union(*shares)
total = sum(x["samples"] for x in res)
if keep_last:
    missing = set(range(n)) - union
    extra = union - set(range(n))
    print("  union: %d distinct samples of %d in the dataset (%d delivered, %d padding repeats); missing %d, "
          "unknown %d -> %s" % (len(union), n, total, total - len(union), len(missing), len(extra),
                                "union = dataset" if not missing and not extra else "MISMATCH"))
    if missing or extra:
        fails.append("union != dataset: missing %s, unknown %s" % (sorted(missing)[:10], sorted(extra)[:10]))
    for x, s in zip(res, shares):
        if x["samples"] - len(s) != x["padded"] or x["padded"] > 1:
            fails.append("rank %d: %d repeats, padded %d (at most 1 allowed)" % (
                x["rank"], x["samples"] - len(s), x["padded"]))
else:
    per = (n // world) // bs * bs if bs else 0
    print("  union: %d distinct samples of %d (drop_last: %d per rank expected, %d of the dataset left out)" % (
        len(union), n, per, n - len(union)))
    if any(len(s) != per or x["samples"] != per for x, s in zip(res, shares)):
        fails.append("drop_last: shares of %s samples, expected %d each" % ([len(s) for s in shares], per))
# Each rank reads the pages of its own share (plus at most two boundary pages), and, once its epoch
# is planned out, prefetches its share of the NEXT epoch (other pages: the page shuffle changes with
# the epoch). So all ranks together read at most about twice the file after one epoch; ranks that
# each read the whole file would read `world` times it.
size = os.path.getsize(path)
read = sum(x["bytes_read"] for x in res)
bound = 2 * size + 4 * world * res[0]["page_size"]
print("  storage: %.1f MB read by all ranks for a %.1f MB file (%.2fx: this epoch's shares and the next "
      "epoch's read-ahead; bound %.2fx; every rank reading everything: %dx)" % (
          read / 1e6, size / 1e6, read / size, bound / size, world))
if read > bound:
    fails.append("ranks read %d bytes of a %d-byte file: more than their shares (bound %d)" % (read, size, bound))
t0 = min(x["t_start"] for x in res)
t1 = max(x["t_end"] for x in res)
agg = total / (t1 - t0) if t1 > t0 else 0.0
print("  aggregate: %d images in %.2f s = %.0f images/s over %d ranks (sum of per-rank rates %.0f)" % (
    total, t1 - t0, agg, world, sum(x["images_per_s"] for x in res)))
if fails:
    print("FAIL %s: %s" % (name, "; ".join(fails)))
    sys.exit(1)
print("ok %s (%d ranks x %d batches; samples per rank %s, padded %s; %s; %.0f images/s aggregate)" % (
    name, world, counts[0], "/".join(str(x["samples"]) for x in res), "/".join(str(x["padded"]) for x in res),
    "disjoint, union = dataset (%d)" % n if keep_last else "disjoint, %d of %d (drop_last)" % (len(union), n), agg))
EOF
}

# 1. torchrun itself, when this Python's PyTorch has it
if "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
    mkdir -p "$D/run1"
    # --redirects/--tee 1: Debian's torch 1.13 launcher fails on Python 3.11 with the default "0"
    # (examples/train.py); --standalone: a c10d rendezvous on a free local port
    timeout 120 "$PY" -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node "$NRANKS" \
        --redirects 1 --tee 1 --log_dir "$D/run1/logs" --monitor_interval 0.2 \
        "$CHILD" "$URL" "$D/run1" --batch-size "$BS" --keep-last --order quasi_random --cache-size 8M \
        > "$D/run1.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        fail multirank-torchrun "torchrun exited with $rc$([ $rc = 124 ] && echo ' (over 120 s: a rank hung?)'): $(grep -v '^\s*$' "$D/run1.log" | tail -n 4 | tr '\n' ' ')"
    else
        echo "run 1: torchrun --nproc_per_node $NRANKS, $URL, quasi_random, batch $BS, drop_last=False"
        check_ranks multirank-torchrun "$D/run1" 1 || T_FAILED=$((T_FAILED + 1))
    fi
    LAUNCH2="plain processes"
else
    skip multirank-torchrun "torch.distributed.run is not available for $PY (PyTorch missing); plain processes only"
    LAUNCH2="plain processes (the only launcher here)"
fi

# 2. plain processes with torchrun's variables set by hand (what srun or a k8s Job may do)
mkdir -p "$D/run2"
PORT=$(free_port) || { fail multirank-env "no free port"; exit 1; }
pids=()
for r in $(seq 0 $((NRANKS - 1))); do
    RANK=$r WORLD_SIZE=$NRANKS LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NRANKS MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
        timeout 120 "$PY" "$CHILD" "$URL" "$D/run2" --batch-size "$BS" --order random --cache-size 8M \
        > "$D/run2.rank$r.log" 2>&1 &
    pids+=("$!")
done
bad=""
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || bad="$bad rank $i: $(tail -n 2 "$D/run2.rank$i.log" | tr '\n' ' ')"
done
if [ -n "$bad" ]; then
    fail multirank-env "$bad"
else
    echo "run 2: $LAUNCH2 with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, random, batch $BS, drop_last=True"
    check_ranks multirank-env "$D/run2" 0 || T_FAILED=$((T_FAILED + 1))
fi
[ "$T_FAILED" -eq 0 ]
