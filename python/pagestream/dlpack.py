"""DLPack (v0.6, the layout of Debian's /usr/include/dlpack/dlpack.h) from ctypes.

A DLManagedTensor is built over memory that somebody else owns (here: a
batch of the C loader). Its manager_ctx is a key into _LIVE, which keeps the
ctypes structures and the owner object alive until the consumer (PyTorch,
numpy) calls the deleter; dropping the owner is what gives the batch back.
"""
import ctypes
import itertools
import threading

kDLCPU = 1
kDLCUDA = 2
kDLInt = 0
kDLUInt = 1
kDLFloat = 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
]

# key -> (managed tensor, shape array, owner)
_LIVE = {}
_KEYS = itertools.count(1)
_shutdown = threading.Event()


def _deleter(mt):
    if _shutdown.is_set():
        return
    try:
        key = mt.contents.manager_ctx
    except (ValueError, AttributeError):  # NULL pointer
        return
    _LIVE.pop(key, None)


# The consumer may call it after every Python reference to it is gone, so it
# is made immortal below: its trampoline must outlive every tensor.
_DELETER_FN = DELETER(_deleter)

# Our own handle on the C API, so that the argtypes set here do not change
# ctypes.pythonapi for anybody else.
_api = ctypes.PyDLL(None)
_PyCapsule_New = _api.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# The destructor gets a capsule whose reference count is already 0: it must stay
# a raw pointer (a py_object would take and drop a reference and free it twice).
_PyCapsule_IsValid = _api.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_PyCapsule_GetPointer = _api.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_Py_IncRef = _api.Py_IncRef
_Py_IncRef.restype = None
_Py_IncRef.argtypes = [ctypes.py_object]

# The capsule keeps the name pointer: this buffer is made immortal.
_NAME = ctypes.create_string_buffer(b"dltensor")
_Py_IncRef(_NAME)
_Py_IncRef(_DELETER_FN)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _capsule_destructor(cap):
    # A capsule nobody consumed (its name is still "dltensor") still owns its tensor.
    if _shutdown.is_set() or not cap:
        return
    if _PyCapsule_IsValid(cap, _NAME):
        p = _PyCapsule_GetPointer(cap, _NAME)
        if p:
            _deleter(ctypes.cast(p, ctypes.POINTER(DLManagedTensor)))


_CAPSULE_DESTRUCTOR_FN = _CAPSULE_DESTRUCTOR(_capsule_destructor)
_Py_IncRef(_CAPSULE_DESTRUCTOR_FN)
_CAPSULE_DESTRUCTOR_PTR = ctypes.cast(_CAPSULE_DESTRUCTOR_FN, ctypes.c_void_p).value

DTYPES = {
    "uint8": (kDLUInt, 8, 1),
    "int64": (kDLInt, 64, 8),
    "uint64": (kDLUInt, 64, 8),
    "float16": (kDLFloat, 16, 2),
    "float32": (kDLFloat, 32, 4),
}


def capsule(data, shape, dtype, owner, device_type=kDLCPU, device_id=0):
    """A "dltensor" capsule over @data (an address) of a C-contiguous @shape.

    owner is kept alive until the consumer calls the deleter (or the capsule is
    freed unconsumed); it is never touched otherwise.
    """
    code, bits, _ = DTYPES[dtype]
    ndim = len(shape)
    shp = (ctypes.c_int64 * ndim)(*shape)
    mt = DLManagedTensor()
    t = mt.dl_tensor
    t.data = data
    t.device.device_type = device_type
    t.device.device_id = device_id
    t.ndim = ndim
    t.dtype.code = code
    t.dtype.bits = bits
    t.dtype.lanes = 1
    t.shape = shp
    t.strides = None  # compact row-major
    t.byte_offset = 0
    key = next(_KEYS)
    mt.manager_ctx = key
    mt.deleter = _DELETER_FN
    _LIVE[key] = (mt, shp, owner)
    try:
        return _PyCapsule_New(ctypes.addressof(mt), _NAME, _CAPSULE_DESTRUCTOR_PTR)
    except BaseException:
        _LIVE.pop(key, None)
        raise


class Exporter:
    """An object with __dlpack__ / __dlpack_device__ (what numpy.from_dlpack asks for)."""

    __slots__ = ("_args",)

    def __init__(self, data, shape, dtype, owner, device_type=kDLCPU, device_id=0):
        self._args = (data, shape, dtype, owner, device_type, device_id)

    def __dlpack__(self, stream=None):
        # The producer has finished writing (the loader waited for its copies), so
        # any consumer stream may read at once.
        return capsule(*self._args)

    def __dlpack_device__(self):
        return (self._args[4], self._args[5])


def live_count():
    """Tensors handed out and not yet deleted (tests)."""
    return len(_LIVE)


def shutdown():
    """At interpreter exit: deleters become no-ops (the process is ending)."""
    _shutdown.set()
