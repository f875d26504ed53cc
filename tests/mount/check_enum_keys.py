#!/usr/bin/python3
"""A torch.save dict keyed by enum members (issue 38, item 3).

write DIR: DIR/pytorch_model.bin, torch.save of {Phase.TRAIN: t, 'w': t, Level.HI: t
  (an IntEnum), Split.VAL: t (a str-mixin Enum), 'sub': {Phase.EVAL: t}, ByValue.ONE: t,
  ByText.TWO: t}. This Python (3.11.2 on Debian 12) pickles a member as
  getattr(Phase, 'TRAIN'); ByValue and ByText pickle as other Pythons do, Cls(value).
check DIR MNT: the merged pytorch_model.bin, loaded with torch.load, holds each tensor
  under the name docs/formats.md gives its key (Phase.TRAIN, Level.HI, Split.VAL,
  sub.Phase.EVAL, ByValue(1), ByText('two'), w), values equal; tensors/NAME.npy (numpy,
  plain and mmap) too.
"""

import enum
import os

import numpy as np

from checklib import Checker, RunMain


class Phase(enum.Enum):
    TRAIN = 1
    EVAL = 2


class Level(enum.IntEnum):
    HI = 7


class Split(str, enum.Enum):
    VAL = "val"


class ByValue(enum.Enum):
    ONE = 1

    def __reduce_ex__(self, protocol):  # as Python 3.10 and 3.12 pickle a member
        return self.__class__, (self._value_,)


class ByText(str, enum.Enum):
    TWO = "two"

    def __reduce_ex__(self, protocol):
        return self.__class__, (self._value_,)


def Tensors():
    import torch
    g = torch.Generator().manual_seed(38)
    return {name: torch.randn(3, 4, generator=g) for name in
            ("Phase.TRAIN", "w", "Level.HI", "Split.VAL", "sub.Phase.EVAL", "ByValue(1)",
             "ByText('two')")}


def Write(directory: str) -> None:
    import torch
    t = Tensors()
    state = {Phase.TRAIN: t["Phase.TRAIN"], "w": t["w"], Level.HI: t["Level.HI"],
             Split.VAL: t["Split.VAL"], "sub": {Phase.EVAL: t["sub.Phase.EVAL"]},
             ByValue.ONE: t["ByValue(1)"], ByText.TWO: t["ByText('two')"]}
    torch.save(state, os.path.join(directory, "pytorch_model.bin"))


def Check(src: str, mnt: str) -> int:
    import torch
    ck = Checker("enum keys")
    want = Tensors()
    merged = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=False)
    ck.Equal(sorted(merged), sorted(want), "pytorch_model.bin keys")
    for name, t in want.items():
        if name in merged:
            ck.Expect(torch.equal(merged[name], t), f"pytorch_model.bin[{name!r}]: values differ")
        path = os.path.join(mnt, "tensors", *name.split(".")) + ".npy"
        if not ck.Expect(os.path.isfile(path), f"{name!r}: no {path}"):
            continue
        for mode in (None, "r"):
            arr = np.load(path, mmap_mode=mode, allow_pickle=False)
            ck.Expect(np.array_equal(np.asarray(arr), t.numpy()),
                      f"{path} (mmap_mode={mode!r}): values differ")
            del arr
    return ck.Finish(f"{len(want)} tensors under enum and string keys")


def Main(args) -> int:
    if args[0] == "write":
        Write(args[1])
        return 0
    return Check(args[1], args[2])


if __name__ == "__main__":
    RunMain(Main, "write DIR | check DIR MNT")
