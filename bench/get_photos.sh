#!/usr/bin/env bash
# bench/get_photos.sh [DEST] - real photographs for the demo, tests and benchmarks,
# extracted from Debian 12 packages at setup time (nothing is installed; nothing is
# committed): mate-backgrounds (nature/*.jpg, GPL-2+) and lxqt-themes
# (wallpapers/*.jpg, CC-BY-SA-3.0). DEST/SOURCES.txt lists file, package, licence.
set -euo pipefail
DEST=${1:-build/photos}
if [ -f "$DEST/SOURCES.txt" ] && [ "$(find "$DEST" -name '*.jpg' | wc -l)" -ge 10 ]; then
    exit 0
fi
mkdir -p "$DEST"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fetch() {
    # apt-get download needs package lists; refresh them once if it fails
    apt-get download "$@" >/dev/null 2>&1 && return 0
    apt-get update -q >/dev/null 2>&1 || true
    apt-get download "$@" >/dev/null 2>&1
}
if ! fetch mate-backgrounds lxqt-themes; then
    echo "get_photos: cannot download mate-backgrounds and lxqt-themes with apt-get (no Debian mirror reachable?)" >&2
    exit 1
fi
for d in ./*.deb; do dpkg -x "$d" x; done
cd - >/dev/null
: > "$DEST/SOURCES.txt.tmp"
n=0
for f in "$work"/x/usr/share/backgrounds/mate/nature/*.jpg; do
    cp "$f" "$DEST/mate-$(basename "$f")"
    printf 'mate-%s\tmate-backgrounds (Debian 12)\tGPL-2+ (see /usr/share/doc/mate-backgrounds/copyright)\n' "$(basename "$f")" >> "$DEST/SOURCES.txt.tmp"
    n=$((n + 1))
done
for f in "$work"/x/usr/share/lxqt/wallpapers/*.jpg; do
    # the photographs only, not the logo graphics
    case $(basename "$f") in *logo*|*windows*) continue ;; esac
    cp "$f" "$DEST/lxqt-$(basename "$f")"
    printf 'lxqt-%s\tlxqt-themes (Debian 12)\tCC-BY-SA-3.0 (see /usr/share/doc/lxqt-themes/copyright)\n' "$(basename "$f")" >> "$DEST/SOURCES.txt.tmp"
    n=$((n + 1))
done
mv "$DEST/SOURCES.txt.tmp" "$DEST/SOURCES.txt"
echo "get_photos: $n photographs in $DEST (sources and licences in $DEST/SOURCES.txt)"
