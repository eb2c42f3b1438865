"""pagestream.Loader: the C loader (libpagestream) as a Python iterable of batches.

Batches reach PyTorch (or numpy) through DLPack without a copy: the tensors
point into the loader's batch buffer, and the buffer goes back to the loader
(ps_batch_release) only when the last tensor over it is freed. A native
loader is closed only once every batch it handed out has come back.
"""
import atexit
import ctypes
import os
import threading

from . import _lib
from . import dlpack

__all__ = ["Loader", "Error"]


class Error(RuntimeError):
    """A failure reported by libpagestream; .code is the C return code (-errno or PS_E*)."""

    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = code


Error.__module__ = "pagestream"

_exiting = False


def _at_exit():
    # Tensors freed during interpreter teardown must not call into loaders
    # that may be half torn down; the process is ending, so leak instead.
    global _exiting
    _exiting = True
    dlpack.shutdown()


atexit.register(_at_exit)


class _Native:
    """The ps_loader handle, closed when asked to and no batch is out any more."""

    def __init__(self, lib, handle):
        self.lib = lib
        self.handle = handle
        self.lock = threading.RLock()  # reentrant: a GC-run __del__ may release inside a locked region
        self.outstanding = 0
        self.closing = False

    def batch_done(self, bptr):
        with self.lock:
            if self.handle is None:
                return
            self.lib.ps_batch_release(bptr)
            self.outstanding -= 1
            if self.closing and self.outstanding == 0:
                self._close_locked()

    def close(self):
        with self.lock:
            self.closing = True
            if self.outstanding == 0 and self.handle is not None:
                self._close_locked()

    def _close_locked(self):
        h, self.handle = self.handle, None
        self.lib.ps_loader_close(h)


class _BatchRef:
    """One delivered batch. Every tensor and buffer over the batch refers to this
    object; when the last of them goes, CPython's reference count runs __del__,
    which gives the batch back."""

    __slots__ = ("native", "ptr")

    def __init__(self, native, ptr):
        self.native = native
        self.ptr = ptr

    def __del__(self):
        if not _exiting and self.native is not None:
            self.native.batch_done(self.ptr)


_torch = None
_numpy = None


def _backend(tensors):
    """('torch', module) or ('numpy', module) for @tensors in auto/torch/numpy."""
    global _torch, _numpy
    if tensors not in ("auto", "torch", "numpy"):
        raise ValueError("tensors=%r: use 'auto', 'torch' or 'numpy'" % (tensors,))
    if tensors in ("auto", "torch"):
        if _torch is None:
            try:
                import torch
                import torch.utils.dlpack  # noqa: F401
                _torch = torch
            except ImportError:
                if tensors == "torch":
                    raise ImportError("pagestream: tensors='torch' but PyTorch is not installed "
                                      "(Debian: apt-get install python3-torch; else pip install torch)")
        if _torch is not None:
            return "torch", _torch
    if _numpy is None:
        try:
            import numpy
            if not hasattr(numpy, "from_dlpack"):
                raise ImportError("pagestream: numpy %s is too old: numpy.from_dlpack needs numpy >= 1.22"
                                  % numpy.__version__)
            _numpy = numpy
        except ImportError as e:
            if "too old" in str(e):
                raise
            raise ImportError("pagestream: batches are delivered as PyTorch tensors or numpy arrays, and "
                              "neither is installed (Debian: apt-get install python3-torch or python3-numpy; "
                              "else pip install torch / numpy)")
    return "numpy", _numpy


def _size(v, name):
    if v is None:
        return 0
    if isinstance(v, bool):
        raise TypeError("%s=%r: give bytes (int) or a size string such as '2G'" % (name, v))
    if isinstance(v, int):
        if v < 0:
            raise ValueError("%s=%d: must be >= 0" % (name, v))
        return v
    if isinstance(v, str):
        out = ctypes.c_uint64()
        if _lib.load().ps_parse_size(v.encode(), ctypes.byref(out)) < 0:
            raise ValueError("%s=%r: not a size (examples: 4096, '512k', '64M', '2G')" % (name, v))
        return out.value
    raise TypeError("%s=%r: give bytes (int) or a size string such as '2G'" % (name, v))


def _choice(v, table, name):
    key = v.upper() if table is _lib.LAYOUTS and isinstance(v, str) else v
    if key not in table:
        raise ValueError("%s=%r: use one of %s" % (name, v, ", ".join(repr(k) for k in table)))
    return table[key]


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("$%s=%r is not an integer" % (name, v))


class Loader:
    """Batches of a pagestream dataset (.pgs or FFCV .beton), as an iterable.

    One ``for`` loop over the loader is one epoch: ``for images, labels in loader``
    yields the batches of the loader's current epoch and stops at its end; the
    next loop delivers the next epoch. A loop left early (``break``) leaves the
    position there: the next loop continues the same epoch, unless
    ``set_epoch()`` moves it. ``len(loader)`` is the number of batches per epoch
    (the same on every rank).

    images: uint8 tensor of (n, crop, crop, 3) for layout "NHWC" or (n, 3, crop, crop)
    for "NCHW" (float16/float32 with device="cuda", normalised by the loader), on
    the CPU or the GPU; labels: int64 tensor of (n,) (-1 where the dataset has
    no label), on the CPU (moved to the GPU with device="cuda").
    With transform="none": images is a list of n read-only memoryviews, each the
    stored bytes of one sample's image field (e.g. the JPEG file), no copy.
    With return_ids=True each item is (images, labels, ids): ids an int64 tensor
    of the samples' indices in the dataset.

    Tensors are PyTorch tensors when PyTorch is installed, else numpy arrays
    (tensors="torch"/"numpy" forces one). Neither copies: they point at the
    loader's batch memory, which is handed back when the last tensor over it is
    freed. Keeping tensors is safe (the loader allocates more buffers; with
    device="cuda" at most ring_depth + 1 batches may be held at once).

    Rank and world size default to torchrun's $RANK and $WORLD_SIZE (else 0 of
    1); every rank reads a disjoint share and gets the same number of batches.
    With device="cuda" the batches land on the current CUDA device: call
    torch.cuda.set_device(LOCAL_RANK) before making the loader, as DDP scripts do.

    Options follow struct ps_options in pagestream.h: cache_size (bytes or
    "2G"; None: derived from the cgroup memory limit), order ("quasi_random",
    "random", "sequential"), transform ("random_resized_crop", "center_crop",
    "none"), crop, seed, drop_last, threads (None: all cores), ring_depth,
    device ("cpu", "cuda"), dtype ("uint8", "float16", "float32"), layout,
    endpoint / region (S3), direct (O_DIRECT), queue_depth, on_error ("fail",
    "skip"), start_epoch / start_batch (a position to start at), insecure,
    retries, timeout_ms, fault (fault injection spec, tests); the transform's
    resize (center crop: short side first), scale=(min, max) and
    ratio=(min, max) of random-resized-crop, flip, and mean / std (3 values on
    the 0..255 scale) of the float dtypes. Errors of the C
    library raise pagestream.Error; bad option values raise ValueError.
    """

    def __init__(self, url, batch_size=256, cache_size="2G", order="quasi_random", crop=224,
                 transform="random_resized_crop", seed=0, rank=None, world_size=None, drop_last=True,
                 threads=None, ring_depth=4, device="cpu", dtype="uint8", layout="NHWC", endpoint=None,
                 region=None, direct=False, queue_depth=None, on_error="fail", tensors="auto",
                 return_ids=False, start_epoch=0, start_batch=0, insecure=False, retries=None, timeout_ms=None,
                 fault=None, resize=None, scale=None, ratio=None, flip=None, mean=None, std=None):
        self._native = None
        lib = _lib.load()
        self._kind, self._mod = _backend(tensors)
        if rank is None:
            rank = _env_int("RANK")
            rank = 0 if rank is None else rank
        if world_size is None:
            world_size = _env_int("WORLD_SIZE")
            world_size = 1 if world_size is None else world_size
        self.local_rank = _env_int("LOCAL_RANK")
        if not (0 <= rank < world_size):
            raise ValueError("rank %d of world size %d: need 0 <= rank < world_size" % (rank, world_size))
        o = _lib.PsOptions()
        lib.ps_options_init(ctypes.byref(o))
        o.cache_size = _size(cache_size, "cache_size")
        o.batch_size = int(batch_size)
        o.order = _choice(order, _lib.ORDERS, "order")
        o.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        o.rank = int(rank)
        o.world_size = int(world_size)
        o.drop_last = 1 if drop_last else 0
        o.start_epoch = int(start_epoch)
        o.start_batch = int(start_batch)
        o.threads = 0 if threads is None else int(threads)
        o.ring_depth = int(ring_depth)
        o.queue_depth = 0 if queue_depth is None else int(queue_depth)
        o.direct = 1 if direct else 0
        o.insecure = 1 if insecure else 0
        if retries is not None:
            o.retries = int(retries)
        if timeout_ms is not None:
            o.timeout_ms = int(timeout_ms)
        # the C side copies these strings in ps_loader_open
        self._strings = [s.encode() if s is not None else None for s in (endpoint, region, fault)]
        o.endpoint, o.region, o.fault = self._strings
        o.transform = _choice(transform, _lib.TRANSFORMS, "transform")
        o.crop = int(crop)
        o.layout = _choice(layout, _lib.LAYOUTS, "layout")
        o.device = _choice(device, _lib.DEVICES, "device")
        o.dtype = _choice(dtype, _lib.DTYPES, "dtype")
        o.on_error = _choice(on_error, _lib.ON_ERROR, "on_error")
        if resize is not None:
            o.resize = int(resize)
        if scale is not None:
            o.scale_min, o.scale_max = (float(v) for v in scale)
        if ratio is not None:
            o.ratio_min, o.ratio_max = (float(v) for v in ratio)
        if flip is not None:
            o.flip = 1 if flip else 0
        for name, v in (("mean", mean), ("std", std)):
            if v is not None:
                if len(v) != 3:
                    raise ValueError("%s=%r: give 3 values (R, G, B on the 0..255 scale)" % (name, v))
                getattr(o, name)[:] = [float(x) for x in v]
        if o.device == _lib.DEVICES["cuda"] and self._kind != "torch":
            raise ImportError("pagestream: device='cuda' delivers PyTorch tensors: it needs PyTorch and "
                              "tensors='auto' or 'torch'")
        self._opts = o
        self.url = url
        self.device = device
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.rank, self.world_size = int(rank), int(world_size)
        self.order = order
        self.transform = transform
        self.ring_depth = int(ring_depth)
        self.return_ids = bool(return_ids)
        self._cuda_id = 0
        if o.device == _lib.DEVICES["cuda"] and self._mod.cuda.is_available():
            self._cuda_id = self._mod.cuda.current_device()

        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_lib.PS_ERRLEN)
        rc = lib.ps_loader_open(os.fsencode(url), ctypes.byref(o), ctypes.byref(handle), err)
        if rc < 0:
            msg = err.value.decode("utf-8", "replace") or _lib.strerror(rc)
            if rc == _lib.PS_ENOGPU:
                msg += " (use device='cpu')"
            raise Error(msg, rc)
        self._lib = lib
        self._native = _Native(lib, handle)
        self._nbatches = int(lib.ps_loader_epoch_batches(handle))

    # ---- iteration ----

    def __len__(self):
        return self._nbatches

    def __iter__(self):
        n = self._live()
        lib = self._lib
        bp = ctypes.POINTER(_lib.PsBatch)()
        ref = ctypes.byref(bp)
        first = True
        _, b0 = self.position()
        while True:
            self._check_held()
            rc = lib.ps_loader_next(n.handle, ref)
            if rc == _lib.PS_EPOCH_END:
                # An earlier loop that stopped right after the last batch left this
                # epoch's end marker unread: it belongs to that loop, not to this one.
                if first and b0 == 0 and self._nbatches > 0:
                    first = False
                    continue
                return
            if rc < 0:
                raise self._error(rc)
            first = False
            yield self._wrap(bp)
            n = self._live()

    def _check_held(self):
        n = self._native
        if self.device == "cuda" and n.outstanding > self.ring_depth:
            raise Error("device='cuda': %d batches are still held (tensors alive), and the GPU has buffers for "
                        "ring_depth + 1 = %d: free some tensors (or copy them) before asking for more, or "
                        "raise ring_depth" % (n.outstanding, self.ring_depth + 1), _lib.PS_ECONFIG)

    def _wrap(self, bp):
        b = bp.contents
        native = self._native
        with native.lock:
            native.outstanding += 1
        owner = _BatchRef(native, ctypes.addressof(b))
        n = int(b.n)
        labels_addr = ctypes.cast(b.labels, ctypes.c_void_p).value
        labels = self._tensor(labels_addr, (n,), "int64", owner, dlpack.kDLCPU)
        if self.return_ids:
            # ids are uint64 in C but below 2**32 (the format's limit): int64 views them exactly
            ids = self._tensor(ctypes.cast(b.ids, ctypes.c_void_p).value, (n,), "int64", owner, dlpack.kDLCPU)
        if self._opts.transform == 0:
            return (self._raw(b, n, owner), labels, ids) if self.return_ids else (self._raw(b, n, owner), labels)
        h, w, c = int(b.height), int(b.width), int(b.channels)
        shape = (n, c, h, w) if b.layout == 1 else (n, h, w, c)
        dt = ("uint8", "float16", "float32")[b.dtype]
        if b.device == 1:
            images = self._tensor(b.images, shape, dt, owner, dlpack.kDLCUDA, self._cuda_id)
            labels = labels.to(images.device, non_blocking=False)
        else:
            images = self._tensor(b.images, shape, dt, owner, dlpack.kDLCPU)
        return (images, labels, ids) if self.return_ids else (images, labels)

    def _tensor(self, addr, shape, dtype, owner, dev, dev_id=0):
        if self._kind == "torch":
            return self._mod.utils.dlpack.from_dlpack(dlpack.capsule(addr, shape, dtype, owner, dev, dev_id))
        return self._mod.from_dlpack(dlpack.Exporter(addr, shape, dtype, owner, dev, dev_id))

    @staticmethod
    def _raw(b, n, owner):
        if n == 0:
            return []
        ptrs = [b.data[i] or 0 for i in range(n)]
        sizes = [b.sizes[i] for i in range(n)]
        lo = min(ptrs)
        hi = max(p + s for p, s in zip(ptrs, sizes))
        # One buffer over the batch's byte arena; the slices keep it, and so the batch, alive.
        buf = (ctypes.c_uint8 * (hi - lo)).from_address(lo)
        buf._pagestream_batch = owner
        mv = memoryview(buf).cast("B").toreadonly()
        return [mv[p - lo:p - lo + s] for p, s in zip(ptrs, sizes)]

    # ---- position ----

    def position(self):
        """(epoch, batch) of the next batch the loader will deliver."""
        n = self._live()
        e, b = ctypes.c_uint64(), ctypes.c_uint64()
        self._lib.ps_loader_position(n.handle, ctypes.byref(e), ctypes.byref(b))
        return int(e.value), int(b.value)

    @property
    def epoch(self):
        """The epoch the next batch belongs to."""
        return self.position()[0]

    def set_epoch(self, epoch):
        """Make the next loop deliver @epoch (from its start, unless the loader is
        already inside that epoch, e.g. after load_state_dict)."""
        e, _ = self.position()
        if int(epoch) != e:
            self._seek(int(epoch), 0)

    def state_dict(self):
        """Where to resume: pass it to load_state_dict() of a loader made with the same options."""
        e, b = self.position()
        return {"epoch": e, "batch": b, "seed": self.seed, "batch_size": self.batch_size,
                "world_size": self.world_size, "order": self.order, "batches_per_epoch": self._nbatches}

    def load_state_dict(self, state):
        """Continue from a state_dict(): the batches that follow are those the saved run would have had."""
        for k in ("seed", "batch_size", "world_size", "order"):
            if k in state and state[k] != getattr(self, k):
                raise ValueError("load_state_dict: the state was saved with %s=%r, this loader has %s=%r; "
                                 "the batches would differ" % (k, state[k], k, getattr(self, k)))
        self._seek(int(state["epoch"]), int(state["batch"]))

    def _seek(self, epoch, batch):
        n = self._live()
        rc = self._lib.ps_loader_seek(n.handle, epoch, batch)
        if rc < 0:
            raise self._error(rc)

    # ---- information ----

    def stats(self):
        """The loader's counters (struct ps_stats) as a dict."""
        n = self._live()
        s = _lib.PsStats()
        self._lib.ps_loader_stats(n.handle, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in _lib.PsStats._fields_}

    @property
    def classes(self):
        """Class names indexed by label ([] when the dataset has no class table)."""
        n = self._live()
        out = []
        for i in range(self.stats()["nclasses"]):
            name = self._lib.ps_loader_class_name(n.handle, i)
            if name is None:
                return []
            out.append(name.decode("utf-8", "replace"))
        return out

    # ---- lifetime ----

    def close(self):
        """Stop the loader. Tensors still alive stay valid: the C loader is
        freed when the last of them is."""
        n, self._native = self._native, None
        if n is not None:
            n.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if not _exiting:
            self.close()

    def _live(self):
        n = self._native
        if n is None or n.handle is None:
            raise Error("the loader is closed", _lib.PS_ESTOPPED)
        return n

    def _error(self, rc):
        n = self._native
        msg = ""
        if n is not None and n.handle is not None:
            msg = (self._lib.ps_loader_errmsg(n.handle) or b"").decode("utf-8", "replace")
        return Error(msg or _lib.strerror(rc), rc)

    def __repr__(self):
        state = "closed" if self._native is None else "epoch %d batch %d" % self.position()
        return "<pagestream.Loader %s batch_size=%d rank=%d/%d %s>" % (
            self.url, self.batch_size, self.rank, self.world_size, state)
