"""Shared helpers of the torch mount checks (check_torch_*.py).

The oracle is the source checkpoint itself, loaded by real torch (Debian's
python3-torch): every expected tensor, name, storage and non-tensor value is what
torch.load of the SOURCE files gives, flattened the way ckptfs promises (nested dict keys
and list indices joined with '.'). A safetensors source is parsed by checklib instead,
independently of ckptfs. Nothing here comes from ckptfs or the generators.

SRC may be what was mounted or a plain twin of it (the zstd tests pass the plain
checkpoint); weight files present only as NAME.zst are decoded with the zstd command.
"""

import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from checklib import LoadSource, ReadWeight

# torch dtypes and their safetensors names.
ST_OF_TORCH = {
    torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32",
    torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
    torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
TORCH_OF_ST = {v: k for k, v in ST_OF_TORCH.items()}

# Spellings of dtypes a tool might print, normalized to safetensors names.
DTYPE_ALIASES = {
    "bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32", "float": "F32",
    "float64": "F64", "double": "F64", "int64": "I64", "long": "I64", "int32": "I32",
    "int": "I32", "int16": "I16", "short": "I16", "int8": "I8", "char": "I8",
    "uint8": "U8", "byte": "U8", "bool": "BOOL",
}

TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
TORCH_INDEX = "pytorch_model.bin.index.json"


def NormalizeDtype(text: str) -> str:
    t = str(text).strip()
    low = t.lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(low, t.upper())


def IntView(t: torch.Tensor) -> torch.Tensor:
    """The elements in logical order as same-size integers: NaN bit patterns compare."""
    flat = t.detach().contiguous().reshape(-1)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return flat.view(ints[flat.element_size()])


def TensorBytes(t: torch.Tensor) -> bytes:
    return IntView(t).numpy().tobytes()


@dataclass
class SrcTensor:
    name: str
    dtype: str                       # safetensors name
    shape: List[int]
    file: str                        # basename of the weight file holding it
    tensor: Optional[torch.Tensor]   # None for dtypes torch 1.13 lacks
    raw: Optional[bytes] = None      # safetensors sources: the bytes, in file order
    # Identifies the storage (file, data pointer); None for a torch tensor whose storage
    # is empty (every empty storage may share one pointer) and for safetensors sources.
    storage: Optional[Tuple[str, int]] = None

    @property
    def contiguous(self) -> bool:
        return self.tensor is None or self.tensor.is_contiguous()

    def Bytes(self) -> bytes:
        return self.raw if self.raw is not None else TensorBytes(self.tensor)


REMOVED = object()  # a tensor's place in the metadata mirror


@dataclass
class SrcCheckpoint:
    kind: str                        # "torch" or "safetensors"
    weight_files: List[str]          # absolute paths (their NAME, even if only NAME.zst exists)
    index_file: Optional[str]
    non_weight_files: List[str] = field(default_factory=list)
    tensors: Dict[str, SrcTensor] = field(default_factory=dict)
    metadata: Any = None             # what /.ckptfs/metadata.json should hold

    @property
    def contiguous(self) -> Dict[str, SrcTensor]:
        return {n: t for n, t in self.tensors.items() if t.contiguous}


def JoinName(prefix: str, key: str) -> str:
    return key if prefix == "" else f"{prefix}.{key}"


def Flatten(obj, prefix: str, out: List[Tuple[str, torch.Tensor]]):
    """Appends (dotted name, tensor) for every tensor in obj to `out`; returns the
    JSON mirror of obj with tensors left out (REMOVED for a tensor itself): dicts keep
    their other keys (int keys as decimal strings), lists and tuples become lists of
    their other items."""
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
        return REMOVED
    if isinstance(obj, dict):
        mirror = {}
        for k, v in obj.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise ValueError(f"{prefix!r}: key {k!r} is neither str nor int")
            key = str(k)
            m = Flatten(v, JoinName(prefix, key), out)
            if m is not REMOVED:
                mirror[key] = m
        return mirror
    if isinstance(obj, (list, tuple)):
        mirror = []
        for i, v in enumerate(obj):
            m = Flatten(v, JoinName(prefix, str(i)), out)
            if m is not REMOVED:
                mirror.append(m)
        return mirror
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise ValueError(f"{prefix!r}: {type(obj).__name__} in a test checkpoint")


def Prune(value):
    """value without empty dicts and lists (REMOVED if nothing is left): whether a
    container that held only tensors shows up as {} / [] or not at all is ckptfs's
    choice, so comparisons are made on pruned values."""
    if isinstance(value, dict):
        out = {k: p for k, p in ((k, Prune(v)) for k, v in value.items()) if p is not REMOVED}
        return out if out else REMOVED
    if isinstance(value, list):
        out = [p for p in (Prune(v) for v in value) if p is not REMOVED]
        return out if out else REMOVED
    return value


def LoadTorch(path: str):
    """torch.load of a weight file of ours (trusted: weights_only=False, because torch
    1.13's weights_only loader cannot read floats); NAME.zst if NAME is absent."""
    if os.path.exists(path):
        return torch.load(path, map_location="cpu", weights_only=False)
    return torch.load(io.BytesIO(ReadWeight(path)), map_location="cpu", weights_only=False)


def IsTorchWeight(name: str) -> bool:
    base = name[:-4] if name.endswith(".zst") else name
    return base.endswith(TORCH_SUFFIXES)


def IsSafetensorsSource(src: str) -> bool:
    if os.path.isfile(src):
        return src.endswith((".safetensors", ".safetensors.zst"))
    return any(n.endswith((".safetensors", ".safetensors.zst", ".safetensors.index.json"))
               for n in os.listdir(src))


def LoadAnySource(src: str) -> SrcCheckpoint:
    src = os.path.abspath(src)
    return LoadSafetensorsSource(src) if IsSafetensorsSource(src) else LoadTorchSource(src)


def LoadTorchSource(src: str) -> SrcCheckpoint:
    """A torch checkpoint as ckptfs takes it: a directory with pytorch_model.bin.index.json
    and its shards, or with one *.bin / *.pt / *.pth, or the path of one torch file."""
    if os.path.isfile(src):
        ck = SrcCheckpoint("torch", [src], None)
    else:
        names = sorted(os.listdir(src))
        if TORCH_INDEX in names:
            with open(os.path.join(src, TORCH_INDEX)) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            ck = SrcCheckpoint("torch", [os.path.join(src, s) for s in shards],
                               os.path.join(src, TORCH_INDEX))
        else:
            singles = sorted({n[:-4] if n.endswith(".zst") else n for n in names
                              if IsTorchWeight(n)})
            if len(singles) != 1:
                raise ValueError(f"{src}: expected one torch file, found {singles}")
            ck = SrcCheckpoint("torch", [os.path.join(src, singles[0])], None)
        taken = set(ck.weight_files) | {p + ".zst" for p in ck.weight_files} | {ck.index_file}
        ck.non_weight_files = [os.path.join(src, n) for n in names
                               if os.path.join(src, n) not in taken
                               and os.path.isfile(os.path.join(src, n))]
    mirror = {}
    for path in ck.weight_files:
        found: List[Tuple[str, torch.Tensor]] = []
        m = Flatten(LoadTorch(path), "", found)
        if isinstance(m, dict):
            mirror.update(m)
        base = os.path.basename(path)
        for name, t in found:
            if name in ck.tensors:
                raise ValueError(f"source: {name!r} in two files")
            storage = t.storage()
            key = (base, storage.data_ptr()) if storage.nbytes() > 0 else None
            ck.tensors[name] = SrcTensor(name, ST_OF_TORCH[t.dtype], list(t.shape), base, t,
                                         storage=key)
    ck.metadata = mirror
    return ck


def LoadSafetensorsSource(src: str) -> SrcCheckpoint:
    source = LoadSource(src)
    ck = SrcCheckpoint("safetensors", source.weight_files, source.index_file,
                       source.non_weight_files)
    for name, t in source.tensors.items():
        raw = t.Read()
        tensor = None
        if t.dtype in TORCH_OF_ST:
            dtype = TORCH_OF_ST[t.dtype]
            tensor = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else \
                torch.empty(0, dtype=dtype)
            tensor = tensor.reshape(t.shape)
        ck.tensors[name] = SrcTensor(name, t.dtype, list(t.shape),
                                     os.path.basename(t.path), tensor, raw=raw)
    ck.metadata = {"__metadata__": source.metadata}
    return ck
