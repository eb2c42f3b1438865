#!/usr/bin/python3
"""gen_images.py - an ImageNet-like ImageFolder made from a few real photographs.

Follows ../shared/DATASETS.md. Image i belongs to class i mod C (classes of equal size); its
source photo is drawn from that class's photos (photo p belongs to class p mod C; with fewer
photos than classes, class c uses photo c mod P). Then a target size (long side 500 px for 45%
of images, else normal(400, 110) clipped to 100-800), an aspect from {4:3, 3:2, 1:1, 5:4, 16:9}
with jitter (25% portrait), a random crop covering 15-100% of the largest window of that aspect,
a random flip, an area downscale, then
  --profile imagenet    Gaussian grain sigma 10 on luma (sigma/3 per chroma channel), JPEG 4:2:0
                        q97: about 110 KB at ~410x360, like ImageNet's training JPEGs;
  --profile lowentropy  JPEG 4:2:0 q90 without grain: the smooth control set.
Every image is a function of (seed, index) alone, whatever the number of processes.

  gen_images.py --photos DIR --out OUT --count N --classes C [--seed S]
                [--profile imagenet|lowentropy] [--quality Q] [--grain SIGMA] [--list FILE]
                [--odd] [--procs P]

OUT/class_XX/NNNNNN.jpg (XX zero-padded to the width of C-1, at least 2 digits). --list writes
"path<TAB>label" lines (absolute paths). --odd adds five unusual files to the class folders for
tests: class_00/odd_gray.jpg (grayscale), class_01/odd_cmyk.jpg (Adobe CMYK),
class_02/odd_progressive.jpg, class_03/odd_truncated.jpg (first half of a JPEG) and
class_04/odd_png.png (modulo C); they are listed too. Sources: DIR/*.jpg, *.jpeg, *.png
(bench/get_photos.sh). Prints count, mean size, mean WxH and seconds.
"""
import argparse
import glob
import multiprocessing as mp
import os
import re
import sys
import time

import numpy as np
from PIL import Image

ASPECTS = [(4, 3), (3, 2), (1, 1), (5, 4), (16, 9)]
# sources are reduced to this long side once per process: bounded memory and crop cost; the
# 15%-area crops of it are still larger than the outputs (<= 800 px), so every output is a downscale
SRC_MAX = 1600
# grain comes from one bank of Gaussian triplets per run (a function of the seed), read at a random
# offset per image: drawing fresh normals cost 40% of the time, and JPEG cannot exploit the reuse
# across images (no window repeats within one image: the bank is larger than an 800x800 image)
BANK_ROWS = 1 << 20
_photos = None
_bank = None


def _load_one(path):
    im = Image.open(path)
    # JPEG: let libjpeg scale by 1/2..1/8 while decoding (never below SRC_MAX)
    im.draft("RGB", (SRC_MAX, SRC_MAX))
    im = im.convert("RGB")
    if max(im.size) > SRC_MAX:
        s = SRC_MAX / max(im.size)
        im = im.resize((round(im.width * s), round(im.height * s)), Image.BOX)
    return im


def _setup(photos, seed, grain):
    """Run in the parent before the workers fork: they share the sources and the bank."""
    global _photos, _bank
    _photos = photos
    if grain > 0:
        b = np.random.default_rng([seed, 0x6772616E]).standard_normal((BANK_ROWS, 3), dtype=np.float32)
        b *= np.array([grain, grain / 3, grain / 3], dtype=np.float32)
        _bank = b


def _one(job):
    idx, out, seed, quality, grain, class_photos, cdir = job
    rng = np.random.default_rng([seed, idx])
    label = idx % len(class_photos)
    choices = class_photos[label]
    src = choices[int(rng.integers(len(choices)))]
    im = _photos[src]
    long_side = 500 if rng.random() < 0.45 else int(np.clip(rng.normal(400, 110), 100, 800))
    aw, ah = ASPECTS[int(rng.integers(len(ASPECTS)))]
    ratio = aw / ah * float(rng.uniform(0.95, 1.05))
    if rng.random() < 0.25:
        ratio = 1 / ratio
    if ratio >= 1:
        tw, th = long_side, max(1, round(long_side / ratio))
    else:
        tw, th = max(1, round(long_side * ratio)), long_side
    # the largest window of this aspect in the source, then a crop of 15-100% of its area
    W, H = im.size
    ww, wh = (W, W / ratio) if W / ratio <= H else (H * ratio, H)
    frac = float(np.sqrt(rng.uniform(0.15, 1.0)))
    cw, ch = max(8.0, ww * frac), max(8.0, wh * frac)
    x0 = float(rng.uniform(0, W - cw)) if W > cw else 0.0
    y0 = float(rng.uniform(0, H - ch)) if H > ch else 0.0
    flip = rng.random() < 0.5
    # area (box) downscale straight from the crop window of the source
    crop = im.resize((tw, th), Image.BOX, box=(x0, y0, min(W, x0 + cw), min(H, y0 + ch)))
    if flip:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    d = os.path.join(out, cdir[label])
    path = os.path.join(d, "%06d.jpg" % idx)
    if grain > 0:
        ycc = np.asarray(crop.convert("YCbCr"), dtype=np.float32)
        n = th * tw
        off = int(rng.integers(BANK_ROWS - n + 1))
        ycc += _bank[off:off + n].reshape(th, tw, 3)
        np.clip(ycc, 0, 255, out=ycc)
        # the encoder takes YCbCr as is: no second colour conversion
        Image.fromarray(np.rint(ycc).astype(np.uint8), "YCbCr").save(path, "JPEG", quality=quality, subsampling=2)
    else:
        crop.save(path, "JPEG", quality=quality, subsampling=2)
    return path, label, os.path.getsize(path), tw, th


def _odd(out, cdir):
    """Unusual inputs for tests, one per class folder (modulo C): returns [(path, label)]."""
    rng = np.random.default_rng(7)
    # a smooth gradient with some noise: a plausible picture, not pure noise
    y, x = np.mgrid[0:240, 0:320]
    base = np.stack([x * 255 // 319, y * 255 // 239, (x + y) * 255 // 558], axis=-1).astype(np.int16)
    base = np.clip(base + rng.integers(-12, 13, base.shape), 0, 255).astype(np.uint8)
    img = Image.fromarray(base, "RGB")
    made = []

    def dest(k, name):
        label = k % len(cdir)
        return os.path.join(out, cdir[label], name), label

    p, l = dest(0, "odd_gray.jpg"); img.convert("L").save(p, "JPEG", quality=90); made.append((p, l))
    p, l = dest(1, "odd_cmyk.jpg"); img.convert("CMYK").save(p, "JPEG", quality=90); made.append((p, l))
    p, l = dest(2, "odd_progressive.jpg"); img.save(p, "JPEG", quality=90, progressive=True); made.append((p, l))
    p, l = dest(3, "odd_truncated.jpg")
    img.save(p, "JPEG", quality=90)
    with open(p, "rb") as f:
        data = f.read()
    with open(p, "wb") as f:
        f.write(data[: len(data) // 2])
    made.append((p, l))
    p, l = dest(4, "odd_png.png"); img.save(p, "PNG"); made.append((p, l))
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--photos", required=True, help="folder of source photographs (bench/get_photos.sh)")
    ap.add_argument("--out", required=True, help="ImageFolder to create")
    ap.add_argument("--count", type=int, default=2000, help="images (default 2000)")
    ap.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", choices=["imagenet", "lowentropy"], default="imagenet")
    ap.add_argument("--list", help="also write a path<TAB>label list file")
    ap.add_argument("--odd", action="store_true",
                    help="add grayscale/CMYK/progressive/truncated JPEGs and a PNG (odd_* in class folders)")
    ap.add_argument("--procs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--quality", type=int, help="JPEG quality (default: 97 imagenet, 90 lowentropy)")
    ap.add_argument("--grain", type=float, help="luma grain sigma (default: 10 imagenet, 0 lowentropy)")
    a = ap.parse_args()
    paths = sorted(p for p in glob.glob(os.path.join(a.photos, "*"))
                   if p.lower().endswith((".jpg", ".jpeg", ".png")))
    if not paths:
        sys.exit("gen_images.py: no .jpg/.png photographs in %s (run bench/get_photos.sh first)" % a.photos)
    if a.count < 1 or a.classes < 1 or a.procs < 1:
        sys.exit("gen_images.py: --count, --classes and --procs must be positive")
    P, C = len(paths), a.classes
    class_photos = [[p for p in range(P) if p % C == c] if P >= C else [c % P] for c in range(C)]
    width = max(2, len(str(C - 1)))
    cdir = ["class_%0*d" % (width, c) for c in range(C)]
    for c in cdir:
        d = os.path.join(a.out, c)
        os.makedirs(d, exist_ok=True)
        # files of an earlier run (same names only) would otherwise stay beside the new ones
        for f in os.listdir(d):
            if re.fullmatch(r"\d{6}\.jpg|odd_\w+\.(jpg|png)", f):
                os.remove(os.path.join(d, f))
    quality = a.quality if a.quality is not None else (97 if a.profile == "imagenet" else 90)
    grain = a.grain if a.grain is not None else (10.0 if a.profile == "imagenet" else 0.0)
    if not 1 <= quality <= 100 or grain < 0:
        sys.exit("gen_images.py: --quality must be 1-100 and --grain >= 0")
    t0 = time.time()
    jobs = [(i, a.out, a.seed, quality, grain, class_photos, cdir) for i in range(a.count)]
    procs = min(a.procs, a.count)
    if procs == 1:
        _setup([_load_one(p) for p in paths], a.seed, grain)
        res = [_one(j) for j in jobs]
    else:
        # fork: the workers inherit the decoded sources instead of decoding them each
        ctx = mp.get_context("fork")
        with ctx.Pool(min(procs, len(paths))) as pool:
            photos = pool.map(_load_one, paths, chunksize=1)
        _setup(photos, a.seed, grain)
        with ctx.Pool(procs) as pool:
            res = pool.map(_one, jobs, chunksize=max(1, min(64, a.count // (procs * 8))))
    secs = time.time() - t0
    odd = _odd(a.out, cdir) if a.odd else []
    if a.list:
        with open(a.list, "w") as f:
            for r in res:
                f.write("%s\t%d\n" % (os.path.abspath(r[0]), r[1]))
            for p, l in odd:
                f.write("%s\t%d\n" % (os.path.abspath(p), l))
    sizes = np.array([r[2] for r in res], dtype=np.float64)
    ws = np.array([r[3] for r in res], dtype=np.float64)
    hs = np.array([r[4] for r in res], dtype=np.float64)
    print("gen_images: %d images (%s) in %s: mean %.1f KB, mean %.0fx%.0f, %d classes from %d photos, q%d grain %g, "
          "%.1f s (%d processes, %.0f images/s)%s"
          % (a.count, a.profile, a.out, sizes.mean() / 1000, ws.mean(), hs.mean(), C, P, quality, grain, secs, procs,
             a.count / secs, "; odd files: " + " ".join(os.path.relpath(p, a.out) for p, _ in odd) if odd else ""))


if __name__ == "__main__":
    main()
