"""ctypes declarations of include/pagestream.h and the search for libpagestream.so.

The structures below mirror the header field by field, in order, with the
same C types; python/tests/test_loader.py checks every offset against the C
compiler (when one is installed) and the defaults that ps_options_init()
writes through them.
"""
import ctypes
import ctypes.util
import os

# error codes (pagestream.h)
PS_EFORMAT = -1001
PS_ECHECKSUM = -1002
PS_EHTTP = -1003
PS_EAUTH = -1004
PS_ECONFIG = -1005
PS_EDECODE = -1006
PS_EUNSUP = -1007
PS_EVERSION = -1008
PS_ESTOPPED = -1009
PS_ENOGPU = -1010
PS_ERANGE = -1011
PS_EPOCH_END = 1
PS_ERRLEN = 512

ORDERS = {"sequential": 0, "random": 1, "quasi_random": 2}
TRANSFORMS = {"none": 0, "random_resized_crop": 1, "center_crop": 2}
LAYOUTS = {"NHWC": 0, "NCHW": 1}
DTYPES = {"uint8": 0, "float16": 1, "float32": 2}
DEVICES = {"cpu": 0, "cuda": 1}
ON_ERROR = {"fail": 0, "skip": 1}

c_u8, c_u32, c_u64, c_i64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64
c_int, c_float, c_double = ctypes.c_int, ctypes.c_float, ctypes.c_double


class PsOptions(ctypes.Structure):
    _fields_ = [
        ("cache_size", c_u64),
        ("batch_size", c_u32),
        ("order", c_int),
        ("seed", c_u64),
        ("rank", c_int),
        ("world_size", c_int),
        ("drop_last", c_int),
        ("start_epoch", c_u64),
        ("start_batch", c_u64),
        ("threads", c_int),
        ("ring_depth", c_int),
        ("queue_depth", c_int),
        ("direct", c_int),
        ("insecure", c_int),
        ("retries", c_int),
        ("timeout_ms", c_int),
        ("endpoint", ctypes.c_char_p),
        ("region", ctypes.c_char_p),
        ("fault", ctypes.c_char_p),
        ("transform", c_int),
        ("crop", c_u32),
        ("resize", c_u32),
        ("scale_min", c_float),
        ("scale_max", c_float),
        ("ratio_min", c_float),
        ("ratio_max", c_float),
        ("flip", c_int),
        ("layout", c_int),
        ("device", c_int),
        ("dtype", c_int),
        ("mean", c_float * 3),
        ("std", c_float * 3),
        ("on_error", c_int),
    ]


class PsBatch(ctypes.Structure):
    _fields_ = [
        ("epoch", c_u64),
        ("index", c_u64),
        ("n", c_u32),
        ("skipped", c_u32),
        ("ids", ctypes.POINTER(c_u64)),
        ("labels", ctypes.POINTER(c_i64)),
        ("images", ctypes.c_void_p),
        ("height", c_u32),
        ("width", c_u32),
        ("channels", c_u32),
        ("layout", c_int),
        ("dtype", c_int),
        ("device", c_int),
        ("image_bytes", ctypes.c_size_t),
        ("data", ctypes.POINTER(ctypes.c_void_p)),
        ("sizes", ctypes.POINTER(c_u32)),
    ]


class PsStats(ctypes.Structure):
    _fields_ = [
        ("samples", c_u64),
        ("batches", c_u64),
        ("payload_bytes", c_u64),
        ("bytes_read", c_u64),
        ("reads", c_u64),
        ("cache_hits", c_u64),
        ("cache_misses", c_u64),
        ("evictions", c_u64),
        ("retries", c_u64),
        ("refetches", c_u64),
        ("decode_errors", c_u64),
        ("padded", c_u64),
        ("wait_io_s", c_double),
        ("wait_batch_s", c_double),
        ("decode_cpu_s", c_double),
        ("peak_rss", c_u64),
        ("mem_arena", c_u64),
        ("mem_fixed", c_u64),
        ("nsamples", c_u64),
        ("npages", c_u64),
        ("page_size", c_u64),
        ("cache_slots", c_u64),
        ("window_pages", c_u64),
        ("epoch_batches", c_u64),
        ("nclasses", c_u32),
        ("unit_mode", c_int),
    ]


# Sizes on LP64 (x86-64, aarch64) by the C layout rules; checked at import so a
# header change that this file missed fails loudly instead of corrupting memory.
_LP64_SIZES = {PsOptions: 184, PsBatch: 96, PsStats: 200}

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_BUILD = os.path.normpath(os.path.join(_PKG_DIR, "..", "..", "build"))


def candidates():
    """Places searched for libpagestream.so, in order (the first that exists is used)."""
    out = []
    env = os.environ.get("PAGESTREAM_LIB")
    if env:
        return [env]
    out.append(os.path.join(_PKG_DIR, "libpagestream.so"))
    out.append(os.path.join(_REPO_BUILD, "libpagestream.so"))
    found = ctypes.util.find_library("pagestream")
    if found:
        out.append(found)
    return out


def _declare(lib):
    P = ctypes.POINTER
    vp = ctypes.c_void_p
    sig = {
        "ps_strerror": (ctypes.c_char_p, [c_int]),
        "ps_options_init": (None, [P(PsOptions)]),
        "ps_loader_open": (c_int, [ctypes.c_char_p, P(PsOptions), P(vp), ctypes.c_char_p]),
        "ps_loader_next": (c_int, [vp, P(P(PsBatch))]),
        "ps_batch_release": (None, [vp]),
        "ps_loader_seek": (c_int, [vp, c_u64, c_u64]),
        "ps_loader_position": (None, [vp, P(c_u64), P(c_u64)]),
        "ps_loader_stats": (None, [vp, P(PsStats)]),
        "ps_loader_epoch_batches": (c_u64, [vp]),
        "ps_loader_errmsg": (ctypes.c_char_p, [vp]),
        "ps_loader_class_name": (ctypes.c_char_p, [vp, c_i64]),
        "ps_loader_close": (None, [vp]),
        "ps_parse_size": (c_int, [ctypes.c_char_p, P(c_u64)]),
        "ps_cgroup_memory_limit": (c_u64, []),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


_lib = None
_lib_path = None


def load():
    """The loaded library (ctypes.CDLL); raises ImportError naming every place searched."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        for st, size in _LP64_SIZES.items():
            if ctypes.sizeof(st) != size:
                raise ImportError("pagestream: internal error: %s is %d bytes, the C layout gives %d"
                                  % (st.__name__, ctypes.sizeof(st), size))
    tried = []
    for path in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _lib = _declare(lib)
        _lib_path = os.path.abspath(path) if os.sep in path else path
        return _lib
    raise ImportError(
        "pagestream: cannot find libpagestream.so; tried: " + "; ".join(tried or ["nothing"]) +
        ". Build it with `make` (then use PYTHONPATH=python from the source tree), install it with "
        "`make install-python`, or point $PAGESTREAM_LIB at the file.")


def path():
    """File name of the loaded library."""
    load()
    return _lib_path


def strerror(code):
    return load().ps_strerror(int(code)).decode("utf-8", "replace")
