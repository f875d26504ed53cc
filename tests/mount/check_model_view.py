#!/usr/bin/python3
"""ModelView: the merged files of a mounted training checkpoint hold the model, as
README's torch rule says, and a real torch.nn module takes them as they are.

- SRC (the torch file) is loaded by real torch as the oracle; the model is SRC[KEY]
  (a dict of tensors, or a list: items named 0, 1, ...), KEY given by the test (the key
  the rule picks, or the mount's --model-key).
- pytorch_model.bin: torch.load(weights_only=True) gives exactly the model's names, with
  the key stripped, and its tensors bit for bit; with --module, a fresh module of that
  class (from scripts/make_torch_checkpoint.py) takes it with load_state_dict(strict=True).
- model.safetensors, parsed by hand (no safetensors package) and validated by the
  reference rules: the same names and bytes; the module takes it too, strict.
- tensors/ still holds everything: each --tensor PATH (under tensors/) exists.

usage: check_model_view.py SRC MNT --key KEY [--module TinyNet|LitNet] [--tensor PATH]...
"""

import argparse
import os
import sys

from checklib import Checker, ParseSafetensors, ReadFile, RunMain, Validate

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))

import torch  # noqa: E402

import make_torch_checkpoint  # noqa: E402

ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
             "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32}


def Flatten(value, prefix: str, out: dict) -> None:
    """torch's names for the tensors inside `value`, as ckptfs names them."""
    if isinstance(value, torch.Tensor):
        out[prefix] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            Flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            Flatten(v, f"{prefix}.{i}" if prefix else str(i), out)


def Bits(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def CheckState(ck: Checker, what: str, got: dict, want: dict) -> None:
    ck.Equal(sorted(got), sorted(want), f"{what}: tensor names")
    for name, t in want.items():
        g = got.get(name)
        if g is None:
            continue
        ck.Equal((g.dtype, list(g.shape)), (t.dtype, list(t.shape)), f"{what} {name!r}")
        ck.Expect(Bits(g) == Bits(t), f"{what} {name!r}: bytes differ from SRC")


def LoadInto(ck: Checker, what: str, module_name: str, state: dict, want: dict) -> None:
    module = getattr(make_torch_checkpoint, module_name)()
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        ck.Fail(f"{module_name}.load_state_dict({what}, strict=True): {e}")
        return
    for name, t in module.state_dict().items():
        ck.Expect(torch.equal(t, want[name]), f"{module_name} from {what}: {name} differs")


def SafetensorsState(ck: Checker, path: str) -> dict:
    data = ReadFile(path)
    st = ParseSafetensors(data, "model.safetensors")
    Validate(st, len(data), "model.safetensors", ck)
    state = {}
    for name, e in st.entries.items():
        raw = bytearray(data[st.data_start + e.begin:st.data_start + e.end])
        dtype = ST_DTYPES.get(e.dtype)
        if not ck.Expect(dtype is not None, f"model.safetensors {name!r}: dtype {e.dtype}"):
            continue
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        state[name] = t.reshape(e.shape)
    return state


def Main(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("mnt")
    p.add_argument("--key", required=True)
    p.add_argument("--module")
    p.add_argument("--tensor", action="append", default=[])
    args = p.parse_args(argv)
    ck = Checker("model view")
    src = torch.load(args.src, map_location="cpu", weights_only=False)
    want = {}
    Flatten(src[args.key], "", want)
    ck.Expect(len(want) > 0, f"SRC[{args.key!r}] holds no tensor")

    bin_state = torch.load(os.path.join(args.mnt, "pytorch_model.bin"), weights_only=True)
    CheckState(ck, "pytorch_model.bin", bin_state, want)
    st_state = SafetensorsState(ck, os.path.join(args.mnt, "model.safetensors"))
    CheckState(ck, "model.safetensors", st_state, want)
    if args.module:
        LoadInto(ck, "pytorch_model.bin", args.module, bin_state, want)
        LoadInto(ck, "model.safetensors", args.module, st_state, want)
    for path in args.tensor:
        ck.Expect(os.path.isfile(os.path.join(args.mnt, "tensors", path)),
                  f"tensors/{path}: missing (tensors/ holds everything)")
    return ck.Finish(f"{len(want)} tensors of {args.key!r}"
                     + (f" load into {args.module}" if args.module else ""))


if __name__ == "__main__":
    RunMain(Main, "SRC MNT --key KEY [--module CLASS] [--tensor PATH]...")
