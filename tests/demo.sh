#!/usr/bin/env bash
# tests/demo.sh BUILD - what `make demo` runs after installing and building:
# real photos from a Debian package -> an ImageNet-like folder -> a .pgs file ->
# verified -> streamed through the loader with JPEG decode, printing images/s.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PS="$BUILD/pagestream"
D="$BUILD/demo"
N=${DEMO_IMAGES:-2000}
mkdir -p "$D"

echo "== 1/4 sample photos (extracted from Debian wallpaper packages; see $BUILD/photos/SOURCES.txt)"
bench/get_photos.sh "$BUILD/photos"

if [ ! -f "$D/images/.done-$N" ]; then
    echo "== 2/4 generating $N ImageNet-like JPEGs (10 classes) from them"
    rm -rf "$D/images"
    /usr/bin/python3 bench/gen_images.py --photos "$BUILD/photos" --out "$D/images" --count "$N" --classes 10 --seed 1
    touch "$D/images/.done-$N"
else
    echo "== 2/4 $N generated JPEGs already in $D/images"
fi

echo "== 3/4 pack + verify"
"$PS" pack "$D/images" -o "$D/demo.pgs"
"$PS" verify "$D/demo.pgs"

echo "== 4/4 stream through the loader (quasi-random order, random-resized-crop 224 + flip, all cores)"
"$PS" bench "$D/demo.pgs" --epochs 3 --cache-size 64M --batch-size 128
