#!/usr/bin/env bash
# bench/get_photos.sh [DEST] - real photographs for the demo, tests and benchmarks, taken at setup
# time from Debian 12 packages without installing them (apt-get download + dpkg -x; nothing is
# committed to the repository). DEST (default build/photos) receives ~37 photos as JPEG files and
# DEST/SOURCES.txt: file, package and version, path in the package, licence and copyright holders
# as the package's copyright file states them. Does nothing when DEST already holds the set.
#   mate-backgrounds         nature/*.jpg (12)                         GPL-2+
#   lxqt-themes              wallpapers: the 11 photographs            LGPL-2.1+ in debian/copyright
#                            (PNGs re-encoded as JPEG q95 4:4:4)       (Files: *); CC-BY-SA-3.0 in
#                                                                      wallpapers/License
#   lomiri-wallpapers-16.04  the 13 photographs (not the 2 graphics)   CC-BY-4.0, CC-BY-SA-4.0, CC0-1.0
#   lomiri-wallpapers-20.04  Kleiber (the only photograph)             CC-BY-SA-3.0
# Environment: GET_PHOTOS_TIMEOUT seconds per apt-get step (default 300).
set -euo pipefail
DEST=${1:-build/photos}
LIMIT=${GET_PHOTOS_TIMEOUT:-300}
PY=/usr/bin/python3
PKGS="mate-backgrounds lxqt-themes lomiri-wallpapers-16.04 lomiri-wallpapers-20.04"

# already there: every file SOURCES.txt names exists
if [ -f "$DEST/SOURCES.txt" ]; then
    complete=1; n=0
    while IFS=$'\t' read -r f _; do
        case $f in ''|'#'*) continue ;; esac
        n=$((n + 1))
        [ -s "$DEST/$f" ] || { complete=0; break; }
    done < "$DEST/SOURCES.txt"
    if [ "$complete" = 1 ] && [ "$n" -ge 10 ]; then
        echo "get_photos: $n photographs already in $DEST"
        exit 0
    fi
fi
if ! "$PY" -c 'import PIL' 2>/dev/null; then
    echo "get_photos: $PY cannot import PIL (Debian package python3-pil; deploy/install-deps.sh installs it)" >&2
    exit 1
fi
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# download: a .deb already in apt's cache is used as is; `apt-get update` only when apt has no
# package lists (apt-get download then cannot locate the packages)
download() {
    local p=$1 cached
    cached=$(find /var/cache/apt/archives -maxdepth 1 -name "${p}_*_all.deb" 2>/dev/null | sort | tail -n 1)
    if [ -n "$cached" ]; then cp "$cached" .; return 0; fi
    timeout "$LIMIT" apt-get download "$p" > "$work/apt-$p.log" 2>&1
}
need_update=0
for p in $PKGS; do
    if ! download "$p"; then
        if grep -qE 'Unable to locate package|has no installation candidate' "$work/apt-$p.log"; then
            need_update=1
        fi
    fi
done
if [ "$need_update" = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "get_photos: apt-get cannot locate some of: $PKGS (no package lists?); as root run: apt-get update" >&2
    else
        echo "get_photos: apt has no lists for some of the packages: running apt-get update (at most ${LIMIT}s)" >&2
        timeout "$LIMIT" apt-get update -q > "$work/apt-update.log" 2>&1 ||
            echo "get_photos: apt-get update failed: $(tail -n 1 "$work/apt-update.log")" >&2
        for p in $PKGS; do
            compgen -G "${p}_*.deb" >/dev/null || download "$p" || true
        done
    fi
fi
got=""
for p in $PKGS; do
    deb=$(compgen -G "${p}_*.deb" | head -n 1) || true
    if [ -z "$deb" ]; then
        why=$(grep -E '^(E|W|Err):' "$work/apt-$p.log" 2>/dev/null | tail -n 1)
        echo "get_photos: could not download $p: ${why:-timed out after ${LIMIT}s}" >&2
        continue
    fi
    mkdir -p "x/$p"
    dpkg -x "$deb" "x/$p"
    got="$got $p=$(dpkg-deb -f "$deb" Version)"
done
if [ -z "$got" ]; then
    echo "get_photos: apt-get could not download any of: $PKGS (no Debian mirror reachable?)" >&2
    exit 1
fi

# pick the photographs, copy (PNG -> JPEG), and state each one's licence from the copyright file
"$PY" - "$work/x" "$DEST" $got <<'EOF'
import fnmatch, os, re, sys
from PIL import Image

root, dest, pkgs = sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
PHOTOS = {
    "mate-backgrounds": ("mate", "usr/share/backgrounds/mate/nature", None),
    "lxqt-themes": ("lxqt", "usr/share/lxqt/wallpapers", [
        "Butterfly-Kenneth-Wimer.jpg", "after-the-rain.jpg", "fog.jpg", "this-is-not-windows.jpg",
        "Valendas.png", "appleflower.png", "beam.png", "butterfly.png", "cloud.png", "drop.png",
        "flowers.png"]),
    "lomiri-wallpapers-16.04": ("lomiri", "usr/share/backgrounds", [
        "Bridge_by_Sander_Klootwijk.jpg", "Dragonfly_by_Bolly.jpg", "Picture_0B_by_freespace.jpg",
        "Picture_1A_by_freespace.jpg", "Wine_by_Jakkub_Mede.jpg", "aitzgorri_by_Aitzol_Berasategi.jpg",
        "free_by_Peter_Nerlich.jpg", "friends_by_Aitzol_Berasategi.jpg", "greentock_by_Peter_Nerlich.jpg",
        "life_by_Aitzol_Berasategi.jpg", "picosdeeuropa_by_Aitzol_Berasategi.jpg",
        "seeding_by_Clements_Engelhardt.jpg", "sunset_by_Aitzol_Berasategi.jpg"]),
    "lomiri-wallpapers-20.04": ("lomiri", "usr/share/backgrounds", ["Kleiber_by_Lukas_Baubkus.jpg"]),
}


def stanzas(path):
    """Files stanzas of a machine-readable (DEP-5) copyright file: (patterns, licence, copyright)."""
    out, cur, key = [], {}, None
    for line in open(path, encoding="utf-8", errors="replace").read().splitlines() + [""]:
        if not line.strip():
            if "files" in cur:
                out.append((cur["files"].split(), cur.get("license", "?").split("\n")[0].strip(),
                            "; ".join(s.strip() for s in cur.get("copyright", "").split("\n") if s.strip())))
            cur, key = {}, None
        elif line[0] in " \t":
            if key:
                cur[key] += "\n" + line.strip()
        elif ":" in line:
            key, val = line.split(":", 1)
            key = key.lower()
            cur[key] = val.strip()
    return out


def licence(st, rel):
    """The last stanza whose pattern matches (DEP-5): by path suffix, or by file name when the
    package installs the file elsewhere than its source tree (lomiri: 16.04/X.jpg)."""
    hit = None
    for pats, lic, cr in st:
        for p in pats:
            base = p.rsplit("/", 1)[-1]
            if p == "*" or fnmatch.fnmatch(rel, "*/" + p) or \
                    ("/" in p and "*" not in base and fnmatch.fnmatch(os.path.basename(rel), base)):
                hit = (lic, cr, p)
    return hit or ("unknown (no matching Files stanza)", "", "")


rows = []
for pkg, ver in pkgs.items():
    prefix, sub, names = PHOTOS[pkg]
    base = os.path.join(root, pkg)
    folder = os.path.join(base, sub)
    if names is None:
        names = sorted(n for n in os.listdir(folder) if n.lower().endswith(".jpg"))
    cfile = os.path.join(base, "usr/share/doc", pkg, "copyright")
    st = stanzas(cfile) if os.path.exists(cfile) else []
    # a licence file beside the images (lxqt's wallpapers/License) is reported too
    extra = ""
    for lf in ("License", "LICENSE", "COPYING"):
        lp = os.path.join(folder, lf)
        if os.path.exists(lp):
            m = re.search(r"Licensed under (\S+)", open(lp, errors="replace").read())
            if m:
                url = m.group(1).rstrip("/")
                short = {"by-sa/3.0": "CC-BY-SA-3.0", "by/4.0": "CC-BY-4.0", "by-sa/4.0": "CC-BY-SA-4.0"}
                tag = next((v for k, v in short.items() if url.endswith(k)), url)
                extra = "; %s says %s" % (os.path.join(sub, lf), tag)
    for n in names:
        src = os.path.join(folder, n)
        if not os.path.exists(src):
            print("get_photos: %s: %s/%s is not in this version; skipped" % (pkg, sub, n), file=sys.stderr)
            continue
        stem, ext = os.path.splitext(n)
        out = "%s-%s.jpg" % (prefix, stem)
        how = ""
        if ext.lower() == ".png":
            # the consumers read JPEG; q95 4:4:4 keeps the photo's detail
            Image.open(src).convert("RGB").save(os.path.join(dest, out + ".tmp"), "JPEG",
                                                quality=95, subsampling=0)
            os.replace(os.path.join(dest, out + ".tmp"), os.path.join(dest, out))
            how = " (PNG re-encoded as JPEG q95)"
        else:
            with open(src, "rb") as fi, open(os.path.join(dest, out + ".tmp"), "wb") as fo:
                fo.write(fi.read())
            os.replace(os.path.join(dest, out + ".tmp"), os.path.join(dest, out))
        rel = os.path.join(sub, n)
        lic, cr, pat = licence(st, rel)
        lic_text = "%s (debian/copyright, Files: %s)%s" % (lic, pat, extra) if pat else lic + extra
        rows.append((out, "%s %s" % (pkg, ver), "/" + rel + how, lic_text, cr))
if len(rows) < 10:
    sys.exit("get_photos: only %d photographs found; expected about 37" % len(rows))
with open(os.path.join(dest, "SOURCES.txt.tmp"), "w") as f:
    f.write("# file\tDebian 12 package\tpath in the package\tlicence as stated\tcopyright\n")
    for r in rows:
        f.write("\t".join(r) + "\n")
os.replace(os.path.join(dest, "SOURCES.txt.tmp"), os.path.join(dest, "SOURCES.txt"))
print("get_photos: %d photographs from %d packages in %s (licences in SOURCES.txt)" % (len(rows), len(pkgs), dest))
EOF
