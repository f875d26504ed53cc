#!/usr/bin/python3
"""Checks a mounted DeepSpeed ZeRO tag against the generator's ground truth.

    check_deepspeed.py OUT MNT

OUT is what tests/deepspeed/make_deepspeed_checkpoint.py wrote (OUT/expected.pt, written by
plain torch.save from the model and its training, not from the rank files); MNT the mount
of OUT/<tag>. Checked, bit for bit:
  - torch.load(MNT/pytorch_model.bin) == expected['model_native'] (zero_to_fp32's names and
    shapes; buffers and frozen params in their saved dtype), tied params sharing storage;
  - MNT/model.safetensors, parsed by hand (header json + numpy), holds the same bytes;
  - tensors/optimizer/exp_avg[_sq]/<name>.npy == expected['exp_avg'[_sq]] (numpy.load);
  - tensors/module/... == expected['module'] (stage 1/2, the module as saved);
  - pipelines: the layer files are the model (module dtype), tensors/model_fp32/... the ZeRO-1
    masters (none when saved without optimizer state); with tensor parallelism each TP rank's
    layers are a sub-tree model_YY.<layer>.<key> of a whole view; without it, the merged
    model equals each layer file read by torch.load (layer_XX[-model_00]-model_states.pt),
    numpy.load of tensors/model/<layer>/<key>.npy agrees, and a module registering the
    generator's layers under their index (as PipelineModule does) loads pytorch_model.bin
    with load_state_dict(strict=True);
  - .ckptfs/metadata.json: global_steps, zero stage and dp_world_size.
Exits 1 listing every mismatch, else prints one OK line.
"""

import glob
import json
import os
import struct
import sys

import numpy as np
import torch

SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8,
                      "F64": torch.float64, "I16": torch.int16, "I8": torch.int8,
                      "BOOL": torch.bool}


def RawBytes(t: torch.Tensor) -> bytes:
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def TensorPath(mnt: str, name: str, ext: str) -> str:
    return os.path.join(mnt, "tensors", *name.split(".")) + ext


def CheckLayers(out: str, expected: dict, mnt: str, sd: dict, Fail) -> None:
    tag_dir = os.path.join(out, expected["tag"])
    files = sorted(glob.glob(os.path.join(tag_dir, "layer_*-model_states.pt")))
    if not files:
        Fail(f"{tag_dir}: no layer files")
    merged = 0
    for path in files:
        base = os.path.basename(path)
        index = int(base[len("layer_"):base.index("-")])
        layer = torch.load(path, weights_only=True)
        for key, want in layer.items():
            name = f"{index}.{key}"
            merged += 1
            got = sd.get(name)
            if got is None or got.dtype != want.dtype or RawBytes(got) != RawBytes(want):
                Fail(f"pytorch_model.bin {name}: differs from {base}[{key!r}]")
            if want.dtype != torch.bfloat16:  # numpy has no bfloat16: a .safetensors then
                npy = TensorPath(mnt, f"model.{name}", ".npy")
                arr = np.load(npy, mmap_mode="r") if os.path.exists(npy) else None
                if arr is None or arr.shape != tuple(want.shape) or \
                        arr.tobytes() != RawBytes(want):
                    Fail(f"{npy}: differs from {base}[{key!r}]")
    if merged != len(sd):
        Fail(f"pytorch_model.bin holds {len(sd)} tensors, the layer files {merged}")
    # PipelineModule registers each layer under its index (add_module(str(idx), layer)), so
    # its state_dict names are the merged ones: load them into such a module, strictly.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "deepspeed"))
    import make_deepspeed_checkpoint as gen  # pylint: disable=import-outside-toplevel
    args = gen.ParseArgs([out] + (["--size-mb", str(expected["config"]["size_mb"])]
                                  if expected["config"].get("size_mb") else []))
    module = torch.nn.Module()
    for index, layer in enumerate(gen.PipelineLayers(*gen.Sizes(args))):
        if isinstance(layer, torch.nn.Module):
            module.add_module(str(index), layer.to(gen.DTYPES[expected["config"]["dtype"]]))
    try:
        module.load_state_dict(sd, strict=True)
    except RuntimeError as e:  # names or shapes PipelineModule would not take
        Fail(f"load_state_dict(strict=True) of pytorch_model.bin: {str(e).splitlines()[0]}")


def Main(out: str, mnt: str) -> int:
    expected = torch.load(os.path.join(out, "expected.pt"))
    config = expected["config"]
    failures = []

    def Fail(what: str) -> None:
        failures.append(what)

    native = expected["model_native"]
    pipeline_tp = config.get("pipeline") and config.get("tp", 1) > 1
    if pipeline_tp:
        # Tensor-parallel ranks are sub-trees (model_YY.<layer>.<key>) of a whole view, with
        # the model states' client tensors; the masters are not consolidated.
        native = {f"{rank}.{name}": t for rank, layers in expected["pipeline"].items()
                  for name, t in layers.items()}
        native["rng_state.torch"] = torch.load(
            os.path.join(out, expected["tag"], "mp_rank_00_model_states.pt"))["rng_state"]["torch"]
    # 1. pytorch_model.bin through torch.load.
    sd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
    if set(sd) != set(native):
        Fail(f"pytorch_model.bin keys: extra {sorted(set(sd) - set(native))}, "
             f"missing {sorted(set(native) - set(sd))}")
    for name, want in native.items():
        got = sd.get(name)
        if got is None:
            continue
        if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
            Fail(f"pytorch_model.bin {name}: {got.dtype} {tuple(got.shape)}, "
                 f"expected {want.dtype} {tuple(want.shape)}")
        elif RawBytes(got) != RawBytes(want):
            Fail(f"pytorch_model.bin {name}: bytes differ")
    for alias, owner in expected["shared_params"].items():
        if alias in sd and owner in sd and sd[alias].data_ptr() != sd[owner].data_ptr():
            Fail(f"pytorch_model.bin {alias}: not tied to {owner}")

    # 2. model.safetensors, by hand.
    with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    if set(header) != set(native):
        Fail(f"model.safetensors keys differ: {sorted(set(header) ^ set(native))}")
    for name, entry in header.items():
        if name not in native:
            continue
        want = native[name]
        begin, end = entry["data_offsets"]
        got = data[8 + size + begin:8 + size + end]
        if SAFETENSORS_DTYPES.get(entry["dtype"]) != want.dtype or entry["shape"] != list(want.shape):
            Fail(f"model.safetensors {name}: {entry['dtype']} {entry['shape']}")
        elif got != RawBytes(want):
            Fail(f"model.safetensors {name}: bytes differ")

    # 3. The moments, one .npy each.
    for moment in ("exp_avg", "exp_avg_sq") if not pipeline_tp else ():
        for name, want in expected[moment].items():
            path = TensorPath(mnt, f"optimizer.{moment}.{name}", ".npy")
            if not os.path.exists(path):
                Fail(f"{path}: missing")
                continue
            got = np.load(path)
            if got.dtype != np.float32 or got.shape != tuple(want.shape) or \
                    got.tobytes() != want.numpy().tobytes():
                Fail(f"{path}: differs from expected {moment}")

    # 4. The module as saved (stage 1/2; stage 3 keeps empty placeholders, not shown).
    if config.get("pipeline") and not pipeline_tp:  # the ZeRO-1 masters beside the layers
        for name, want in expected["model_fp32"].items():
            path = TensorPath(mnt, f"model_fp32.{name}", ".npy")
            if not os.path.exists(path) or np.load(path).tobytes() != RawBytes(want):
                Fail(f"{path}: differs from the fp32 master weights")
    elif config["stage"] < 3 and not pipeline_tp:
        for name, want in expected["module"].items():
            ext = ".safetensors" if want.dtype == torch.bfloat16 else ".npy"
            path = TensorPath(mnt, f"module.{name}", ext)
            if not os.path.exists(path):
                Fail(f"{path}: missing")
            elif ext == ".npy":
                if np.load(path).tobytes() != RawBytes(want):
                    Fail(f"{path}: differs from the module")
            else:
                with open(path, "rb") as f:
                    one = f.read()
                (n,) = struct.unpack("<Q", one[:8])
                if one[8 + n:] != RawBytes(want):
                    Fail(f"{path}: differs from the module")

    # 5. A pipeline without tensor parallelism: the merged model against the layer files.
    if config.get("pipeline") and not pipeline_tp:
        CheckLayers(out, expected, mnt, sd, Fail)

    # 6. The state.
    with open(os.path.join(mnt, ".ckptfs", "metadata.json"), encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("global_steps") != config["step"]:
        Fail(f"metadata.json global_steps {meta.get('global_steps')}")
    zero = meta.get("zero", {})
    if zero.get("stage") != config["stage"] or zero.get("dp_world_size") != config["ranks"]:
        Fail(f"metadata.json zero: {zero}")

    if failures:
        for line in failures[:30]:
            print("FAIL", line)
        return 1
    print(f"OK deepspeed stage {config['stage']} ranks {config['ranks']} {config['dtype']}: "
          f"{len(native)} model tensors, {0 if pipeline_tp else len(expected['exp_avg'])} moments")
    return 0


if __name__ == "__main__":
    sys.exit(Main(sys.argv[1], sys.argv[2]))
