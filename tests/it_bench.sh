#!/usr/bin/env bash
# `pagestream doctor` and `pagestream bench` on a small dataset: they exit 0, print sane numbers,
# their --json parses and agrees with the dataset (images per epoch, no reads in a cached second
# epoch, a named bound); usage errors exit 2; the PyTorch peer script runs. Bounded to well under 60 s.
source "$(dirname "$0")/lib.sh" "$1"
PY=/usr/bin/python3
D="$TB/it_bench"
rm -rf "$D"
mkdir -p "$D"
trap 'rm -rf "$D"' EXIT
MKPGS="$BUILD/bench/mkpgs"

if ! "$PY" -c 'import PIL, numpy' 2>/dev/null; then
    skip bench_all "python3-pil or python3-numpy is not installed"
    exit 0
fi
if [ ! -x "$MKPGS" ]; then
    fail bench_tools "$MKPGS not built"
    exit 1
fi
json() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

# 48 noisy JPEGs in 4 classes (ImageFolder), 200-420 px
"$PY" - "$D/imgs" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(3)
for i in range(48):
    c = "c%d" % (i % 4)
    os.makedirs(os.path.join(root, c), exist_ok=True)
    h, w = int(rng.integers(200, 420)), int(rng.integers(200, 420))
    ramp = np.linspace(0, 255, w)[None, :, None] * np.ones((h, 1, 3))
    a = (ramp + rng.normal(0, 10, (h, w, 3))).clip(0, 255).astype(np.uint8)
    Image.fromarray(a).save(os.path.join(root, c, "%03d.jpg" % i), quality=92)
EOF
# JPEGs repeated to 6 MiB in 256 KiB pages (many pages, fast to read); random bytes for the storage-only path
"$MKPGS" "$D/j.pgs" --size 6M --page-size 256K --classes 4 --jpeg-dir "$D/imgs" > /dev/null \
    && "$MKPGS" "$D/r.pgs" --size 8M --page-size 256K --sample-size 40K > /dev/null \
    || { fail bench_datasets "mkpgs failed"; exit 1; }

# ---- doctor, text
out=$("$PS" doctor "$D/j.pgs" --seconds 1 --batch-size 32 --cache-size 2M 2>&1); rc=$?
if [ $rc = 0 ] && printf '%s' "$out" | grep -q '^verdict: ' && printf '%s' "$out" | grep -Eq '^   page +256 KiB +1 +[0-9]+\.[0-9]' \
    && printf '%s' "$out" | grep -Eq '^2\. decode: [0-9]+ images .* [1-9][0-9]* images/s'; then
    ok doctor_text
else
    fail doctor_text "rc=$rc: $(printf '%s' "$out" | tail -n 4 | tr '\n' ' ')"
fi

# ---- doctor --json: every stage measured, a named bound, advice in sentences
if "$PS" doctor "$D/j.pgs" --seconds 1 --batch-size 32 --cache-size 2M --json > "$D/doc.json" 2> "$D/doc.err"; then
    v=$(json "$D/doc.json" 'all(p["mb_per_s"] > 0 and p["requests"] > 0 for p in d["storage"]) and len(d["storage"]) >= 4 and d["decode"]["ran"] and d["decode"]["images_per_s"] > 0 and d["decode"]["cpu_ms_per_image"] > 0 and d["pipeline"]["ran"] and d["pipeline"]["images_per_s"] > 0 and d["bound"] in ("storage", "decode", "pipeline") and len(d["advice"]) >= 1 and d["dataset"]["page_size"] == 262144 and d["pipeline"]["cache_bytes"] <= 2097152')
    if [ "$v" = True ]; then ok doctor_json; else fail doctor_json "unexpected content: $(head -c 600 "$D/doc.json")"; fi
else
    fail doctor_json "exit status $?: $(tail -n 2 "$D/doc.err")"
fi

# ---- doctor on raw bytes: nothing to decode, no decode bound
if "$PS" doctor "$D/r.pgs" --transform none --seconds 1 --batch-size 16 --json > "$D/docr.json" 2> "$D/docr.err"; then
    # from the page cache the loader's own copying may be slower than reading: "pipeline" is then right
    v=$(json "$D/docr.json" 'd["bound"] in ("storage", "pipeline") and not d["decode"]["ran"] and d["pipeline"]["payload_mb_per_s"] > 0')
    if [ "$v" = True ]; then ok doctor_raw_no_decode; else fail doctor_raw_no_decode "$(head -c 400 "$D/docr.json")"; fi
else
    fail doctor_raw_no_decode "exit status $?: $(tail -n 2 "$D/docr.err")"
fi

# ---- doctor refuses what it cannot measure, with the reason
expect_fail doctor_no_full_batch 'no full batch' "$PS" doctor "$D/j.pgs" --seconds 1 --batch-size 100000
expect_fail doctor_missing_url 'missing URL' "$PS" doctor --seconds 1
"$PS" doctor "$D/j.pgs" --seconds 0 > /dev/null 2>&1; rc=$?
if [ $rc = 2 ]; then ok doctor_usage_exit_2; else fail doctor_usage_exit_2 "--seconds 0 exited $rc"; fi
expect_fail doctor_bad_file 'nope.pgs' "$PS" doctor "$D/nope.pgs" --seconds 1

# ---- bench --json: images per epoch, a cached second epoch reads nothing, shuffle figures
if "$PS" bench "$D/j.pgs" --epochs 2 --batch-size 32 --cache-size 16M --json > "$D/b.json" 2> "$D/b.err"; then
    n=$(json "$D/b.json" 'd["samples"]')
    v=$(json "$D/b.json" "len(d['epochs']) == 2 and all(e['images'] == ($n // 32) * 32 and e['images_per_s'] > 0 and e['batches'] == $n // 32 for e in d['epochs']) and d['epochs'][0]['bytes_read'] > 0 and d['epochs'][1]['bytes_read'] == 0 and d['peak_rss'] > 0 and 0 < d['epochs'][0]['classes_per_batch'] <= 4 and d['reference_classes_per_batch'] > 0")
    if [ "$v" = True ]; then ok bench_json; else fail bench_json "unexpected content: $(head -c 700 "$D/b.json")"; fi
else
    fail bench_json "exit status $?: $(tail -n 2 "$D/b.err")"
fi
out=$("$PS" bench "$D/r.pgs" --epochs 1 --batch-size 16 --transform none --order random --cache-size 1M 2>&1); rc=$?
if [ $rc = 0 ] && printf '%s' "$out" | grep -q 'single-sample reads' && printf '%s' "$out" | grep -Eq '^epoch 0: [0-9]+ images .* [0-9.]+ MB/s payload' \
    && printf '%s' "$out" | grep -q '^summary: '; then
    ok bench_text_random_sample_reads
else
    fail bench_text_random_sample_reads "rc=$rc: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"
fi

# ---- the PyTorch peer of make bench (same transforms), when torch is installed
if "$PY" -c 'import torch, torchvision' 2>/dev/null; then
    if timeout 60 "$PY" "$ROOT/bench/peer_torch.py" "$D/imgs" --workers 1 --batch 16 --epochs 2 > "$D/t.json" 2> "$D/t.err"; then
        v=$(json "$D/t.json" 'd["steady_images_per_s"] > 0 and d["dataset_images"] == 48 and all(e["images"] == 48 for e in d["epochs"])')
        if [ "$v" = True ]; then ok peer_torch_json; else fail peer_torch_json "$(head -c 400 "$D/t.json")"; fi
    else
        fail peer_torch_json "exit status $?: $(tail -n 2 "$D/t.err")"
    fi
else
    skip peer_torch_json "python3-torch / python3-torchvision not installed"
fi

# ---- the report renderer on a fabricated results folder: ratios and goals as stated
mkdir -p "$D/res"
printf 'nproc=2\ncpu=test\nkernel=k\nload_start=0\nload_end=0\n' > "$D/res/machine.txt"
printf 'S\tF1\t300\timages/s\tpeer\t100\t3\tn\nS\tF2\t80\tMB/s\tceiling\t100\t0.9\tn\n' > "$D/res/rows.tsv"
if (cd "$ROOT" && "$PY" bench/render.py "$D/res" "$D/R.md") && grep -q '| S | F1 | 300.0 images/s | 100.0 images/s (peer) | 3.00x | >= 3.00x | yes |' "$D/R.md" \
    && grep -q '| S | F2 | 80.0 MB/s | 100.0 MB/s (ceiling) | 80.0% | >= 90% | \*\*no\*\* |' "$D/R.md" && grep -q 'Goals not met' "$D/R.md"; then
    ok render_results
else
    fail render_results "$(grep '^| S' "$D/R.md" 2>/dev/null | tr '\n' ' ')"
fi
exit 0
