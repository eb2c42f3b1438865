#!/usr/bin/env python3
"""A small test runner printing one line per test, as tests/lib.sh does:
"ok NAME", "FAIL NAME: why" or "skip NAME: why" (tests/run.sh counts them).

    run.py [-k SUBSTRING] [FILE.py ...]     (default: every test_*.py here)

A test is a module-level function test_*(); it passes by returning, is
skipped by raising unittest.SkipTest, fails by raising anything else. A
module's setup_module() runs first (SkipTest there skips all its tests) and
teardown_module() last. Exit status 1 when a test failed.
"""
import glob
import importlib.util
import os
import sys
import time
import traceback
import unittest


def run_module(path, pattern, verbose):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    tests = [(n, f) for n, f in vars(mod).items()
             if n.startswith("test_") and callable(f) and (not pattern or pattern in n)]
    tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
    failed = 0
    setup = getattr(mod, "setup_module", None)
    if setup and tests:
        try:
            setup()
        except unittest.SkipTest as e:
            for n, _ in tests:
                print("skip %s: %s" % (n, e), flush=True)
            return 0
        except Exception as e:
            traceback.print_exc()
            for n, _ in tests:
                print("FAIL %s: setup failed: %s" % (n, one_line(e)), flush=True)
            return len(tests)
    try:
        for n, f in tests:
            t0 = time.time()
            try:
                detail = f()
            except unittest.SkipTest as e:
                print("skip %s: %s" % (n, e), flush=True)
                continue
            except Exception as e:
                traceback.print_exc()
                print("FAIL %s: %s" % (n, one_line(e)), flush=True)
                failed += 1
                continue
            extra = " (%s)" % detail if isinstance(detail, str) and detail else ""
            print("ok %s%s" % (n, extra), flush=True)
            if verbose:
                print("  %s: %.2f s" % (n, time.time() - t0), flush=True)
    finally:
        teardown = getattr(mod, "teardown_module", None)
        if teardown and tests:
            teardown()
    return failed


def one_line(e):
    s = str(e).strip().replace("\n", " ") or type(e).__name__
    return s if len(s) < 400 else s[:400] + "..."


def main(argv):
    pattern = None
    verbose = os.environ.get("PS_TEST_VERBOSE") == "1"
    files = []
    i = 0
    while i < len(argv):
        if argv[i] == "-k" and i + 1 < len(argv):
            pattern = argv[i + 1]
            i += 2
            continue
        files.append(argv[i])
        i += 1
    here = os.path.dirname(os.path.abspath(__file__))
    if not files:
        files = sorted(glob.glob(os.path.join(here, "test_*.py")))
    sys.path.insert(0, here)
    failed = 0
    for path in files:
        failed += run_module(path, pattern, verbose)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
