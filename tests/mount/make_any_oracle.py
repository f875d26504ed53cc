#!/usr/bin/python3
"""Writes the oracle check_torch_any.py reads for a torch.save file written elsewhere
(../shared/fixtures/wild): SRC loaded by real torch, with any class the file names but
this process lacks replaced by a stand-in that keeps its state, then flattened by the
naming rule of docs/formats.md (dict keys and list positions joined with '.', an
object's state dict by key, numpy arrays of numeric dtypes in native byte order at any
protocol: verbatim at protocol >= 3, latin-1 text at 2). Writes OUT, torch.save of
{name: tensor}; uint32 arrays (np.random.get_state()'s key) as int64, since torch 1.13
has no uint32.

usage: make_any_oracle.py SRC OUT
"""

import argparse
import sys

import numpy as np
import torch


class StandIn:
    def __setstate__(self, state):
        self.__dict__.update(state if isinstance(state, dict) else {"state": state})


def Tolerate():
    """numpy 2 pickles name numpy._core, numpy 1.24 has numpy.core; a class of the
    writer's __main__ becomes a stand-in (module __getattr__, PEP 562)."""
    import numpy.core.multiarray
    sys.modules.setdefault("numpy._core", numpy.core)
    sys.modules.setdefault("numpy._core.multiarray", numpy.core.multiarray)
    cache = {}
    sys.modules["__main__"].__getattr__ = lambda name: cache.setdefault(
        name, type(name, (StandIn,), {}))


def Flatten(obj, prefix, out):
    join = lambda k: f"{prefix}.{k}" if prefix else str(k)
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            Flatten(v, join(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            Flatten(v, join(i), out)
    elif isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biuf" and (obj.dtype.isnative or obj.dtype.itemsize == 1):
            out[prefix] = torch.from_numpy(obj.astype(np.int64) if obj.dtype == np.uint32 else obj)
    elif isinstance(obj, (StandIn, argparse.Namespace)):
        Flatten(vars(obj), prefix, out)


def Main(argv):
    src, dst = argv
    Tolerate()
    obj = torch.load(src, weights_only=False)
    out = {}
    Flatten(obj, "", out)
    torch.save(out, dst)
    return 0


if __name__ == "__main__":
    sys.exit(Main(sys.argv[1:]))
