#!/usr/bin/python3
"""Writes PyTorch (torch.save) checkpoints for ckptfs tests and demos.

    make_torch_checkpoint.py KIND OUT_DIR [--seed S] [--verbose]
    make_torch_checkpoint.py zst OUT_DIR --from PLAIN_DIR [--compress single|seekable|multiframe]
                             [--frame-size SIZE] [--level N]

Kinds (every file is written by the real torch.save of Debian's python3-torch, in the
zip format of PyTorch >= 1.6, unless said otherwise):
  sharded      transformers-like: pytorch_model-0000K-of-00003.bin shards (contiguous
               runs of layers), pytorch_model.bin.index.json, config.json and
               generation_config.json; a small llama-like model, about 8 MB.
  single       one pytorch_model.bin (a smaller llama-like model) and config.json.
  train_state  train_state.pt: {'epoch', 'loss', 'model_state_dict',
               'optimizer_state_dict' (torch.optim.Adam after one step), ...}: nested
               dicts, int keys, lists of tensors, a Parameter, and non-tensor values of
               every JSON-able kind (None, bools, tuples, big ints, unicode, floats).
  lightning    epoch=3-step=100.ckpt, a PyTorch Lightning checkpoint's real key layout
               (epoch, global_step, pytorch-lightning_version, state_dict, loops,
               callbacks with ModelCheckpoint's state, optimizer_states with Adam's
               state after one step, lr_schedulers, hparams_name, hyper_parameters)
               written by torch.save; state_dict is a LitNet's: its TinyNet under
               `model.` and a `head`.
  tied         pytorch_model.bin where two names are the same tensor (one storage).
  dtypes       pytorch_model.bin with every dtype ckptfs takes from torch (bf16, f16,
               f32, f64, int64, int32, int16, int8, uint8, bool) holding every bit
               pattern; scalars, zero-size tensors, and one tensor over 1 MiB.
  views        pytorch_model.bin of tensors that are slices at an offset into a bigger
               storage, views sharing one storage, and non-contiguous tensors
               (transposed, strided, expanded with stride 0).
  hostile      one subdirectory per case of HOSTILE_CASES, each a checkpoint broken in
               exactly one way, made from a real torch.save file by rewriting its zip
               (aligned, stored records, like torch's) or truncating it; and
               cases.json: {case: {"source": subdirectory, "file": the file a refusal
               must name, "reasons": [substrings, one of which it must contain (any
               case)], "marker": a path the pickle tries to create, or null}}. Markers
               live in OUT_DIR/markers/ (created, empty), so a payload that ran would
               leave its file there.
  any_values   any_values.pt (torch.save's default protocol 2) and any_values_p4.pt
               (pickle_protocol=4) of what training code saves beyond tensors (issue 23,
               item 1): 'args' an argparse.Namespace holding a pathlib.Path and a set,
               'loss' a numpy float64, 'arr' a numpy float32 array, 'rng' {'python':
               random.getstate(), 'numpy': np.random.get_state(), 'torch':
               torch.random.get_rng_state()}, 'extra' an instance of a class defined
               here (ckptfs must not need it) holding a tensor in its state, 'c' a
               complex64 tensor and 'model' a small state dict. oracle/ holds what a
               mount must show, for readers without that class: tensors_p2.pt /
               tensors_p4.pt (torch.save of {name in tensors/: tensor}, weights only)
               and metadata.json (the opaque forms .ckptfs/metadata.json must hold).
  zst          a copy of the checkpoint in --from PLAIN_DIR whose weight files NAME are
               replaced by NAME.zst (make_checkpoint.py's compressors: single is what
               the zstd command writes, seekable has a seek table); everything else is
               copied unchanged.

Tests treat the source files, loaded by real torch, as the oracle; nothing else is
written. Data is deterministic for a given seed. Each kind checks what it wrote with
torch.load(weights_only=True) before returning (the hostile kind checks that its zip
writer, given the records unchanged, writes a file torch loads).
"""

import argparse
import collections
import io
import json
import os
import pickle
import shutil
import struct
import sys
import zipfile
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_checkpoint  # noqa: E402  pylint: disable=wrong-import-position

KINDS = ("sharded", "single", "train_state", "lightning", "tied", "dtypes", "views", "hostile",
         "any_values", "zst")

# The dtypes ckptfs reads from torch files, with safetensors names.
DTYPES = {
    "bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
    "f64": torch.float64, "i64": torch.int64, "i32": torch.int32, "i16": torch.int16,
    "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool,
}

# The unsigned numpy type of each element size: random bit patterns are drawn as these.
UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
INT_OF_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}

NON_WEIGHT_FILES = ("config.json", "generation_config.json")
RECORD_ALIGNMENT = 64  # torch.save aligns each record's data to 64 bytes


class UsageError(Exception):
    """Bad command line or input; reported on one line with exit code 2."""


# ---------------------------------------------------------------------------
# Data

def RandomBits(rng: np.random.Generator, dtype: torch.dtype, shape: List[int]) -> torch.Tensor:
    """Every bit pattern (NaNs, denormals...), so byte comparisons catch any change;
    bool stays 0/1, the only values torch and numpy treat as booleans."""
    size = torch.empty((), dtype=dtype).element_size()
    n = int(np.prod(shape, dtype=np.int64))
    raw = rng.integers(0, 256, size=n * size, dtype=np.uint8)
    if dtype == torch.bool:
        return torch.from_numpy((raw & 1).astype(np.bool_)).reshape(shape)
    signed = raw.view(INT_OF_SIZE[size])  # torch has no uint16..64: go through signed
    t = torch.from_numpy(signed.copy()).view(dtype) if size > 1 else torch.from_numpy(
        raw.copy()).view(dtype)
    return t.reshape(shape)


def WeightLike(gen: torch.Generator, shape: List[int], dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * 0.02).to(dtype)


def Generator(seed: int, salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1000003 + salt)


# ---------------------------------------------------------------------------
# Writing and checking

def Save(obj, path: str, weights_only: bool = True) -> None:
    torch.save(obj, path)
    CheckRoundTrip(obj, path, weights_only)


def CheckRoundTrip(obj, path: str, weights_only: bool = True) -> None:
    """The file loads (with the weights_only loader unless told otherwise) and gives back
    `obj`: a generator bug must not become a test failure blamed on ckptfs."""
    loaded = torch.load(path, map_location="cpu", weights_only=weights_only)
    Same(obj, loaded, os.path.basename(path))


def Same(want, got, where: str) -> None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or want.dtype != got.dtype \
                or want.shape != got.shape or want.stride() != got.stride() \
                or want.storage_offset() != got.storage_offset() \
                or not torch.equal(BitView(want), BitView(got)):
            raise AssertionError(f"{where}: round trip changed the tensor")
    elif isinstance(want, dict):
        if list(want) != list(got):
            raise AssertionError(f"{where}: round trip changed the keys")
        for k in want:
            Same(want[k], got[k], f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        if type(want) is not type(got) or len(want) != len(got):
            raise AssertionError(f"{where}: round trip changed a {type(want).__name__}")
        for i, (a, b) in enumerate(zip(want, got)):
            Same(a, b, f"{where}.{i}")
    elif want != got or type(want) is not type(got):
        raise AssertionError(f"{where}: round trip gave {got!r} for {want!r}")


def BitView(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements, in logical order, as integers of the same size (so NaNs
    compare equal to themselves)."""
    flat = t.detach().contiguous().reshape(-1)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return flat.view(ints[flat.element_size()])


def StorageCount(path: str) -> int:
    with zipfile.ZipFile(path) as z:
        return sum("/data/" in n for n in z.namelist())


def WriteNonWeightFiles(out_dir: str, kind: str, seed: int, names=NON_WEIGHT_FILES) -> None:
    objs = {
        "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                        "ckptfs_test_kind": kind, "seed": seed, "torch_dtype": "bfloat16",
                        "note": "ünï 权重"},
        "generation_config.json": {"bos_token_id": 0, "eos_token_id": 1, "max_length": 64},
    }
    for name in names:
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(objs[name], f, indent=2, ensure_ascii=False)
            f.write("\n")


def ShardName(k: int, n: int) -> str:
    return f"pytorch_model-{k:05d}-of-{n:05d}.bin"


# ---------------------------------------------------------------------------
# Kinds

def LlamaStateDict(seed: int, layers: int, hidden: int, inter: int, vocab: int,
                   dtype: torch.dtype = torch.bfloat16) -> "collections.OrderedDict":
    """Names and dtypes as transformers' LlamaForCausalLM.state_dict() gives them, plus
    an int64 buffer; weights drawn from N(0, 0.02)."""
    gen = Generator(seed)
    sd = collections.OrderedDict()
    sd["model.embed_tokens.weight"] = WeightLike(gen, [vocab, hidden], dtype)
    for i in range(layers):
        p = f"model.layers.{i}."
        for x in "qkvo":
            sd[p + f"self_attn.{x}_proj.weight"] = WeightLike(gen, [hidden, hidden], dtype)
        sd[p + "self_attn.rotary_emb.inv_freq"] = 1.0 / (10000 ** (
            torch.arange(0, 32, 2, dtype=torch.float32) / 32))
        sd[p + "mlp.gate_proj.weight"] = WeightLike(gen, [inter, hidden], dtype)
        sd[p + "mlp.up_proj.weight"] = WeightLike(gen, [inter, hidden], dtype)
        sd[p + "mlp.down_proj.weight"] = WeightLike(gen, [hidden, inter], dtype)
        sd[p + "input_layernorm.weight"] = 1 + WeightLike(gen, [hidden], torch.float32)
        sd[p + "post_attention_layernorm.weight"] = 1 + WeightLike(gen, [hidden],
                                                                   torch.float32)
    sd["model.norm.weight"] = 1 + WeightLike(gen, [hidden], torch.float32)
    sd["model.position_ids"] = torch.arange(512, dtype=torch.int64).reshape(1, 512)
    sd["lm_head.weight"] = WeightLike(gen, [vocab, hidden], dtype)
    return sd


def MakeSharded(out_dir: str, seed: int, shards: int = 3) -> None:
    """Contiguous runs of tensors per shard, as transformers' save_pretrained does; each
    shard is torch.save of an OrderedDict of its tensors."""
    sd = LlamaStateDict(seed, layers=4, hidden=256, inter=512, vocab=2048)
    names = list(sd)
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for k in range(shards):
        part = collections.OrderedDict((n, sd[n]) for n in names[k * per:(k + 1) * per])
        name = ShardName(k + 1, shards)
        Save(part, os.path.join(out_dir, name))
        weight_map.update({n: name for n in part})
        total += sum(t.numel() * t.element_size() for t in part.values())
    with open(os.path.join(out_dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
                  sort_keys=True)
        f.write("\n")
    WriteNonWeightFiles(out_dir, "sharded", seed)


def MakeSingle(out_dir: str, seed: int) -> None:
    sd = LlamaStateDict(seed, layers=2, hidden=128, inter=256, vocab=1024)
    Save(sd, os.path.join(out_dir, "pytorch_model.bin"))
    WriteNonWeightFiles(out_dir, "single", seed, ("config.json",))


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.fc = nn.Linear(8, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc(self.embed(ids)))


def MakeTrainState(out_dir: str, seed: int) -> None:
    """What a training loop saves: the model's and the optimizer's state_dict beside
    plain values. After one Adam step the optimizer state holds, per parameter index
    (int keys), 'step' (a 0-d tensor in torch 1.13), 'exp_avg' and 'exp_avg_sq'."""
    torch.manual_seed(seed)
    model = TinyNet()
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    ids = torch.randint(0, 16, (5,), generator=Generator(seed))
    loss = model(ids).pow(2).mean()
    loss.backward()
    opt.step()
    gen = Generator(seed, 1)
    state = {
        "epoch": 10,
        "loss": 0.25,
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": opt.state_dict(),
        # Non-tensor values of every kind metadata.json must carry exactly.
        "global_step": 2 ** 40 + 1,
        "min_delta": -3,
        "best_metric": 0.1 + 0.2,  # 0.30000000000000004: needs all 17 digits
        "arch": "tiny-ünï-权重",
        "scheduler": None,
        "flags": (True, False, None),
        "history": [{"epoch": 9, "loss": 0.5}, {"epoch": 10, "loss": 0.25}],
        # Tensors in a list, in a nested dict, and a Parameter (_rebuild_parameter).
        "ema": [WeightLike(gen, [4, 8], torch.float32), WeightLike(gen, [4], torch.float32)],
        "extras": {"temperature": nn.Parameter(torch.tensor([1.5])),
                   "rng_state": torch.get_rng_state()},
    }
    # torch 1.13's weights_only loader lacks BINFLOAT (the float opcode): not for this one.
    Save(state, os.path.join(out_dir, "train_state.pt"), weights_only=False)


class Holder:
    """A user's own class: pickled as NEWOBJ(__main__.Holder) + BUILD({'w': tensor})."""

    def __init__(self, w: torch.Tensor):
        self.w = w


def MakeAnyValues(out_dir: str, seed: int) -> None:
    """Values no weights_only loader takes, at both pickle protocols torch users meet."""
    import pathlib
    import random
    gen = Generator(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    arr = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5
    w = WeightLike(gen, [3, 2], torch.float32)
    model = {"weight": WeightLike(gen, [4, 4], torch.float32), "bias": WeightLike(gen, [4], torch.float32)}
    c = torch.complex(WeightLike(gen, [5], torch.float32), WeightLike(gen, [5], torch.float32))
    state = {
        "model": model,
        "args": argparse.Namespace(lr=0.001, out=pathlib.PosixPath("runs/a"), tags={"x"}),
        "loss": np.float64(0.25),
        "arr": arr,
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                "torch": torch.random.get_rng_state()},
        "extra": Holder(w),
        "c": c,
    }
    os.makedirs(os.path.join(out_dir, "oracle"))
    torch.save(state, os.path.join(out_dir, "any_values.pt"))
    torch.save(state, os.path.join(out_dir, "any_values_p4.pt"), pickle_protocol=4)
    back = torch.load(os.path.join(out_dir, "any_values_p4.pt"))
    Same(w, back["extra"].w, "extra.w")
    # numpy arrays are tensors at both protocols: read from inside data.pkl at protocol 4,
    # decoded from protocol 2's latin-1 text. np.random.get_state()'s key array is item 1
    # of its tuple (uint32: int64 here, torch 1.13 has no uint32).
    back2 = torch.load(os.path.join(out_dir, "any_values.pt"), weights_only=False)
    Same(torch.from_numpy(arr), torch.from_numpy(back2["arr"]), "arr at protocol 2")
    tensors = {"model.weight": model["weight"], "model.bias": model["bias"], "extra.w": w, "c": c,
               "rng.torch": state["rng"]["torch"], "arr": torch.from_numpy(arr),
               "rng.numpy.1": torch.from_numpy(state["rng"]["numpy"][1].astype(np.int64))}
    torch.save(tensors, os.path.join(out_dir, "oracle", "tensors_p2.pt"))
    torch.save(tensors, os.path.join(out_dir, "oracle", "tensors_p4.pt"))
    expected = {
        "args": {"__object__": "argparse.Namespace",
                 "state": {"lr": 0.001, "out": {"__object__": "pathlib.PosixPath",
                                                "args": ["runs", "a"]}, "tags": ["x"]}},
        "loss": 0.25,
        "extra": {"__object__": "__main__.Holder"},
    }
    with open(os.path.join(out_dir, "oracle", "metadata.json"), "w") as f:
        json.dump(expected, f)


class LitNet(nn.Module):
    """The modules a LightningModule holds: a wrapped model and a head of its own."""

    def __init__(self):
        super().__init__()
        self.model = TinyNet()
        self.head = nn.Linear(4, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.model(ids))


def MakeLightning(out_dir: str, seed: int) -> None:
    """What Lightning's Trainer.save_checkpoint writes (1.9's keys and their shapes),
    without Lightning: the module's state_dict beside the loop, callback, optimizer and
    scheduler states."""
    torch.manual_seed(seed)
    lit = LitNet()
    opt = torch.optim.Adam(lit.parameters(), lr=0.001)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    ids = torch.randint(0, 16, (5,), generator=Generator(seed))
    lit(ids).pow(2).mean().backward()
    opt.step()
    sched.step()
    progress = {"total": {"ready": 4, "started": 4, "processed": 4, "completed": 3},
                "current": {"ready": 1, "started": 1, "processed": 1, "completed": 0}}
    best = os.path.join(out_dir, "epoch=2-step=75.ckpt")
    ckpt = {
        "epoch": 3,
        "global_step": 100,
        "pytorch-lightning_version": "1.9.0",
        "state_dict": lit.state_dict(),
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": progress,
                               "epoch_loop.state_dict": {"_batches_that_stepped": 100}}},
        "callbacks": {
            "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, "
            "'every_n_epochs': 1, 'train_time_interval': None}": {
                "monitor": "val_loss", "best_model_score": torch.tensor(0.25),
                "best_model_path": best, "current_score": torch.tensor(0.3),
                "dirpath": out_dir, "best_k_models": {best: torch.tensor(0.25)},
                "kth_best_model_path": best, "kth_value": torch.tensor(0.25),
                "last_model_path": os.path.join(out_dir, "last.ckpt")}},
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [sched.state_dict()],
        "hparams_name": "kwargs",
        "hyper_parameters": {"lr": 0.001, "hidden": 8},
    }
    Save(ckpt, os.path.join(out_dir, "epoch=3-step=100.ckpt"), weights_only=False)


def MakeTied(out_dir: str, seed: int) -> None:
    """lm_head.weight IS model.embed_tokens.weight, and decoder.norm.weight IS
    encoder.norm.weight (bf16): torch.save writes each storage once."""
    gen = Generator(seed)
    embed = WeightLike(gen, [256, 64], torch.float32)
    norm = 1 + WeightLike(gen, [64], torch.bfloat16)
    sd = collections.OrderedDict()
    sd["model.embed_tokens.weight"] = embed
    sd["model.layers.0.weight"] = WeightLike(gen, [64, 64], torch.float32)
    sd["encoder.norm.weight"] = norm
    sd["decoder.norm.weight"] = norm
    sd["lm_head.weight"] = embed
    path = os.path.join(out_dir, "pytorch_model.bin")
    Save(sd, path)
    assert StorageCount(path) == 3, "tied tensors should share one storage record"
    WriteNonWeightFiles(out_dir, "tied", seed, ("config.json",))


def MakeDtypes(out_dir: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sd = collections.OrderedDict()
    for name, dtype in DTYPES.items():
        sd[f"dtypes.{name}"] = RandomBits(rng, dtype, [7, 13])
    for name in ("f32", "bf16", "i64", "bool", "f64"):
        sd[f"scalar.{name}"] = RandomBits(rng, DTYPES[name], [])
    sd["empty.f32"] = torch.zeros(0, 4)
    sd["empty.bf16"] = torch.zeros(0, dtype=torch.bfloat16)
    sd["empty.u8"] = torch.zeros(3, 0, dtype=torch.uint8)
    # Over 1 MiB, so reads of it span several FUSE requests.
    sd["big.bf16"] = RandomBits(rng, torch.bfloat16, [1024, 700])
    sd["big.i16"] = RandomBits(rng, torch.int16, [3, 5, 7, 11])
    Save(sd, os.path.join(out_dir, "pytorch_model.bin"))
    WriteNonWeightFiles(out_dir, "dtypes", seed, ("config.json",))


def MakeViews(out_dir: str, seed: int) -> None:
    """Tensors that are views into storages shared or bigger than themselves. torch.save
    writes whole storages, so every view below keeps its offset and strides."""
    gen = Generator(seed)
    sd = collections.OrderedDict()
    big = torch.arange(100, dtype=torch.float32)
    sd["offsets.big"] = big
    sd["offsets.slice"] = big[10:20]                             # offset 10, shares big's
    sd["offsets.rows"] = WeightLike(gen, [8, 6], torch.float32)[2:5]  # offset 12 of 48
    sd["offsets.bf16"] = WeightLike(gen, [64], torch.bfloat16)[8:24]
    sd["offsets.i64"] = torch.arange(50, dtype=torch.int64)[5:15]
    sd["offsets.mask"] = (torch.arange(16) % 3 == 0)[3:9]
    # Contiguous by torch's rule (a size-1 dimension's stride does not matter): (1, 5)
    # with strides (1, 1).
    sd["offsets.row_from_col"] = WeightLike(gen, [5, 1], torch.float32).t()
    w = WeightLike(gen, [4, 6], torch.float32)
    sd["shared.w"] = w
    sd["shared.w_flat"] = w.view(-1)
    sd["shared.w_t"] = w.t()                                       # non-contiguous
    sd["strided.half_cols"] = WeightLike(gen, [6, 10], torch.float16)[:, ::2]
    sd["strided.expanded"] = torch.arange(3, dtype=torch.float32).expand(4, 3)  # stride 0
    sd["strided.offset_t"] = big[20:32].view(3, 4).t()             # offset 20, transposed
    for name, t in sd.items():
        expect_contiguous = not name.startswith(("strided.", "shared.w_t"))
        assert t.is_contiguous() == expect_contiguous, name
    path = os.path.join(out_dir, "pytorch_model.bin")
    Save(sd, path)
    WriteNonWeightFiles(out_dir, "views", seed, ("config.json",))


# ---------------------------------------------------------------------------
# Hand-made torch zips (hostile)

def ReadRecords(path: str) -> List[Tuple[str, bytes]]:
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def WriteZip(path: str, records: List[Tuple[str, bytes]], deflate=()) -> None:
    """A zip laid out like torch's writer: records in the given order, stored, each
    one's data 64-byte aligned by an extra field in its local header ('FB' padding,
    as torch uses). Records named in `deflate` are deflated instead."""
    with open(path, "wb") as f, zipfile.ZipFile(f, "w") as z:
        for name, data in records:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if name in deflate \
                else zipfile.ZIP_STORED
            header = 30 + len(name.encode("utf-8"))
            pad = -(f.tell() + header + 4) % RECORD_ALIGNMENT
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(info, data)
            if name not in deflate:
                assert (f.tell() - len(data)) % RECORD_ALIGNMENT == 0, name


class StorageRef:
    def __init__(self, cls, key: str, numel: int):
        self.cls, self.key, self.numel = cls, key, numel


class TensorRef:
    """Pickles as torch does a tensor: _rebuild_tensor_v2(storage, offset, size,
    stride, requires_grad, backward_hooks), whatever the numbers."""

    def __init__(self, storage: StorageRef, offset: int, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2,  # pylint: disable=protected-access
                (self.storage, self.offset, tuple(self.size), tuple(self.stride), False,
                 collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, StorageRef):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def TorchPickle(obj) -> bytes:
    buf = io.BytesIO()
    TorchPickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def Payload(command: str, how: str) -> bytes:
    """Pickle opcodes that, unpickled by python's pickle, call a function that runs
    `command`, leaving its result on the stack."""
    def Str(s: str) -> bytes:
        b = s.encode("utf-8")
        return b"X" + struct.pack("<I", len(b)) + b
    if how == "os.system":
        return b"cos\nsystem\n" + Str(command) + b"\x85R"
    if how == "posix.system":
        return b"cposix\nsystem\n" + Str(command) + b"\x85R"
    if how == "builtins.eval":
        return b"cbuiltins\neval\n" + Str(f"__import__('os').system({command!r})") + b"\x85R"
    if how == "stack-global":  # protocol 4's STACK_GLOBAL, names pushed as strings
        return b"\x8c\x02os\x8c\x06system\x93" + Str(command) + b"\x85R"
    if how == "load-from-bytes":
        # A global inside torch that is not a weights_only one: torch.load of the bytes
        # given, which unpickles them with no restriction (here: a pickle calling
        # os.system). An allowlist of "anything under torch" would let it through.
        inner = b"\x80\x02" + Payload(command, "os.system") + b"."
        return (b"ctorch.storage\n_load_from_bytes\n" + b"B" + struct.pack("<I", len(inner))
                + inner + b"\x85R")
    raise ValueError(how)


def WithExtraEntry(pkl: bytes, payload: bytes) -> bytes:
    """torch's pickle of a state dict ends with the dict on the stack, then STOP: one
    more key, 'evil', is set there (SETITEM) with `payload` as its value."""
    assert pkl.endswith((b"u.", b"s.")), pkl[-8:]
    key = b"X" + struct.pack("<I", 4) + b"evil"
    return pkl[:-1] + key + payload + b"s."


def Replace(records, name_suffix: str, data: Optional[bytes]) -> List[Tuple[str, bytes]]:
    """The records with the one ending in name_suffix replaced (or dropped if None)."""
    hits = [n for n, _ in records if n.endswith(name_suffix)]
    assert len(hits) == 1, (name_suffix, hits)
    out = []
    for n, d in records:
        if n.endswith(name_suffix):
            if data is not None:
                out.append((n, data))
        else:
            out.append((n, d))
    return out


def PklRecord(records) -> bytes:
    return next(d for n, d in records if n.endswith("/data.pkl"))


# The base state dict of each hostile case: three f32 tensors in storages 0, 1, 2.
HOSTILE_BASE_SHAPES = (("embed.weight", [8, 4]), ("fc.weight", [4, 4]), ("fc.bias", [4]))

ANY_GLOBAL_OS = ["os.system", "os system"]
OUT_OF_STORAGE = ["fc.weight", "out of bounds", "out of range", "outside", "exceeds",
                  "past the end", "beyond", "larger than"]

# case -> (file a refusal must name, reasons (one must appear), has a marker payload).
HOSTILE_CASES: Dict[str, Tuple[str, List[str], bool]] = {
    "global-os-system": ("pytorch_model.bin", ANY_GLOBAL_OS, True),
    "global-posix-system": ("pytorch_model.bin", ["posix.system", "posix system"], True),
    "global-builtins-eval": ("pytorch_model.bin", ["builtins.eval", "builtins eval"], True),
    "stack-global-os-system": ("pytorch_model.bin", ANY_GLOBAL_OS, True),
    # The call hidden in the storage's persistent id, where the storage class goes.
    "global-as-storage-type": ("pytorch_model.bin", ANY_GLOBAL_OS, True),
    "torch-load-from-bytes": ("pytorch_model.bin", ["torch.storage._load_from_bytes",
                                                    "_load_from_bytes"], True),
    # A sharded checkpoint whose second shard carries the payload.
    "shard-os-system": (ShardName(2, 2), ANY_GLOBAL_OS, True),
    "truncated-zip": ("pytorch_model.bin",
                      ["truncat", "central directory", "not a zip", "not a valid zip",
                       "end of file", "eocd"], False),
    "missing-storage": ("pytorch_model.bin",
                        ["data/1", "missing", "not found", "no record", "no such"], False),
    # data/0 holds fewer bytes than the storage the pickle declares.
    "short-storage-record": ("pytorch_model.bin",
                             ["data/0", "size", "bytes", "short", "storage"], False),
    "size-past-storage": ("pytorch_model.bin", OUT_OF_STORAGE, False),
    "stride-past-storage": ("pytorch_model.bin", OUT_OF_STORAGE, False),
    "offset-past-storage": ("pytorch_model.bin", OUT_OF_STORAGE, False),
    "negative-size": ("pytorch_model.bin", OUT_OF_STORAGE + ["negative"], False),
    "legacy-format": ("pytorch_model.bin",
                      ["legacy", "1.6", "zip", "_use_new_zipfile_serialization", "tar"],
                      False),
    "deflated-record": ("pytorch_model.bin",
                        ["compress", "deflate", "stored", "method"], False),
}


def HostileBase(seed: int) -> "collections.OrderedDict":
    gen = Generator(seed)
    return collections.OrderedDict(
        (name, WeightLike(gen, shape, torch.float32)) for name, shape in HOSTILE_BASE_SHAPES)


def HandPickle(shapes: Dict[str, Tuple[int, List[int], List[int]]]) -> bytes:
    """A data.pkl for the base's three storages (keys 0, 1, 2 of 32, 16 and 4 floats)
    giving each tensor name (offset, size, stride)."""
    numels = {"0": 32, "1": 16, "2": 4}
    storages = {k: StorageRef(torch.FloatStorage, k, n) for k, n in numels.items()}
    keys = {"embed.weight": "0", "fc.weight": "1", "fc.bias": "2"}
    return TorchPickle(collections.OrderedDict(
        (name, TensorRef(storages[keys[name]], *shapes[name])) for name in keys))


def ValidShapes() -> Dict[str, Tuple[int, List[int], List[int]]]:
    return {"embed.weight": (0, [8, 4], [4, 1]), "fc.weight": (0, [4, 4], [4, 1]),
            "fc.bias": (0, [4], [1])}


def MakeHostileCase(case: str, case_dir: str, marker: str, seed: int) -> None:
    path = os.path.join(case_dir, "pytorch_model.bin")
    base = HostileBase(seed)
    torch.save(base, path)
    records = ReadRecords(path)
    pkl = PklRecord(records)
    command = f"touch {marker}"

    if case in ("global-os-system", "global-posix-system", "global-builtins-eval"):
        how = case[len("global-"):].replace("-", ".", 1)
        WriteZip(path, Replace(records, "/data.pkl", WithExtraEntry(pkl, Payload(command, how))))
    elif case == "stack-global-os-system":
        assert pkl.startswith(b"\x80\x02")
        evil = b"\x80\x04" + WithExtraEntry(pkl, Payload(command, "stack-global"))[2:]
        WriteZip(path, Replace(records, "/data.pkl", evil))
    elif case == "torch-load-from-bytes":
        WriteZip(path, Replace(records, "/data.pkl",
                               WithExtraEntry(pkl, Payload(command, "load-from-bytes"))))
    elif case == "global-as-storage-type":
        storage_class = b"ctorch\nFloatStorage\n"
        assert storage_class in pkl
        evil = pkl.replace(storage_class, Payload(command, "os.system"), 1)
        WriteZip(path, Replace(records, "/data.pkl", evil))
    elif case == "shard-os-system":
        os.remove(path)
        halves = [collections.OrderedDict(list(base.items())[:2]),
                  collections.OrderedDict(list(base.items())[2:])]
        weight_map = {}
        for k, half in enumerate(halves, start=1):
            shard = os.path.join(case_dir, ShardName(k, 2))
            torch.save(half, shard)
            weight_map.update({n: ShardName(k, 2) for n in half})
        shard2 = os.path.join(case_dir, ShardName(2, 2))
        records = ReadRecords(shard2)
        WriteZip(shard2, Replace(records, "/data.pkl",
                                 WithExtraEntry(PklRecord(records), Payload(command,
                                                                           "os.system"))))
        with open(os.path.join(case_dir, "pytorch_model.bin.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 192}, "weight_map": weight_map}, f,
                      indent=2)
    elif case == "truncated-zip":
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size * 3 // 5)
    elif case == "missing-storage":
        WriteZip(path, Replace(records, "/data/1", None))
    elif case == "short-storage-record":
        data0 = next(d for n, d in records if n.endswith("/data/0"))
        WriteZip(path, Replace(records, "/data/0", data0[:len(data0) // 2]))
    elif case in ("size-past-storage", "stride-past-storage", "offset-past-storage",
                  "negative-size"):
        shapes = ValidShapes()
        shapes["fc.weight"] = {
            "size-past-storage": (0, [5, 4], [4, 1]),      # 20 elements of 16
            "stride-past-storage": (0, [4, 4], [8, 1]),    # reaches element 27 of 16
            "offset-past-storage": (13, [4], [1]),         # elements 13..16 of 16
            "negative-size": (0, [-1, 4], [4, 1]),
        }[case]
        WriteZip(path, Replace(records, "/data.pkl", HandPickle(shapes)))
    elif case == "legacy-format":
        torch.save(base, path, _use_new_zipfile_serialization=False)
    elif case == "deflated-record":
        WriteZip(path, records, deflate={n for n, _ in records if n.endswith("/data/0")})
    else:
        raise UsageError(f"unknown hostile case {case!r}")


def CheckZipWriter(tmp_dir: str, seed: int) -> None:
    """The hostile cases rewrite torch's zips with WriteZip and HandPickle: rewritten
    unchanged, or with the pickle written by hand with the valid shapes, the file must
    still load in torch, so the one change each case makes is the only damage."""
    path = os.path.join(tmp_dir, "roundtrip.bin")
    base = HostileBase(seed)
    torch.save(base, path)
    records = ReadRecords(path)
    WriteZip(path, records)
    CheckRoundTrip(base, path)
    WriteZip(path, Replace(records, "/data.pkl", HandPickle(ValidShapes())))
    CheckRoundTrip(base, path)
    os.remove(path)


def MakeHostile(out_dir: str, seed: int) -> None:
    markers = os.path.join(out_dir, "markers")
    os.makedirs(markers)
    CheckZipWriter(out_dir, seed)
    cases = {}
    for case, (offender, reasons, has_marker) in HOSTILE_CASES.items():
        case_dir = os.path.join(out_dir, case)
        os.makedirs(case_dir)
        WriteNonWeightFiles(case_dir, "hostile", seed, ("config.json",))
        marker = os.path.join(markers, case)
        MakeHostileCase(case, case_dir, marker, seed)
        cases[case] = {"source": case, "file": offender, "reasons": reasons,
                       "marker": marker if has_marker else None}
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(cases, f, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------
# zst: compressed copies

def TorchWeightFiles(plain_dir: str) -> List[str]:
    names = sorted(os.listdir(plain_dir))
    if "pytorch_model.bin.index.json" in names:
        with open(os.path.join(plain_dir, "pytorch_model.bin.index.json")) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    return [n for n in names if n.endswith((".bin", ".pt", ".pth"))]


def MakeZst(out_dir: str, plain_dir: str, opts: "make_checkpoint.CompressOptions") -> None:
    if plain_dir is None or not os.path.isdir(plain_dir):
        raise UsageError("zst needs --from PLAIN_DIR, a torch checkpoint directory")
    weights = set(TorchWeightFiles(plain_dir))
    if not weights:
        raise UsageError(f"{plain_dir}: no torch weight files to compress")
    for name in sorted(os.listdir(plain_dir)):
        src = os.path.join(plain_dir, name)
        if not os.path.isfile(src):
            continue
        shutil.copyfile(src, os.path.join(out_dir, name))
        if name in weights:
            make_checkpoint.CompressFile(os.path.join(out_dir, name), opts)


# ---------------------------------------------------------------------------
# Command line

def ParseArgs(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", metavar="KIND", choices=KINDS, help=" | ".join(KINDS))
    p.add_argument("out_dir", metavar="OUT_DIR", help="created if missing; must be empty")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from", dest="from_dir", metavar="PLAIN_DIR", help="zst: what to copy")
    p.add_argument("--compress", default="single", choices=("single", "seekable", "multiframe"),
                   help="zst: how weight files are compressed (default single)")
    p.add_argument("--frame-size", type=make_checkpoint.ParseSize,
                   default=make_checkpoint.ParseSize("256K"),
                   help="zst seekable and multiframe: decoded bytes per frame (default 256K)")
    p.add_argument("--level", type=int, default=3, help="zst: zstd level (default 3)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if (args.kind == "zst") != (args.from_dir is not None):
        p.error("--from is required with KIND zst, and only there")
    return args


def Main(argv: List[str]) -> int:
    args = ParseArgs(argv)
    try:
        os.makedirs(args.out_dir, exist_ok=True)
        if os.listdir(args.out_dir):
            raise UsageError(f"{args.out_dir}: OUT_DIR is not empty")
        out = os.path.abspath(args.out_dir)
        if args.kind == "zst":
            opts = make_checkpoint.CompressOptions(kind=args.compress,
                                                   frame_size=args.frame_size,
                                                   level=args.level)
            MakeZst(out, args.from_dir, opts)
        else:
            {"sharded": MakeSharded, "single": MakeSingle, "train_state": MakeTrainState,
             "lightning": MakeLightning,
             "tied": MakeTied, "dtypes": MakeDtypes, "views": MakeViews,
             "hostile": MakeHostile, "any_values": MakeAnyValues}[args.kind](out, args.seed)
    except (UsageError, make_checkpoint.UsageError) as e:
        print(f"make_torch_checkpoint.py: {e}", file=sys.stderr)
        return 2
    if args.verbose:
        files = [os.path.join(d, f) for d, _, fs in os.walk(args.out_dir) for f in fs]
        print(f"wrote {args.kind} checkpoint to {args.out_dir}: {len(files)} files, "
              f"{sum(os.path.getsize(f) for f in files)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(Main(sys.argv[1:]))
