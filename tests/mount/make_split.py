#!/usr/bin/python3
"""Writes per-key split checkpoints with the real torch.save (docs/split.md).

  OUT/model/config.json
  OUT/model/pytorch_model/map.pt        torch.save(list of keys), in KEYS order
  OUT/model/pytorch_model/<name>.pt     torch.save(tensor) per key, <name> escaped here
                                        independently of ckptfs: '%' -> %25, '/' -> %2F,
                                        "map" -> %6Dap, over 255 bytes -> 200 bytes + '~' +
                                        FNV-1a 64 hex
  OUT/torch/pytorch_model.bin           torch.save(OrderedDict) of the same tensors, same
                                        order (clones: one storage each)

Keys cover f32, bf16, f16, i64, i32, bool, f64 scalar, an empty tensor, a key with '/' and
'%', the key "map", a key over 255 bytes, a Parameter, and a row of a larger tensor (whose
file holds the whole storage, as torch.save does).

With --no-slash the key with '/' is named "lm_head.proj%1" instead: HTTP and S3 sources
refuse file names that hold a '/' once percent-decoded (%2F), as a server might decode them.

usage: make_split.py OUT [--no-slash]
"""

import collections
import os
import sys

import torch


def Fnv1a64(data: bytes) -> int:
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def SplitFileName(key: str) -> str:
    stem = "%6Dap" if key == "map" else key.replace("%", "%25").replace("/", "%2F")
    raw = stem.encode("utf-8", "surrogateescape")
    if len(raw) + 3 > 255:
        raw = raw[:200] + b"~" + b"%016x" % Fnv1a64(key.encode("utf-8", "surrogateescape"))
    return os.fsdecode(raw + b".pt")


def Tensors(slash: bool):
    g = torch.Generator().manual_seed(14)
    big = torch.randn(4, 3, generator=g)
    out = collections.OrderedDict()
    out["model.layers.1.weight"] = torch.randn(4, 3, generator=g)
    out["model.layers.0.weight"] = torch.randn(3, 5, generator=g).to(torch.bfloat16)
    out["model.norm.weight"] = torch.randn(7, generator=g).to(torch.float16)
    out["lm_head/proj%1" if slash else "lm_head.proj%1"] = torch.randn(2, 2, generator=g)
    out["map"] = torch.arange(3, dtype=torch.int64)
    out["L" * 270 + ".weight"] = torch.randn(2, generator=g)
    out["pos_ids"] = torch.arange(5, dtype=torch.int32) * 7
    out["flag"] = torch.tensor([True, False, True, True])
    out["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    out["empty"] = torch.zeros(0, 3)
    out["param"] = torch.nn.Parameter(torch.randn(2, 2, generator=g), requires_grad=False)
    out["row"] = big[1]  # a view: its file holds all of big's storage
    return out


def main() -> int:
    out = sys.argv[1]
    tensors = Tensors(slash="--no-slash" not in sys.argv[2:])
    split = os.path.join(out, "model", "pytorch_model")
    os.makedirs(split)
    with open(os.path.join(out, "model", "config.json"), "w") as f:
        f.write('{"model_type": "split-test"}\n')
    torch.save(list(tensors), os.path.join(split, "map.pt"))
    for key, t in tensors.items():
        torch.save(t, os.path.join(split, SplitFileName(key)))
    os.makedirs(os.path.join(out, "torch"))
    plain = collections.OrderedDict((k, t.detach().clone()) for k, t in tensors.items())
    torch.save(plain, os.path.join(out, "torch", "pytorch_model.bin"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
