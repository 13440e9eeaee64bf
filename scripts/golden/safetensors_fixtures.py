#!/usr/bin/python3
"""Independent safetensors fixtures for ropelab's reader and writer tests.

Written from the format's documentation (an 8-byte little-endian header length, a JSON header
of {name: {dtype, shape, data_offsets}} plus an optional "__metadata__" object of strings, then
the raw little-endian bytes), not from the C++ code. PyTorch (Debian's python3-torch) supplies
the F16 and BF16 encodings. The `safetensors` Python package is not in Debian; where it is
installed, `--check-with-safetensors` also loads every fixture with it.

    /usr/bin/python3 scripts/golden/safetensors_fixtures.py write tests/data/safetensors
        writes single.safetensors (every dtype ropelab reads, metadata, a 0-size tensor),
        sharded/ (two shards and model.safetensors.index.json) and expected.json (each
        tensor's dtype, shape and values as numbers)
    /usr/bin/python3 scripts/golden/safetensors_fixtures.py read FILE
        prints {name: [dtype, shape, sum of values]} of a file as JSON (the C++ writer's check)
"""
import json
import os
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
          "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def write(path, tensors, metadata=None):
    """tensors: [(name, dtype name, tensor)] in data order; the header keys in reverse order."""
    header, blobs, at = {}, [], 0
    for name, dt, t in tensors:
        b = raw_bytes(t.to(DTYPES[dt]))
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(dict(reversed(list(header.items())))).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = DTYPES[e["dtype"]]
        buf = bytearray(data[base + b:base + end])
        if dt in (torch.float16, torch.bfloat16):
            t = torch.frombuffer(buf, dtype=torch.int16).view(dt) if buf else torch.zeros(0, dtype=dt)
        else:
            t = torch.frombuffer(buf, dtype=dt) if buf else torch.zeros(0, dtype=dt)
        out[name] = (e["dtype"], e["shape"], t.reshape(e["shape"]))
    return out


def main():
    if sys.argv[1] == "read":
        print(json.dumps({k: [dt, shape, float(t.double().sum())]
                          for k, (dt, shape, t) in read(sys.argv[2]).items()}))
        return
    out = sys.argv[2]
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)
    g = torch.Generator().manual_seed(7)
    tensors = [
        ("embed.weight", "F32", torch.randn(5, 4, generator=g)),
        ("layer.0.q.weight", "BF16", torch.randn(4, 4, generator=g)),
        ("layer.0.q.bias", "F16", torch.randn(4, generator=g)),
        ("pos.inv_freq", "F64", torch.tensor([1.0, 0.01, 1e-4])),
        ("position_ids", "I64", torch.arange(6).reshape(1, 6) - 2),
        ("token_type", "I32", torch.tensor([0, 1, -7])),
        ("small", "I16", torch.tensor([-300, 300])),
        ("tiny", "I8", torch.tensor([-5, 5])),
        ("bytes", "U8", torch.tensor([0, 255, 7])),
        ("mask", "BOOL", torch.tensor([True, False, True])),
        ("empty", "F32", torch.zeros(0, 3)),
        ("scalar", "F32", torch.tensor(2.5)),
    ]
    write(os.path.join(out, "single.safetensors"), tensors,
          {"format": "pt", "note": "ropelab fixture \u00e9"})
    shard1, shard2 = tensors[:3], tensors[3:6]
    write(os.path.join(out, "sharded", "model-00001-of-00002.safetensors"), shard1,
          {"format": "pt"})
    write(os.path.join(out, "sharded", "model-00002-of-00002.safetensors"), shard2)
    index = {"metadata": {"total_size": 0},
             "weight_map": {**{n: "model-00001-of-00002.safetensors" for n, _, _ in shard1},
                            **{n: "model-00002-of-00002.safetensors" for n, _, _ in shard2}}}
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    expected = {}
    for name, (dt, shape, t) in read(os.path.join(out, "single.safetensors")).items():
        vals = t.reshape(-1)
        vals = vals.double().tolist() if dt not in ("I64", "BOOL") else \
            [int(v) for v in vals.tolist()]
        expected[name] = {"dtype": dt, "shape": shape, "values": vals}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    if "--check-with-safetensors" in sys.argv:
        from safetensors.torch import load_file  # noqa: E402
        ref = load_file(os.path.join(out, "single.safetensors"))
        for name, e in expected.items():
            assert list(ref[name].shape) == e["shape"], name
    print(f"wrote {out}/single.safetensors, {out}/sharded/, {out}/expected.json")


if __name__ == "__main__":
    main()
