"""Minimal safetensors reader/writer with numpy only (docs/model.md §3: read dtype from each header).

File layout: u64 little-endian header length N, N bytes of JSON header, then the data
block. Header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}
(offsets relative to the start of the data block) plus an optional "__metadata__".

Readers return float64 for float tensors (the oracle does all math in float64) and the
stored integer type for integer tensors.
"""
import json
import mmap
import os
import struct

import numpy as np

# safetensors dtype name -> (numpy storage dtype, bytes per element)
_STORE = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # converted by bf16_to_f32 below
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
    "F8_E4M3": np.dtype("u1"),  # raw codes; tools/ref/awq_fp8_ref.py decodes them
}
_FLOAT = {"F64", "F32", "F16", "BF16"}


def bf16_to_f32(u16):
    """bfloat16 bits (uint16 array) -> float32: the 16 bits become the high half of an f32."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (what torch does). NaN kept quiet."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded = np.where(nan, 0x7FC0, rounded)
    return rounded.astype(np.uint16)


class SafetensorsFile:
    """One .safetensors file, mmap'd read-only. Tensors are decoded on request."""

    def __init__(self, path):
        self.path = path
        self._f = open(path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        if size < 8:
            raise ValueError(f"{path}: file too small for a safetensors header ({size} bytes)")
        (hlen,) = struct.unpack("<Q", self._f.read(8))
        if hlen > size - 8:
            raise ValueError(f"{path}: header length {hlen} exceeds file size {size}")
        self.header = json.loads(self._f.read(hlen).decode("utf-8"))
        self.metadata = self.header.pop("__metadata__", None)
        self.data_start = 8 + hlen
        self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None
        data_len = size - self.data_start
        for name, info in self.header.items():
            if info["dtype"] not in _STORE:
                raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
            b, e = info["data_offsets"]
            n = int(np.prod(info["shape"], dtype=np.int64))
            if e - b != n * _STORE[info["dtype"]].itemsize or e > data_len or b < 0:
                raise ValueError(f"{path}: tensor {name}: bad data_offsets {b},{e} for "
                                 f"{info['dtype']}{info['shape']}")

    def keys(self):
        return list(self.header.keys())

    def dtype(self, name):
        return self.header[name]["dtype"]

    def shape(self, name):
        return tuple(self.header[name]["shape"])

    def raw(self, name):
        """Zero-copy view of the stored elements (bf16 as uint16), shaped."""
        info = self.header[name]
        b, e = info["data_offsets"]
        st = _STORE[info["dtype"]]
        arr = np.frombuffer(self._mm, dtype=st, count=(e - b) // st.itemsize,
                            offset=self.data_start + b)
        return arr.reshape(info["shape"])

    def get(self, name, index=None):
        """Tensor as float64 (float dtypes) or its integer dtype. `index` (e.g. an expert number)
        slices the first axis before conversion so one expert of a fused tensor is cheap."""
        dt = self.header[name]["dtype"]
        r = self.raw(name)
        if index is not None:
            r = r[index]
        if dt == "BF16":
            return bf16_to_f32(r).astype(np.float64)
        if dt in _FLOAT:
            return r.astype(np.float64)
        return np.array(r)


class SafetensorsModel:
    """All tensors of a model directory: model.safetensors.index.json (any shard names) or a
    single model.safetensors, or else every *.safetensors file in the directory."""

    def __init__(self, model_dir):
        self.dir = model_dir
        index = os.path.join(model_dir, "model.safetensors.index.json")
        single = os.path.join(model_dir, "model.safetensors")
        self.files = {}
        self.where = {}
        if os.path.exists(index):
            with open(index) as f:
                wm = json.load(f)["weight_map"]
            for name, shard in wm.items():
                if shard not in self.files:
                    self.files[shard] = SafetensorsFile(os.path.join(model_dir, shard))
                if name not in self.files[shard].header:
                    raise ValueError(f"{index}: tensor {name} mapped to {shard} but not in it")
                self.where[name] = self.files[shard]
        else:
            paths = [single] if os.path.exists(single) else sorted(
                os.path.join(model_dir, p) for p in os.listdir(model_dir)
                if p.endswith(".safetensors"))
            if not paths:
                raise FileNotFoundError(f"{model_dir}: no model.safetensors.index.json and no "
                                        f"*.safetensors file")
            for p in paths:
                sf = SafetensorsFile(p)
                self.files[os.path.basename(p)] = sf
                for name in sf.keys():
                    if name in self.where:
                        raise ValueError(f"{p}: tensor {name} also in {self.where[name].path}")
                    self.where[name] = sf

    def __contains__(self, name):
        return name in self.where

    def keys(self):
        return list(self.where.keys())

    def shape(self, name):
        return self.where[name].shape(name)

    def dtype(self, name):
        return self.where[name].dtype(name)

    def get(self, name, index=None):
        if name not in self.where:
            raise KeyError(f"{self.dir}: missing tensor {name}")
        return self.where[name].get(name, index)


def write_safetensors(path, tensors, dtype="F32", dtypes=None, metadata=None):
    """Write {name: ndarray} as one safetensors file. `dtype` is the default stored dtype for
    float arrays (F32, F16, BF16, F64); `dtypes` overrides per name. Integer arrays keep theirs."""
    dtypes = dtypes or {}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype.kind == "f":
            dt = dtypes.get(name, dtype)
            if dt == "BF16":
                data = f32_to_bf16_bits(a.astype(np.float32)).tobytes()
            else:
                data = a.astype(_STORE[dt]).tobytes()
        elif dtypes.get(name) == "F8_E4M3" and a.dtype == np.uint8:  # raw e4m3 codes
            dt, data = "F8_E4M3", a.tobytes()
        else:
            dt = {np.dtype("int32"): "I32", np.dtype("int64"): "I64", np.dtype("int8"): "I8",
                  np.dtype("uint8"): "U8", np.dtype("int16"): "I16", np.dtype("bool"): "BOOL"}[a.dtype]
            data = a.astype(_STORE[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)  # pad so the data block is 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
