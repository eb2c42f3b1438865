#!/usr/bin/env bash
# deploy/image-install.sh PREFIX [BUILD] - the build stage of deploy/Dockerfile:
# build pagestream and install the CLI, library, header, pkg-config file, the
# Python package and examples/train.py under PREFIX ($DESTDIR honoured), and
# write PREFIX/share/pagestream/runtime-packages: the Debian/Ubuntu packages
# holding the shared libraries the CLI and the library link directly (the
# runtime stage installs exactly those). tests/it_deploy.sh runs it outside Docker.
#   make/CUDA: $CUDA (0, 1, auto) goes to make when set; $JOBS parallel jobs (default: the cores).
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
PREFIX=$1
BUILD=${2:-build}
DEST=${DESTDIR:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mk=(make --no-print-directory "BUILD=$BUILD")
if [ -n "${CUDA:-}" ]; then mk+=("CUDA=$CUDA"); fi
"${mk[@]}" -j"${JOBS:-$(nproc)}" all
"${mk[@]}" install PREFIX="$PREFIX" DESTDIR="$DEST"
# the Makefile writes the pkg-config file once per build folder, with the PREFIX of that first
# build: give the installed copy this one
sed -i "s|^prefix=.*|prefix=$PREFIX|" "$DEST$PREFIX/lib/pkgconfig/pagestream.pc"

# the Python package, with the library linked in (relative: works under DESTDIR too)
py="$DEST$PREFIX/python/pagestream"
rm -rf "$py"
mkdir -p "$py"
cp python/pagestream/*.py "$py/"
ln -s ../../lib/libpagestream.so.0 "$py/libpagestream.so"
mkdir -p "$py/bin"   # pagestream.pack() / inspect() run the CLI found here first
ln -s ../../../bin/pagestream "$py/bin/pagestream"
share="$DEST$PREFIX/share/pagestream"
mkdir -p "$share/examples"
cp examples/train.py "$share/examples/"

# The packages of the libraries named in DT_NEEDED (their own dependencies come with them).
# dpkg knows a file by the path its package installed, which on a merged-/usr system may be
# /lib/... or /usr/lib/... while ldd prints either: try both, then any directory.
bins=("$DEST$PREFIX/bin/pagestream" "$DEST$PREFIX/lib/libpagestream.so.0")
pkgs=""
missing=""
for soname in $(readelf -d "${bins[@]}" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u); do
    path=$(ldd "${bins[@]}" | awk -v n="$soname" '$1 == n && $2 == "=>" { print $3; exit }')
    owner=""
    for cand in "$path" "${path#/usr}" "/usr$path" "*/$soname"; do
        [ -n "$cand" ] && [ "$cand" != "/usr" ] || continue
        owner=$(dpkg -S "$cand" 2>/dev/null | grep -v '^diversion' | head -n 1 | cut -d: -f1) || true
        [ -n "$owner" ] && break
    done
    if [ -z "$owner" ]; then
        missing="$missing $soname(${path:-not found})"
    else
        pkgs="$pkgs $owner"
    fi
done
if [ -n "$missing" ]; then
    # e.g. libcudart from a CUDA toolkit outside dpkg: the runtime base image must provide it
    echo "image-install.sh: no package holds:$missing; the runtime image must provide them" >&2
fi
printf '%s\n' $pkgs | sort -u > "$share/runtime-packages"
echo "image-install.sh: installed under $DEST$PREFIX; runtime packages: $(tr '\n' ' ' < "$share/runtime-packages")"
