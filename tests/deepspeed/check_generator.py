#!/usr/bin/python3
"""Checks make_deepspeed_checkpoint.py against zero_to_fp32's consolidation, bit for bit.

    check_generator.py [--keep DIR] [--only SUBSTRING]

For a matrix of configurations (stages 1-3 x 1-4 ranks x bf16/fp16, round-robin gradients,
ZeRO-3 sub-groups, frozen and tied params, exclude_frozen_parameters, two param groups,
legacy serialization, the getattr form of ZeroStageEnum, pipeline layer files) it generates
a checkpoint, then reads the rank files back with an independent port of DeepSpeed's
utils/zero_to_fp32.py (below: Consolidate) and requires the result to equal
expected['model'] bit for bit, names and order included. It also checks the module
weights, the consolidated Adam moments, the padding kept in the storages of
single_partition_of_fp32_groups, the exact set of pickle globals the files name (loaded
with an unpickler that allows only those), and that a hostile global is refused unrun.

Exit status: 0 all passed, 1 a mismatch (all listed), 77 skipped (no torch or numpy).
Runs under /usr/bin/python3 (Debian's torch 1.13 and numpy).
"""

import argparse
import collections
import glob
import importlib
import importlib.util
import math
import os
import pickle
import re
import shutil
import sys
import tempfile
import types
import zipfile
from typing import Callable, Dict, List, Optional, Set

try:
    import torch
except ImportError as e:
    print(f"SKIP: {e} (DeepSpeed generator checks need torch and numpy)")
    sys.exit(77)
if importlib.util.find_spec("numpy") is None:  # the files pickle numpy RNG state
    print("SKIP: no numpy (DeepSpeed generator checks need torch and numpy)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_deepspeed_checkpoint as gen  # noqa: E402  pylint: disable=wrong-import-position

# Every global a generated file may name, as DeepSpeed 0.19 files name them (storages
# aside: torch's loader resolves `torch *Storage` itself). Real files of other trainers can
# name more through client_state; these are the ones this generator's client state uses.
ALLOWED_GLOBALS = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch.Size",
    "torch.float16",
    "__builtin__.set",
    "argparse.Namespace",
    "numpy.core.multiarray._reconstruct",
    "numpy.ndarray",
    "numpy.dtype",
    "_codecs.encode",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.utils.tensor_fragment.fragment_address",
}
# getattr is allowed for one call only: getattr(ZeroStageEnum, member name).
GETATTR = "__builtin__.getattr"


class Refused(Exception):
    pass


def SafeGetattr(obj, name):
    from deepspeed.runtime.zero.config import ZeroStageEnum  # pylint: disable=import-outside-toplevel
    if obj is not ZeroStageEnum or name not in ZeroStageEnum.__members__:
        raise Refused(f"getattr({obj!r}, {name!r}) is not a ZeroStageEnum member")
    return getattr(obj, name)


def SafePickleModule(seen: Set[str]) -> types.ModuleType:
    """A pickle module for torch.load whose Unpickler resolves only ALLOWED_GLOBALS."""

    class Unpickler(pickle.Unpickler):

        def find_class(self, module, name):
            qualified = f"{module}.{name}"
            seen.add(qualified)
            if qualified == GETATTR:
                return SafeGetattr
            if qualified not in ALLOWED_GLOBALS:
                raise Refused(f"global {qualified} is not allowed")
            # Python 2 names (protocol 2 with fix_imports) map back to builtins.
            module = {"__builtin__": "builtins"}.get(module, module)
            return getattr(importlib.import_module(module), name)

    mod = types.ModuleType("safe_pickle")
    mod.Unpickler = Unpickler
    mod.load = lambda f, **kw: Unpickler(f, **kw).load()
    mod.__dict__["UnpicklingError"] = pickle.UnpicklingError
    return mod


class Loader:
    """torch.load through the safe unpickler; remembers every global named."""

    def __init__(self):
        self.seen: Set[str] = set()

    def __call__(self, path: str):
        module = SafePickleModule(self.seen)
        serialization = torch.serialization
        if not hasattr(serialization, "_load") or not hasattr(serialization, "_legacy_load"):
            return torch.load(path, map_location="cpu", pickle_module=module)
        # torch 1.13's torch.load replaces pickle_module with pickle unless weights_only:
        # call its two readers directly, which do use the module given.
        with open(path, "rb") as f:
            if zipfile.is_zipfile(path):
                with serialization._open_zipfile_reader(f) as archive:  # pylint: disable=protected-access
                    return serialization._load(archive, "cpu", module, encoding="utf-8")  # pylint: disable=protected-access
            return serialization._legacy_load(f, "cpu", module, encoding="utf-8")  # pylint: disable=protected-access


def NaturalKey(text: str):
    return [int(c) if c.isdigit() else c for c in re.split(r"(\d+)", text)]


def RankFiles(tag_dir: str, pattern: str) -> List[str]:
    return sorted(glob.glob(os.path.join(tag_dir, pattern)), key=NaturalKey)


# ---------------------------------------------------------------------------------------
# zero_to_fp32, in our own words
# ---------------------------------------------------------------------------------------


def Numel(shape) -> int:
    return math.prod(shape)


def WalkGroups(param_shapes: List[Dict[str, torch.Size]], flats: List[torch.Tensor], world: int,
               out: Dict[str, torch.Tensor]) -> None:
    """Stage 1/2: names in param_shapes order take consecutive pieces of each merged group."""
    for shapes, flat in zip(param_shapes, flats):
        offset = 0
        for name, shape in shapes.items():
            numel = Numel(shape)
            out[name] = flat.narrow(0, offset, numel).view(shape)
            offset += numel
        # Both counts are aligned to 2 x world before comparing, as zero_to_fp32 does: the
        # saved partitions dropped their padding, the group was padded to that alignment.
        align = 2 * world
        if math.ceil(offset / align) * align != math.ceil(flat.numel() / align) * align:
            raise ValueError(f"consumed {offset} numels out of {flat.numel()}")


def WalkZero3(shapes: Dict[str, torch.Size], per_rank: List[torch.Tensor], world: int,
              out: Dict[str, torch.Tensor]) -> None:
    """Stage 3: each param is ceil(numel/world) elements at the same offset on every rank."""
    offset = 0
    for name, shape in shapes.items():
        numel = Numel(shape)
        part = math.ceil(numel / world)
        out[name] = torch.cat([flat.narrow(0, offset, part) for flat in per_rank]).narrow(
            0, 0, numel).view(shape)
        offset += part
    if offset != per_rank[0].numel():
        raise ValueError(f"consumed {offset * world} numels out of {per_rank[0].numel() * world}")


def Consolidate(tag_dir: str, exclude_frozen: bool, load: Callable,
                moment: Optional[str] = None) -> "collections.OrderedDict[str, torch.Tensor]":
    """What zero_to_fp32.py writes for tag_dir (every tensor fp32, aliases shared).

    moment 'exp_avg' or 'exp_avg_sq' consolidates that Adam moment instead of the master
    weights (trainable params and their aliases only), the same walk over other tensors.
    """
    model_states = [load(f) for f in RankFiles(tag_dir, "*_model_states.pt")]
    optims = [load(f)["optimizer_state_dict"] for f in RankFiles(tag_dir, "*_optim_states.pt")]
    stage = int(optims[0]["zero_stage"])
    world = optims[0]["partition_count"]
    if isinstance(world, list):
        world = max(world)
    if world != len(optims):
        raise ValueError(f"expected {world} optimizer files, found {len(optims)}")
    first = model_states[0]
    out = collections.OrderedDict()
    if moment is None:
        for key, value in first["module"].items():
            if key in first["buffer_names"]:
                out[key] = value.float()
    frozen_shapes = first.get("frozen_param_shapes")
    take_frozen = moment is None and not exclude_frozen and frozen_shapes
    if stage <= 2:
        if take_frozen:
            for name in frozen_shapes:
                out[name] = first["frozen_param_fragments"][name]
        if moment is None:
            parts = [o["single_partition_of_fp32_groups"] for o in optims]
        else:
            parts = [[o["base_optimizer_state"]["state"][g][moment]
                      for g in range(len(o["base_optimizer_state"]["state"]))] for o in optims]
        flats = [torch.cat([p[g] for p in parts]) for g in range(len(parts[0]))]
        WalkGroups(first["param_shapes"], flats, world, out)
    elif stage == 3:
        if take_frozen:
            for name, shape in frozen_shapes.items():
                frags = [state["frozen_param_fragments"][name] for state in model_states]
                out[name] = torch.cat(frags).narrow(0, 0, Numel(shape)).view(shape)
        shapes = collections.OrderedDict()
        for sub in first["param_shapes"]:
            shapes.update(sub)
        if moment is None:
            per_rank = [torch.cat(o["fp32_flat_groups"]) for o in optims]
        else:
            per_rank = []
            for o in optims:
                state = o["optimizer_state_dict"]["state"]
                per_rank.append(torch.cat([state[k][moment] for k in sorted(state)]))
        WalkZero3(shapes, per_rank, world, out)
    else:
        raise ValueError(f"unknown zero stage {stage}")
    for alias, owner in first["shared_params"].items():
        if owner in out:
            out[alias] = out[owner]
    result = collections.OrderedDict()
    first_name: Dict[int, str] = {}
    for name, tensor in out.items():
        if id(tensor) in first_name:
            result[name] = result[first_name[id(tensor)]]
        else:
            # to_torch_tensor: .contiguous() only. Trainable params are the fp32 masters and
            # buffers were cast by .float(); frozen params keep the dtype they were saved in.
            first_name[id(tensor)] = name
            result[name] = tensor.contiguous()
    return result


def Inconsistencies(tag_dir: str, load: Callable) -> List[str]:
    """What a strict reader must refuse in a ZeRO tag, as 'rule: detail' strings.

    zero_to_fp32 checks less (it takes rank 0's partition_count and param_shapes on trust
    and tolerates a shortfall within the alignment); these rules hold for every intact
    checkpoint and each --break of the generator violates exactly one of them.
    """
    found = []
    model_files = RankFiles(tag_dir, "*_model_states.pt")
    optim_files = RankFiles(tag_dir, "*_optim_states.pt")
    models = [load(f) for f in model_files]
    optims = [load(f)["optimizer_state_dict"] for f in optim_files]
    stage = int(optims[0]["zero_stage"])
    counts = [o["partition_count"] for o in optims]
    counts = [max(c) if isinstance(c, list) else c for c in counts]
    if len(set(counts)) != 1:
        found.append(f"world: partition_count differs between files: {counts}")
    world = counts[0]
    if len(optims) != world or (stage == 3 and len(models) != world):
        found.append(f"files: {len(optims)} optimizer and {len(models)} model files for "
                     f"{world} ranks")
        return found  # sizes cannot add up without every rank
    steps = set()
    for o in optims:
        state = o["base_optimizer_state"] if stage <= 2 else o["optimizer_state_dict"]
        steps.update(v["step"] for v in state["state"].values())
    if len(steps) != 1 or len({m["global_steps"] for m in models}) != 1:
        found.append(f"tag: steps {sorted(steps)}, global_steps "
                     f"{sorted({m['global_steps'] for m in models})}")
    shapes = models[0]["param_shapes"]
    for k, group in enumerate(shapes):
        numels = [Numel(s) for s in group.values()]
        if stage <= 2:
            held = sum(o["single_partition_of_fp32_groups"][k].numel() for o in optims)
            want = sum(numels)
        else:
            held = sum(o["fp32_flat_groups"][k].numel() for o in optims)
            want = sum(-(-n // world) for n in numels) * len(optims)
        if held != want:
            found.append(f"sizes: group {k} holds {held} elements, param_shapes need {want}")
    return found


# ---------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------


class Failures:

    def __init__(self):
        self.items: List[str] = []
        self.checks = 0

    def Expect(self, ok: bool, what: str) -> bool:
        self.checks += 1
        if not ok:
            self.items.append(what)
        return ok


def Bits(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def SameTensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and Bits(a) == Bits(b)


def CompareDicts(fails: Failures, what: str, actual: Dict[str, torch.Tensor],
                 expected: Dict[str, torch.Tensor]) -> None:
    if not fails.Expect(list(actual) == list(expected),
                        f"{what}: names {list(actual)} != expected {list(expected)}"):
        return
    for name, tensor in expected.items():
        got = actual[name]
        fails.Expect(SameTensor(got, tensor),
                     f"{what}[{name}]: {got.dtype} {tuple(got.shape)} differs from expected "
                     f"{tensor.dtype} {tuple(tensor.shape)}")


def PickleBytes(path: str) -> bytes:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
            return z.read(name)
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------------------
# One configuration
# ---------------------------------------------------------------------------------------


def CheckZero(fails: Failures, out: str, argv: List[str], expected: dict) -> None:
    config = expected["config"]
    tag_dir = os.path.join(out, expected["tag"])
    load = Loader()
    model = Consolidate(tag_dir, config["exclude_frozen"], load)
    found = Inconsistencies(tag_dir, load)
    fails.Expect(not found, f"an intact checkpoint breaks a rule: {found}")
    CompareDicts(fails, "zero_to_fp32", model, expected["model"])
    for moment in ("exp_avg", "exp_avg_sq"):
        CompareDicts(fails, moment, Consolidate(tag_dir, False, load, moment), expected[moment])
    # Tied aliases are their owner's tensor, as zero_to_fp32's pickle path keeps them.
    for alias, owner in expected["shared_params"].items():
        if alias in model:
            fails.Expect(model[alias] is model[owner], f"{alias} is not the tensor of {owner}")

    stage, ranks = config["stage"], config["ranks"]
    model_files = RankFiles(tag_dir, "*_model_states.pt")
    optim_files = RankFiles(tag_dir, "*_optim_states.pt")
    prefix = "bf16_" if config["dtype"] == "bf16" else ""
    fails.Expect([os.path.basename(f) for f in optim_files] ==
                 [f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(ranks)],
                 f"optimizer files {optim_files}")
    names = ["mp_rank_00_model_states.pt"] if stage <= 2 else [
        f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(ranks)]
    fails.Expect([os.path.basename(f) for f in model_files] == names, f"model files {model_files}")
    with open(os.path.join(out, "latest"), "rb") as f:
        fails.Expect(f.read() == expected["tag"].encode(), "latest is not the tag, no newline")

    first = load(model_files[0])
    CompareDicts(fails, "module", first["module"], expected["module"])
    fails.Expect(first["global_steps"] == config["step"] and first["ds_version"] == gen.DS_VERSION,
                 "global_steps or ds_version")
    fails.Expect(isinstance(first["sparse_tensor_module_names"], set), "sparse_tensor_module_names")
    fails.Expect(isinstance(first["args"], argparse.Namespace), "client state args")

    # model_native: buffers from the module, frozen params in the module dtype, masters fp32.
    native = collections.OrderedDict()
    fragments = first["frozen_param_fragments"]
    for name, tensor in expected["model_native"].items():
        if name in first["buffer_names"]:
            native[name] = first["module"][name]
        elif fragments and name in fragments:
            if stage <= 2:
                native[name] = fragments[name]
            else:
                frags = [load(f)["frozen_param_fragments"][name] for f in model_files]
                native[name] = torch.cat(frags).narrow(0, 0, tensor.numel()).view(tensor.shape)
        else:
            native[name] = model[name]
    CompareDicts(fails, "model_native", native, expected["model_native"])

    for rank, path in enumerate(optim_files):
        osd = load(path)["optimizer_state_dict"]
        stage_enum = osd["zero_stage"]
        fails.Expect(type(stage_enum).__name__ == "ZeroStageEnum" and int(stage_enum) == stage,
                     f"{path}: zero_stage {stage_enum!r}")
        scaler = type(osd["loss_scaler"]).__name__
        fails.Expect(scaler == ("DynamicLossScaler" if config["dtype"] == "fp16" else "LossScaler"),
                     f"{path}: loss scaler {scaler}")
        if stage <= 2:
            for group, pad in zip(osd["single_partition_of_fp32_groups"], osd["group_paddings"]):
                # The saved partition is a view: its storage still holds the tail padding.
                fails.Expect(group.storage().size() == group.numel() + pad,
                             f"{path}: partition storage {group.storage().size()} != "
                             f"{group.numel()} + padding {pad}")
        else:
            fails.Expect(osd["partition_count"] == ranks, f"{path}: partition_count")
    # The layout, restated independently of the generator: stage 1/2 groups in round-robin
    # order (i % ranks == 0 first) padded to 2 x ranks; stage 3 sub-groups cut where their
    # partition elements reach sub_group_size, each param ceil(numel / ranks) per rank.
    shapes_saved = first["param_shapes"]
    osd0 = load(optim_files[0])["optimizer_state_dict"]
    if stage <= 2:
        for g, names in enumerate(expected["groups"]):
            if config["round_robin"]:
                names = [n for _, n in sorted(enumerate(names), key=lambda x: (x[0] % ranks, x[0]))]
            fails.Expect(list(shapes_saved[g]) == names, f"group {g} order {list(shapes_saved[g])}")
            numel = sum(Numel(s) for s in shapes_saved[g].values())
            aligned = -(-numel // (2 * ranks)) * 2 * ranks
            part = osd0["single_partition_of_fp32_groups"][g]
            fails.Expect(part.storage().size() * ranks == aligned,
                         f"group {g}: partition {part.storage().size()} x {ranks} != {aligned}")
    else:
        limit = config["sub_group_size"]
        subs = [list(s) for s in shapes_saved]
        fails.Expect([n for s in subs for n in s] == [n for g in expected["groups"] for n in g],
                     "stage 3 param order")
        for k, sub in enumerate(subs):
            sizes = [-(-Numel(shapes_saved[k][n]) // ranks) for n in sub]
            ends_group = any(sub[-1] == g[-1] for g in expected["groups"])
            fails.Expect(sum(sizes[:-1]) < limit and (sum(sizes) >= limit or ends_group),
                         f"sub-group {k} {sub} cut wrong for sub_group_size {limit}")
            fails.Expect(osd0["fp32_flat_groups"][k].numel() == sum(sizes),
                         f"sub-group {k}: flat {osd0['fp32_flat_groups'][k].numel()} != {sum(sizes)}")
    if stage <= 2 and ranks > 1:
        # Some rank must carry padding with these odd sizes, else the check above is idle.
        pads = [p for f in optim_files for p in load(f)["optimizer_state_dict"]["group_paddings"]]
        fails.Expect(any(pads), f"no padding in any partition: {pads}")

    # Exactly the globals DeepSpeed files name, loaded by an unpickler allowing only those.
    must = {"deepspeed.runtime.zero.config.ZeroStageEnum", "collections.OrderedDict",
            "__builtin__.set", "argparse.Namespace",
            "deepspeed.runtime.fp16.loss_scaler." +
            ("DynamicLossScaler" if config["dtype"] == "fp16" else "LossScaler")}
    if stage <= 2:
        must.add("deepspeed.utils.tensor_fragment.fragment_address")
    if config["enum_getattr"]:
        must.add(GETATTR)
    missing = must - load.seen
    fails.Expect(not missing, f"globals never named: {sorted(missing)}")
    raw = PickleBytes(optim_files[0])
    fails.Expect((b"getattr" in raw) == config["enum_getattr"], "ZeroStageEnum pickle form")
    for path in model_files + optim_files:
        fails.Expect(zipfile.is_zipfile(path) != config["legacy"], f"{path}: serialization format")


def CheckPipeline(fails: Failures, out: str, expected: dict) -> None:
    config = expected["config"]
    tag_dir = os.path.join(out, expected["tag"])
    load = Loader()
    for mp_name, layers in expected["pipeline"].items():
        merged = collections.OrderedDict()
        files = RankFiles(tag_dir, f"layer_*-{mp_name}-model_states.pt")
        indices = [int(re.match(r"layer_(\d+)-", os.path.basename(f)).group(1)) for f in files]
        # The plain function at index 5 has no state_dict: no file; GELU's is empty.
        fails.Expect(indices == [0, 1, 2, 3, 4, 6], f"{mp_name} layer files {indices}")
        for index, path in zip(indices, files):
            for key, value in load(path).items():
                merged[f"{index}.{key}"] = value
        CompareDicts(fails, f"pipeline {mp_name}", merged, layers)
        mp = int(mp_name.split("_")[1])
        state = load(os.path.join(tag_dir, f"mp_rank_{mp:02d}_model_states.pt"))
        fails.Expect(state["module"] is None, f"{mp_name}: module is not None")
        if mp == 0:
            # zero_to_fp32's stage 1/2 walk over this TP rank's optimizer files.
            optims = [load(f)["optimizer_state_dict"]
                      for f in RankFiles(tag_dir, f"*_mp_rank_{mp:02d}_optim_states.pt")]
            fails.Expect(len(optims) == config["ranks"], f"{mp_name}: optimizer files")
            flats = [torch.cat([o["single_partition_of_fp32_groups"][0] for o in optims])]
            fp32 = collections.OrderedDict()
            WalkGroups(state["param_shapes"], flats, config["ranks"], fp32)
            CompareDicts(fails, f"pipeline {mp_name} fp32", fp32, expected["model_fp32"])
    fails.Expect(expected["model"] is not None and list(expected["model"]) ==
                 list(expected["pipeline"]["model_00"]), "pipeline model names")


BREAK_RULES = {"missing-rank": "files", "mixed-world": "world", "mixed-tag": "tag",
               "short-partition": "sizes", "param-past-group": "sizes"}


def CheckBreak(fails: Failures, out: str, expected: dict) -> None:
    kind = expected["config"]["break_"]
    found = Inconsistencies(os.path.join(out, expected["tag"]), Loader())
    rules = sorted({f.split(":")[0] for f in found})
    fails.Expect(rules == [BREAK_RULES[kind]], f"--break {kind}: found {found}")


def CheckHostile(fails: Failures, out: str, expected: dict) -> None:
    tag_dir = os.path.join(out, expected["tag"])
    marker = os.path.join(out, "hostile_marker")
    holder = RankFiles(tag_dir, "*_model_states.pt")[0]
    load = Loader()
    try:
        load(holder)
        fails.Expect(False, f"{holder}: the hostile global was not refused")
    except Refused as e:
        fails.Expect("posix.system" in str(e), f"{holder}: refused for {e}, not posix.system")
    fails.Expect(not os.path.exists(marker), "the hostile pickle ran")
    for path in RankFiles(tag_dir, "*_optim_states.pt"):
        load(path)  # the other files stay loadable


def RunConfig(fails: Failures, root: str, argv: List[str]) -> None:
    out = os.path.join(root, "-".join(a.lstrip("-") for a in argv) or "default")
    shutil.rmtree(out, ignore_errors=True)
    before = len(fails.items)
    try:
        gen.Main([out] + argv)
        expected = torch.load(os.path.join(out, "expected.pt"))
        if expected["config"]["break_"]:
            CheckBreak(fails, out, expected)
        elif expected["config"]["hostile_global"]:
            CheckHostile(fails, out, expected)
        elif expected["config"]["pipeline"]:
            CheckPipeline(fails, out, expected)
        else:
            CheckZero(fails, out, argv, expected)
    except Exception as e:  # pylint: disable=broad-except
        fails.Expect(False, f"{type(e).__name__}: {e}")
    new = fails.items[before:]
    fails.items[before:] = [f"[{' '.join(argv)}] {m}" for m in new]
    print(f"{'FAIL' if new else 'ok  '} {' '.join(argv)}")


MATRIX = [
    # stage 1
    ["--stage", "1", "--ranks", "1", "--dtype", "bf16"],
    ["--stage", "1", "--ranks", "2", "--dtype", "fp16"],
    ["--stage", "1", "--ranks", "3", "--dtype", "bf16", "--round-robin"],
    ["--stage", "1", "--ranks", "4", "--dtype", "fp16", "--round-robin", "--groups", "2"],
    ["--stage", "1", "--ranks", "2", "--dtype", "bf16", "--frozen", "--tied"],
    # stage 2
    ["--stage", "2", "--ranks", "1", "--dtype", "fp16"],
    ["--stage", "2", "--ranks", "2", "--dtype", "bf16", "--frozen", "--tied"],
    ["--stage", "2", "--ranks", "3", "--dtype", "fp16", "--round-robin", "--frozen"],
    ["--stage", "2", "--ranks", "4", "--dtype", "bf16", "--round-robin", "--tied", "--groups", "2"],
    ["--stage", "2", "--ranks", "4", "--dtype", "fp16", "--frozen", "--exclude-frozen"],
    ["--stage", "2", "--ranks", "3", "--dtype", "bf16", "--legacy", "--enum-getattr",
     "--dirty-padding"],
    ["--stage", "2", "--ranks", "2", "--dtype", "fp16", "--groups", "2", "--frozen", "--step", "5"],
    # stage 3
    ["--stage", "3", "--ranks", "1", "--dtype", "bf16", "--sub-group-size", "1872"],  # embed+fc1.w
    ["--stage", "3", "--ranks", "2", "--dtype", "fp16", "--frozen", "--tied"],
    ["--stage", "3", "--ranks", "3", "--dtype", "bf16", "--sub-group-size", "40", "--groups", "2"],
    ["--stage", "3", "--ranks", "4", "--dtype", "fp16", "--sub-group-size", "100", "--frozen",
     "--tied", "--dirty-padding"],
    ["--stage", "3", "--ranks", "4", "--dtype", "bf16", "--frozen", "--exclude-frozen",
     "--enum-getattr"],
    ["--stage", "3", "--ranks", "3", "--dtype", "fp16", "--legacy", "--sub-group-size", "1"],
    ["--stage", "3", "--ranks", "2", "--dtype", "bf16", "--groups", "2", "--tied",
     "--sub-group-size", "300"],
    # pipeline, refusals
    ["--stage", "1", "--ranks", "2", "--dtype", "bf16", "--pipeline"],
    ["--stage", "1", "--ranks", "3", "--dtype", "fp16", "--pipeline", "--tp", "2"],
    ["--stage", "2", "--ranks", "2", "--dtype", "bf16", "--hostile-global"],
    ["--stage", "3", "--ranks", "2", "--dtype", "fp16", "--hostile-global", "--frozen"],
] + [["--stage", stage, "--ranks", "3", "--dtype", "bf16", "--groups", "2", "--break", kind]
     for stage in ("2", "3") for kind in sorted(BREAK_RULES)]


def Main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="generate under this directory and keep it")
    parser.add_argument("--only", help="run the configurations whose arguments contain this")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="dsgen-")
    os.makedirs(root, exist_ok=True)
    fails = Failures()
    try:
        for argv in MATRIX:
            if args.only is None or args.only in " ".join(argv):
                RunConfig(fails, root, argv)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if fails.items:
        print(f"FAILED: {len(fails.items)} of {fails.checks} checks")
        for item in fails.items[:50]:
            print("  " + item)
        return 1
    print(f"OK: {fails.checks} checks over {len(MATRIX)} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(Main())
