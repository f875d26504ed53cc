#!/usr/bin/python3
"""TorchInspect: `ckptfs inspect SRC` of a torch source exits 0 and names every tensor,
non-contiguous ones included; `--json` gives every tensor's dtype and shape and no
tensor the source lacks. Tensors are found in the JSON as check_inspect.py finds them;
dtypes may be spelled as safetensors (BF16) or torch (bfloat16, torch.bfloat16) does.

usage: check_torch_inspect.py CKPTFS SRC
"""

from checklib import Checker, RunMain
from check_inspect import CheckInspect
from check_torch_lib import LoadAnySource, NormalizeDtype


def Main(args) -> int:
    ckptfs, src = args
    ck = Checker("torch inspect")
    source = LoadAnySource(src)
    CheckInspect(ck, ckptfs, src, source, NormalizeDtype)
    left_out = len(source.tensors) - len(source.contiguous)
    return ck.Finish(f"{len(source.tensors)} tensors ({left_out} non-contiguous)")


if __name__ == "__main__":
    RunMain(Main, "CKPTFS SRC")
