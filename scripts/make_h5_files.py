#!/usr/bin/python3
"""Writes the small HDF5 files h5_file_test (and the h5 fuzz seeds) read: one file per case,
as h5py writes them (Keras writes through h5py too). Usage: make_h5_files.py DIR."""
import os
import sys

import h5py
import numpy as np


def keras3(path):
    """A Keras 3 .weights.h5: layers/<name>/vars/<i> and optimizer/vars/0..13."""
    with h5py.File(path, "w") as f:
        f.create_group("layers")
        v = f.create_group("layers/dense/vars")
        v.attrs["name"] = "dense"
        v.create_dataset("0", data=np.arange(12, dtype="<f4").reshape(3, 4))
        v.create_dataset("1", data=np.arange(4, dtype="<f4"))
        o = f.create_group("optimizer/vars")
        o.attrs["name"] = "adam"
        o.create_dataset("0", data=np.int64(7))
        o.create_dataset("1", data=np.float32(0.001))
        for i in range(2, 14):
            o.create_dataset(str(i), data=np.full((3, 4) if i % 2 == 0 else (4,), i, "<f4"))


def attributes(path):
    with h5py.File(path, "w") as f:
        f.attrs["fixed"] = np.bytes_("abc")
        f.attrs["vlen"] = "hello"
        f.attrs["layer_names"] = np.array([b"dense", b"dense_1"])
        f.attrs["count"] = np.int32(-3)
        f.attrs["big"] = np.uint64(2**63)
        f.attrs["floats"] = np.array([0.5, 1.5], dtype="<f4")
        f.attrs["flag"] = True  # an enum: left out
        d = f.create_dataset("w", data=np.zeros(2, "<f8"))
        d.attrs["note"] = "on a dataset"


def types(path):
    with h5py.File(path, "w") as f:
        d = f.create_dataset("bf16", data=np.frombuffer(bytes(range(8)), dtype="V2"))
        d.attrs["dtype"] = "bfloat16"
        f.create_dataset("bool", data=np.array([True, False, True]))
        f.create_dataset("scalar", data=np.float32(2.5))
        f.create_dataset("empty", data=np.zeros((0,), "<f4"))
        f.create_dataset("i16", data=np.arange(3, dtype="<i2"))
        f.create_dataset("u8", data=np.arange(3, dtype="u1"))
        f.create_dataset("f16", data=np.arange(3, dtype="<f2"))
        f.create_dataset("big", data=np.arange(3, dtype=">f4"))
        f.create_dataset("text", data=np.array([b"ab", b"cd"]))
        f.create_dataset("null", data=h5py.Empty("<f4"))


def storage(path):
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=np.arange(8, dtype="<f4"), chunks=(2,))
        f.create_dataset("gzip", data=np.arange(8, dtype="<f4"), compression="gzip")
        f.create_dataset("shuffled", data=np.arange(8, dtype="<f4"), compression="gzip", shuffle=True)
        f.create_dataset("checksummed", data=np.arange(8, dtype="<f4"), fletcher32=True)
        f.create_dataset("lzf", data=np.arange(8, dtype="<f4"), compression="lzf")
        f.create_dataset("unwritten", shape=(4,), dtype="<f4")
        f.create_dataset("plain", data=np.arange(8, dtype="<f4"))
        f.create_dataset("external", shape=(8,), dtype="<f4", external=[("raw.bin", 0, 32)])
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4,))
        h5py.h5d.create(f.id, b"compact", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)


def soft(path):
    with h5py.File(path, "w") as f:
        f.create_dataset("layers/x0", data=np.arange(2, dtype="<f4"))
        f["layers/x"] = h5py.SoftLink("/layers/x0")


def external(path):
    other = os.path.join(os.path.dirname(path), "external_target.h5")
    with h5py.File(other, "w") as f:
        f.create_dataset("secret", data=np.arange(2, dtype="<f4"))
    with h5py.File(path, "w") as f:
        f["layers/ext"] = h5py.ExternalLink("external_target.h5", "/secret")


def hard(path):
    with h5py.File(path, "w") as f:
        d = f.create_dataset("a", data=np.arange(2, dtype="<f4"))
        f["b"] = d


def nested(path):
    with h5py.File(path, "w") as f:
        f.create_dataset("/".join("g%d" % i for i in range(10)) + "/d", data=np.arange(2, dtype="<f4"))


def main():
    out = sys.argv[1]
    for name, make in [("keras3", keras3), ("attributes", attributes), ("types", types),
                       ("storage", storage), ("soft", soft), ("external", external),
                       ("hard", hard), ("nested", nested)]:
        make(os.path.join(out, name + ".h5"))


if __name__ == "__main__":
    main()
