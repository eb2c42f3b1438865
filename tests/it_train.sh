#!/usr/bin/env bash
# it_train.sh - examples/train.py end to end: a dataset uploaded to a local S3
# server (Swift + s3api, SigV4 checked) with boto3, trained on for a few epochs
# on the CPU straight from s3://; the loss must fall. Without Swift, the same on
# the local file (the S3 part is then skipped, saying why).
# The dataset: $BUILD/demo/demo.pgs (make demo: real photos) when present, else
# a generated ImageFolder of 1200 small JPEGs in 6 classes.
source "$(dirname "$0")/lib.sh" "$1"
source "$ROOT/tests/servers/swift.sh"
PY=/usr/bin/python3
if ! "$PY" -c 'import torch' 2>/dev/null; then
    skip train "PyTorch is not installed for $PY (deploy/install-deps.sh test installs python3-torch)"
    exit 0
fi
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export PAGESTREAM_LIB="$BUILD/libpagestream.so"
export PAGESTREAM_LOG=0
W=$TB/train
rm -rf "$W"; mkdir -p "$W"
trap 'swift_stop; rm -rf "$W"' EXIT

if [ -f "$BUILD/demo/demo.pgs" ]; then
    DS=$BUILD/demo/demo.pgs
    what="the demo dataset ($DS)"
else
    "$PY" - "$W/folder" <<'EOF' || { fail train-dataset "could not generate images"; exit 1; }
import os, random, sys
from PIL import Image, ImageDraw
out = sys.argv[1]
rnd = random.Random(7)
palette = [(200, 40, 40), (40, 180, 60), (50, 70, 210), (220, 200, 40), (160, 60, 200), (40, 190, 190)]
for i in range(1200):
    c = i % 6
    os.makedirs("%s/class%d" % (out, c), exist_ok=True)
    w, h = rnd.randint(64, 200), rnd.randint(64, 200)
    col = tuple(max(0, min(255, v + rnd.randint(-50, 50))) for v in palette[c])
    im = Image.new("RGB", (w, h), col)
    d = ImageDraw.Draw(im)
    step = 8 + 3 * c
    for k in range(0, max(w, h), step):   # stripes: vertical for even classes, horizontal for odd
        d.line([(k, 0), (k, h)] if c % 2 == 0 else [(0, k), (w, k)], fill=tuple(255 - v for v in col), width=2)
    for _ in range(40):
        x, y = rnd.randrange(w), rnd.randrange(h)
        d.rectangle([x, y, x + 3, y + 3], fill=(rnd.randrange(256),) * 3)
    im.save("%s/class%d/%05d.jpg" % (out, c, i), quality=rnd.randint(70, 95))
EOF
    "$PS" pack "$W/folder" -o "$W/train.pgs" --page-size 1M -q || { fail train-dataset "pack failed"; exit 1; }
    DS=$W/train.pgs
    what="a generated set of 1200 JPEGs in 6 classes (no $BUILD/demo/demo.pgs; make demo makes the real one)"
fi
echo "dataset: $what"

# train.py output -> ok when the last epoch's loss is below 80% of the first's
check_loss() {  # NAME LOGFILE
    local first last
    first=$(awk '/^epoch /{print $4; exit}' "$2")
    last=$(awk '/^epoch /{v=$4} END{print v}' "$2")
    if [ -z "$first" ] || [ -z "$last" ]; then
        fail "$1" "no epoch lines: $(tail -n 3 "$2" | tr '\n' ' ')"
    elif awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < 0.8 * a)}'; then
        ok "$1"
    else
        fail "$1" "loss did not fall: $first -> $last"
    fi
}

if swift_start; then
    export AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
    unset AWS_SESSION_TOKEN AWS_PROFILE
    if "$PY" - "$SWIFT_URL" "$DS" <<'EOF'
import sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="test:tester",
                  aws_secret_access_key="testing", region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="demo")
s3.upload_file(sys.argv[2], "demo", "train.pgs")
print("uploaded %d bytes" % s3.head_object(Bucket="demo", Key="train.pgs")["ContentLength"])
EOF
    then
        ok train-upload
        "$PY" "$ROOT/examples/train.py" s3://demo/train.pgs --endpoint "$SWIFT_URL" --epochs 4 --crop 64 \
            --batch-size 64 2>&1 | tee "$W/s3.log"
        check_loss train-s3 "$W/s3.log"
        # a wrong secret must be refused with a clear error, not hang or train on nothing
        expect_fail train-s3-wrong-secret 'signature|denied|403|credentials' \
            env AWS_SECRET_ACCESS_KEY=wrong "$PY" "$ROOT/examples/train.py" s3://demo/train.pgs \
            --endpoint "$SWIFT_URL" --epochs 1
    else
        fail train-upload "boto3 upload to $SWIFT_URL failed"
    fi
else
    skip train-s3 "$SWIFT_WHY"
    "$PY" "$ROOT/examples/train.py" "$DS" --epochs 4 --crop 64 --batch-size 64 2>&1 | tee "$W/local.log"
    check_loss train-local "$W/local.log"
fi
# resume from a checkpoint: a run stopped after 2 epochs and restarted finishes the remaining ones
"$PY" "$ROOT/examples/train.py" "$DS" --epochs 2 --crop 32 --batch-size 64 --max-batches 4 \
    --checkpoint "$W/ck.pt" > "$W/ck1.log" 2>&1
"$PY" "$ROOT/examples/train.py" "$DS" --epochs 3 --crop 32 --batch-size 64 --max-batches 4 \
    --checkpoint "$W/ck.pt" > "$W/ck2.log" 2>&1
if grep -q '^resumed from .* at epoch 2 batch 0' "$W/ck2.log" && [ "$(grep -c '^epoch ' "$W/ck2.log")" = 1 ] &&
   grep -q '^epoch 2 ' "$W/ck2.log"; then
    ok train-resume
else
    fail train-resume "$(tail -n 4 "$W/ck2.log" | tr '\n' ' ')"
fi
[ "$T_FAILED" -eq 0 ]
