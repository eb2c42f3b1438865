"""pagestream: feed PyTorch training from paged dataset files (.pgs, FFCV .beton)
on local disks, NFS, HTTP(S) and S3, through a bounded page cache.

    import pagestream
    loader = pagestream.Loader("s3://bucket/train.pgs", batch_size=256, cache_size="2G", crop=224)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:   # uint8 NHWC tensors, no copy
            ...

pack() and inspect() run the `pagestream` command-line program.
The library libpagestream.so is found through $PAGESTREAM_LIB, next to this
package, in the source tree's build/ folder, or on the linker path.
"""
import json
import os
import shutil
import subprocess

from ._lib import (PS_EAUTH, PS_ECHECKSUM, PS_ECONFIG, PS_EDECODE, PS_EFORMAT, PS_EHTTP, PS_ENOGPU, PS_ERANGE,
                   PS_ESTOPPED, PS_EUNSUP, PS_EVERSION, strerror)
from .loader import Error, Loader

__version__ = "0.1.0"
# the PS_E* codes are what Error.code holds for the library's own failures (else -errno)
__all__ = ["Loader", "Error", "pack", "inspect", "cli_path", "library_path", "strerror", "__version__",
           "PS_EAUTH", "PS_ECHECKSUM", "PS_ECONFIG", "PS_EDECODE", "PS_EFORMAT", "PS_EHTTP", "PS_ENOGPU",
           "PS_ERANGE", "PS_ESTOPPED", "PS_EUNSUP", "PS_EVERSION"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def library_path():
    """The libpagestream.so in use (loads it)."""
    from . import _lib
    return _lib.path()


def cli_path():
    """The `pagestream` program pack() and inspect() run: $PAGESTREAM_CLI, the copy
    installed with the package, the one next to the library, the source tree's
    build/, then $PATH."""
    env = os.environ.get("PAGESTREAM_CLI")
    if env:
        return os.path.abspath(env) if os.sep in env else env
    cands = [os.path.join(_PKG_DIR, "bin", "pagestream")]
    lib = os.environ.get("PAGESTREAM_LIB")
    if lib:
        cands.append(os.path.join(os.path.dirname(os.path.abspath(lib)), "pagestream"))
    cands.append(os.path.normpath(os.path.join(_PKG_DIR, "..", "..", "build", "pagestream")))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("pagestream")
    if found:
        return found
    raise FileNotFoundError("pagestream: cannot find the `pagestream` program; tried %s and $PATH. Build it "
                            "with `make`, or set $PAGESTREAM_CLI." % ", ".join(cands))


def _flags(opts):
    args = []
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        if v is None or v is False:
            continue
        if v is True:
            args.append(flag)
        elif isinstance(v, (list, tuple)):
            for item in v:
                args += [flag, str(item)]
        else:
            args += [flag, str(v)]
    return args


def _run(args):
    try:
        p = subprocess.run([cli_path()] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        raise Error("cannot run %s: %s" % (args[0], e))
    if p.returncode != 0:
        msg = p.stderr.decode("utf-8", "replace").strip() or "exit status %d" % p.returncode
        raise Error("pagestream %s failed: %s" % (args[0], msg))
    return p.stdout.decode("utf-8", "replace")


def pack(src, out, **opts):
    """Pack @src (an ImageFolder-style directory, or what `pagestream pack` accepts) into
    the dataset @out. Keyword options become flags of `pagestream pack`:
    page_size="4M" -> --page-size 4M, max_side=512 -> --max-side 512, a True value
    -> the bare flag. Returns the program's standard output."""
    return _run(["pack", os.fspath(src), "-o", os.fspath(out)] + _flags(opts))


def inspect(url, **opts):
    """`pagestream inspect URL --json`, parsed: the dataset's header, fields, counts, pages."""
    text = _run(["inspect", os.fspath(url), "--json"] + _flags(opts))
    try:
        return json.loads(text)
    except ValueError as e:
        raise Error("pagestream inspect printed no valid JSON (%s): %s" % (e, text[:200]))
