# shellcheck shell=bash disable=SC2034
# tests/lib.sh - helpers for integration test scripts (sourced).
# Each check prints one line: "ok NAME", "FAIL NAME: why" or "skip NAME: why";
# tests/run.sh counts them. Scripts get the build folder as $1.
BUILD=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd)
PS="$BUILD/pagestream"
export PAGESTREAM_LOG=${PAGESTREAM_LOG:-1}
# scratch space for servers and data of this run
TB=${PS_TB:-$ROOT/build/tb}
mkdir -p "$TB"
T_FAILED=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: ${2:-}"; T_FAILED=$((T_FAILED + 1)); }
skip() { echo "skip $1: ${2:-}"; }
# check NAME CMD...: ok when the command succeeds, else FAIL with its last output line
check() {
    local name=$1; shift
    local out
    if out=$("$@" 2>&1); then ok "$name"; else fail "$name" "$(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"; fi
}
# expect_fail NAME PATTERN CMD...: the command must fail and print PATTERN (grep -E)
expect_fail() {
    local name=$1 pat=$2; shift 2
    local out
    if out=$("$@" 2>&1); then fail "$name" "succeeded but should have failed"; return; fi
    if printf '%s' "$out" | grep -Eq -- "$pat"; then ok "$name"; else fail "$name" "error did not match /$pat/: $(printf '%s' "$out" | tail -n 2 | tr '\n' ' ')"; fi
}
is_root() { [ "$(id -u)" = 0 ]; }
# test_images N [PROFILE]: print a folder holding an ImageFolder of N generated
# ImageNet-like JPEGs (10 classes), made once from real photos and reused.
test_images() {
    local n=$1 profile=${2:-imagenet} dir
    dir="$ROOT/build/test-images/$profile-$n"
    if [ ! -f "$dir/.done" ]; then
        "$ROOT/bench/get_photos.sh" "$ROOT/build/photos" >&2 || return 1
        rm -rf "$dir"
        /usr/bin/python3 "$ROOT/bench/gen_images.py" --photos "$ROOT/build/photos" --out "$dir" \
            --count "$n" --classes 10 --seed 3 --profile "$profile" >&2 || return 1
        touch "$dir/.done"
    fi
    echo "$dir"
}
