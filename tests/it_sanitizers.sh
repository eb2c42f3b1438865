#!/usr/bin/env bash
# The unit tests again under ASan+UBSan (clang) and under valgrind, and every
# fuzz target for a bounded time: part of `make test`, so CI runs them.
# SANITIZERS=0 skips this script (quick local runs).
source "$(dirname "$0")/lib.sh" "$1"
cd "$ROOT" || exit 1
if [ "${SANITIZERS:-1}" = 0 ]; then skip sanitizers "SANITIZERS=0"; exit 0; fi

# prefix every result line of a unit test program with a tag
relabel() { sed -E "s/^(ok|FAIL|skip) /\1 $1:/"; }

if ! command -v clang >/dev/null; then
    skip asan "clang is not installed"
else
    if make -s asan-build > "$TB/asan-build.log" 2>&1; then
        for t in build-asan/tests/test_*; do
            [ -x "$t" ] || continue
            n=$(basename "$t")
            out=$(ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                  timeout 600 "$t" 2>&1); rc=$?
            printf '%s\n' "$out" | grep -E '^(ok|FAIL|skip) ' | relabel "asan/$n"
            if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^FAIL '; then
                fail "asan/$n" "exit $rc: $(printf '%s\n' "$out" | grep -E 'ERROR|runtime error|SUMMARY' | head -n 3 | tr '\n' ' ')"
            fi
        done
    else
        fail asan_build "$(tail -n 5 "$TB/asan-build.log" | tr '\n' ' ')"
    fi
fi

if ! command -v valgrind >/dev/null; then
    skip valgrind "valgrind is not installed"
else
    # libjpeg-turbo's SIMD code reads row padding memcheck cannot follow;
    # its documented remedy is to run the C code paths under valgrind
    export JSIMD_FORCENONE=1
    # valgrind runs 20-50x slower: the quick unit programs in full, the loader's on a subset
    # test_decode's PSNR sweeps are long numeric loops that valgrind slows
    # 50x and ASan already covers: its other cases run below
    for tc in test_crop_box test_resize test_raw test_reproducible test_odd_jpegs test_corpus test_restart test_nchw; do
        out=$(timeout 900 valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
              "$BUILD/tests/test_decode" "$tc" 2>&1); rc=$?
        printf '%s\n' "$out" | grep -E '^(ok|FAIL|skip) ' | relabel "valgrind/test_decode"
        if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^FAIL '; then
            fail "valgrind/test_decode:$tc" "exit $rc: $(printf '%s\n' "$out" | grep -E '==[0-9]+==' | head -n 4 | tr '\n' ' ')"
        fi
    done
    for n in test_format test_sampler test_url test_beton test_io; do
        t="$BUILD/tests/$n"
        [ -x "$t" ] || continue
        out=$(timeout 900 valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
              "$t" 2>&1); rc=$?
        printf '%s\n' "$out" | grep -E '^(ok|FAIL|skip) ' | relabel "valgrind/$n"
        if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^FAIL '; then
            fail "valgrind/$n" "exit $rc: $(printf '%s\n' "$out" | grep -E '==[0-9]+==' | head -n 4 | tr '\n' ' ')"
        fi
    done
    for tc in test_resume_identical test_errors test_held_batches_not_overwritten test_close_mid_epoch; do
        out=$(timeout 900 valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
              "$BUILD/tests/test_loader" "$tc" 2>&1); rc=$?
        printf '%s\n' "$out" | grep -E '^(ok|FAIL|skip) ' | relabel "valgrind/test_loader"
        if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^FAIL '; then
            fail "valgrind/test_loader:$tc" "exit $rc: $(printf '%s\n' "$out" | grep -E '==[0-9]+==' | head -n 4 | tr '\n' ' ')"
        fi
    done
fi

if ! command -v clang >/dev/null; then
    skip fuzz "clang is not installed"
else
    out=$(make -s fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-15}" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -E '^(ok|FAIL|skip) '
    if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^FAIL '; then
        fail fuzz "exit $rc: $(printf '%s\n' "$out" | tail -n 5 | tr '\n' ' ')"
    fi
fi
exit 0
