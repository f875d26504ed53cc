#!/usr/bin/python3
"""TorchInspect: `ckptfs inspect SRC` of a torch source exits 0 and names every tensor,
non-contiguous ones included; `--json` gives every tensor's dtype and shape and no
tensor the source lacks. Tensors are found in the JSON as check_inspect.py finds them;
dtypes may be spelled as safetensors (BF16) or torch (bfloat16, torch.bfloat16) does.

usage: check_torch_inspect.py CKPTFS SRC
"""

import json

from checklib import Checker, RunMain
from check_inspect import FindTensors, Run
from check_torch_lib import LoadAnySource, NormalizeDtype


def Main(args) -> int:
    ckptfs, src = args
    ck = Checker("torch inspect")
    source = LoadAnySource(src)
    text = Run(ck, [ckptfs, "inspect", src])
    if text is not None:
        for name in source.tensors:
            ck.Expect(name in text, f"inspect output does not name {name!r}")
    text = Run(ck, [ckptfs, "inspect", src, "--json"])
    if text is not None:
        try:
            found = []
            FindTensors(json.loads(text), found)
        except ValueError as e:
            ck.Fail(f"inspect --json is not valid JSON ({e}): {text[:300]!r}")
            return ck.Finish("")
        got = sorted((n, NormalizeDtype(d), list(s)) for n, d, s in found)
        want = sorted((t.name, t.dtype, t.shape) for t in source.tensors.values())
        ck.Equal(got, want, "inspect --json tensors (name, dtype, shape)")
    left_out = len(source.tensors) - len(source.contiguous)
    return ck.Finish(f"{len(source.tensors)} tensors ({left_out} non-contiguous)")


if __name__ == "__main__":
    RunMain(Main, "CKPTFS SRC")
