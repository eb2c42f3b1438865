#!/usr/bin/env bash
# it_python.sh - the Python package (python/pagestream) against this build's
# libpagestream.so and CLI: python/tests/run.py prints one ok/FAIL/skip line per test.
source "$(dirname "$0")/lib.sh" "$1"
PY=/usr/bin/python3   # Debian's python3-torch / numpy / PIL live here, not in a pyenv on PATH
if [ ! -x "$PY" ]; then
    skip python "no /usr/bin/python3"
    exit 0
fi
if [ ! -f "$BUILD/libpagestream.so" ]; then
    fail python "no $BUILD/libpagestream.so (make first)"
    exit 1
fi
if ! "$PY" -c 'import numpy' 2>/dev/null && ! "$PY" -c 'import torch' 2>/dev/null; then
    skip python "neither PyTorch nor numpy for $PY (deploy/install-deps.sh test installs python3-torch)"
    exit 0
fi
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export PAGESTREAM_LIB="$BUILD/libpagestream.so"
export PAGESTREAM_CLI="$PS"
export PS_TB="$TB"
export PAGESTREAM_LOG=0
# torch would start one OpenMP thread per core in every rank process; the loader has its own threads
export OMP_NUM_THREADS=1
shift  # the build folder; what follows goes to run.py (-k NAME, files)
timeout 600 "$PY" "$ROOT/python/tests/run.py" "$@"
rc=$?
[ $rc -eq 124 ] && fail python "the Python tests ran over 600 s"
exit $rc
