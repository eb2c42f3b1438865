#!/usr/bin/python3
"""gen_images.py - an ImageNet-like ImageFolder made from a few real photographs.

Follows ../shared/DATASETS.md: per image pick a source photo (its index gives the
class), a target size (long side 500 px for 45% of images, else normal(400, 110)
clipped to 100-800), an aspect from {4:3, 3:2, 1:1, 5:4, 16:9} with jitter (25%
portrait), a random crop covering 15-100% of the largest window of that aspect,
a random flip, an area downscale, then (profile imagenet) Gaussian grain sigma 10
on luma (sigma/3 per chroma channel) and JPEG 4:2:0 q97 - about 110 KB at ~410x360
like ImageNet - or (profile lowentropy) q90 without grain, the control set.

  gen_images.py --photos DIR --out OUT --count N --classes C [--seed S]
                [--profile imagenet|lowentropy] [--list FILE] [--odd]
"""
import argparse
import glob
import multiprocessing as mp
import os
import sys
import time

import numpy as np
from PIL import Image

ASPECTS = [(4, 3), (3, 2), (1, 1), (5, 4), (16, 9)]
_photos = None


def _load(paths):
    global _photos
    _photos = []
    for p in paths:
        im = Image.open(p).convert("RGB")
        # keep memory and crop cost modest: sources at most 1600 px wide
        if max(im.size) > 1600:
            s = 1600 / max(im.size)
            im = im.resize((round(im.width * s), round(im.height * s)), Image.BOX)
        _photos.append(im)


def _one(job):
    idx, out, seed, profile, nphotos, classes = job
    rng = np.random.default_rng([seed, idx])
    src = int(rng.integers(nphotos))
    label = src % classes
    im = _photos[src]
    long_side = 500 if rng.random() < 0.45 else int(np.clip(rng.normal(400, 110), 100, 800))
    aw, ah = ASPECTS[int(rng.integers(len(ASPECTS)))]
    ratio = aw / ah * float(rng.uniform(0.95, 1.05))
    if rng.random() < 0.25:
        ratio = 1 / ratio
    tw, th = (long_side, max(1, round(long_side / ratio))) if ratio >= 1 else (max(1, round(long_side * ratio)), long_side)
    # largest window of this aspect in the source, then a crop of 15-100% of its area
    W, H = im.size
    ww, wh = (W, W / ratio) if W / ratio <= H else (H * ratio, H)
    frac = float(np.sqrt(rng.uniform(0.15, 1.0)))
    cw, ch = max(8, ww * frac), max(8, wh * frac)
    x0 = float(rng.uniform(0, W - cw)) if W > cw else 0.0
    y0 = float(rng.uniform(0, H - ch)) if H > ch else 0.0
    crop = im.crop((round(x0), round(y0), round(x0 + cw), round(y0 + ch)))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    crop = crop.resize((tw, th), Image.BOX)
    if profile == "imagenet":
        ycc = np.asarray(crop.convert("YCbCr"), dtype=np.float32)
        noise = rng.normal(0.0, 1.0, ycc.shape).astype(np.float32)
        noise *= np.array([10.0, 10.0 / 3, 10.0 / 3], dtype=np.float32)
        ycc = np.clip(ycc + noise, 0, 255).astype(np.uint8)
        crop = Image.fromarray(ycc, "YCbCr").convert("RGB")
        quality = 97
    else:
        quality = 90
    d = os.path.join(out, "class_%02d" % label)
    path = os.path.join(d, "%06d.jpg" % idx)
    crop.save(path, "JPEG", quality=quality, subsampling=2)
    return path, label, os.path.getsize(path), tw, th


def _odd(out):
    """A few unusual files for tests: grayscale, CMYK, progressive JPEGs, a truncated one, a PNG."""
    d = os.path.join(out, "odd")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    base = Image.fromarray(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8), "RGB")
    base.convert("L").save(os.path.join(d, "gray.jpg"), "JPEG", quality=90)
    base.convert("CMYK").save(os.path.join(d, "cmyk.jpg"), "JPEG", quality=90)
    base.save(os.path.join(d, "progressive.jpg"), "JPEG", quality=90, progressive=True)
    base.save(os.path.join(d, "whole.jpg"), "JPEG", quality=90)
    data = open(os.path.join(d, "whole.jpg"), "rb").read()
    open(os.path.join(d, "truncated.jpg"), "wb").write(data[: len(data) // 2])
    os.remove(os.path.join(d, "whole.jpg"))
    base.save(os.path.join(d, "image.png"), "PNG")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", required=True, help="folder of source photographs (bench/get_photos.sh)")
    ap.add_argument("--out", required=True, help="ImageFolder to create")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", choices=["imagenet", "lowentropy"], default="imagenet")
    ap.add_argument("--list", help="also write a path<TAB>label list file")
    ap.add_argument("--odd", action="store_true", help="add grayscale/CMYK/progressive/truncated/PNG files in OUT/odd")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(a.photos, "*.jpg")))
    if not paths:
        sys.exit("gen_images.py: no .jpg photographs in %s (run bench/get_photos.sh first)" % a.photos)
    if a.count < 1 or a.classes < 1:
        sys.exit("gen_images.py: --count and --classes must be positive")
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, "class_%02d" % c), exist_ok=True)
    t0 = time.time()
    jobs = [(i, a.out, a.seed, a.profile, len(paths), a.classes) for i in range(a.count)]
    with mp.Pool(a.procs, initializer=_load, initargs=(paths,)) as pool:
        res = pool.map(_one, jobs, chunksize=32)
    if a.list:
        with open(a.list, "w") as f:
            for path, label, _, _, _ in res:
                f.write("%s\t%d\n" % (os.path.abspath(path), label))
    if a.odd:
        _odd(a.out)
    sizes = np.array([r[2] for r in res], dtype=np.float64)
    ws = np.array([r[3] for r in res], dtype=np.float64)
    hs = np.array([r[4] for r in res], dtype=np.float64)
    print("gen_images: %d images (%s) in %s: mean %.1f KB, mean %.0fx%.0f, %d classes, %.1f s"
          % (a.count, a.profile, a.out, sizes.mean() / 1000, ws.mean(), hs.mean(), a.classes, time.time() - t0))


if __name__ == "__main__":
    main()
