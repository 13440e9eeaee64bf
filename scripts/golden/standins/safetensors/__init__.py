"""Stand-in for the `safetensors` package where its Rust binding cannot be installed (no PyPI):
the reading half of its Python API, as transformers calls it to load a checkpoint. For the
parity checks of scripts/golden/transformers_offline.sh only; ropelab never uses it."""
import json
import struct

import torch as _torch  # not `torch`: importing safetensors.torch rebinds that name here

__version__ = "stand-in"  # transformers checks the dist-info that the script writes
__ropelab_standin__ = True
_DTYPES = {"F64": _torch.float64, "F32": _torch.float32, "F16": _torch.float16,
           "BF16": _torch.bfloat16, "I64": _torch.int64, "I32": _torch.int32,
           "I16": _torch.int16, "I8": _torch.int8, "U8": _torch.uint8, "BOOL": _torch.bool}


class SafetensorError(Exception):
    pass


class _Slice:
    def __init__(self, t):
        self._t = t

    def get_shape(self):
        return list(self._t.shape)

    def get_dtype(self):
        return next(k for k, v in _DTYPES.items() if v == self._t.dtype)

    def __getitem__(self, index):
        return self._t[index]


def _parse(raw):
    """(tensors by name, metadata) of a whole safetensors file's bytes."""
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        data = bytearray(raw[8 + n + begin:8 + n + end])
        dtype = _DTYPES[info["dtype"]]
        t = _torch.frombuffer(data, dtype=dtype) if data else _torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"])
    return tensors, metadata


class safe_open:  # noqa: N801 (the package's own name)
    """The whole file is read at once (the checks' checkpoints are small)."""

    def __init__(self, path, framework="pt", device="cpu", **options):  # backend=...: ignored
        with open(path, "rb") as f:
            self._tensors, self._metadata = _parse(f.read())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._tensors)

    def metadata(self):
        return self._metadata

    def get_tensor(self, name):
        return self._tensors[name]

    def get_slice(self, name):
        return _Slice(self._tensors[name])
