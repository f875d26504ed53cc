#!/usr/bin/python3
"""Xattrs: each per-tensor file carries user.ckptfs.dtype (e.g. b'BF16') and
user.ckptfs.shape (compact JSON array, e.g. b'[4,8]'), listed by listxattr, so tools
learn dtype and shape without reading data; other names give ENODATA.

usage: check_xattrs.py SRC MNT
"""

import errno
import json
import os

from checklib import Checker, LoadSource, RunMain, TensorPath

DTYPE_ATTR = "user.ckptfs.dtype"
SHAPE_ATTR = "user.ckptfs.shape"


def CheckTensor(ck: Checker, path: str, tensor) -> None:
    what = repr(tensor.name)
    ck.Equal(os.getxattr(path, DTYPE_ATTR), tensor.dtype.encode(), f"{what} {DTYPE_ATTR}")
    ck.Equal(os.getxattr(path, SHAPE_ATTR),
             json.dumps(tensor.shape, separators=(",", ":")).encode(), f"{what} {SHAPE_ATTR}")
    listed = set(os.listxattr(path))
    ck.Expect({DTYPE_ATTR, SHAPE_ATTR} <= listed, f"{what}: listxattr gives {sorted(listed)}")
    try:
        os.getxattr(path, "user.ckptfs.nonexistent")
        ck.Fail(f"{what}: getxattr of an unknown name succeeded")
    except OSError as e:
        ck.Equal(e.errno, errno.ENODATA, f"{what}: errno for an unknown xattr")


def Main(args) -> int:
    src, mnt = args
    ck = Checker("xattrs")
    source = LoadSource(src)
    for tensor in source.tensors.values():
        path = os.path.join(mnt, "tensors", TensorPath(tensor.name, tensor.dtype))
        if ck.Expect(os.path.isfile(path), f"{tensor.name!r}: no file {path}"):
            CheckTensor(ck, path, tensor)
    return ck.Finish(f"{len(source.tensors)} tensor files")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT")
