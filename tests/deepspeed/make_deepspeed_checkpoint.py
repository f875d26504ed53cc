#!/usr/bin/python3
"""Writes DeepSpeed ZeRO checkpoints without DeepSpeed, for ckptfs tests and benchmarks.

    make_deepspeed_checkpoint.py OUT [--stage 0|1|2|3] [--ranks 1..4] [--dtype bf16|fp16]
        [--round-robin] [--sub-group-size N] [--frozen] [--tied] [--exclude-frozen]
        [--groups 1|2] [--step N] [--enum-getattr] [--legacy]
        [--pipeline [--tp N] [--no-model-axis]]
        [--hostile-global] [--break KIND] [--dirty-padding] [--size-mb N] [--no-expected] [--seed S]

DeepSpeed needs torch >= 2, Debian has torch 1.13: this reproduces what DeepSpeed 0.19's
engine.save_checkpoint writes (engine.py _save_checkpoint/_save_zero_checkpoint,
zero/stage_1_and_2.py and zero/stage3.py state_dict, pipe/module.py save_state_dict) with
plain torch, pickling the DeepSpeed classes from the stand-in package beside this file
(tests/deepspeed/deepspeed/) so the files name them exactly as real ones do.

It builds a small model (an Embedding, two Linear layers, a LayerNorm, a persistent int64
buffer, a float buffer and a non-persistent one; --frozen adds a frozen Linear, --tied ties
the output head to the embedding), casts it to the run dtype as DeepSpeed does, runs N Adam
steps on fp32 master weights with seeded gradients, and writes:

  OUT/latest                 the tag, no newline
  OUT/zero_to_fp32.py        a placeholder for the recovery script DeepSpeed copies there
  OUT/global_step<N>/        the tag directory, file names as DeepSpeed gives them:
    mp_rank_00_model_states.pt                      stage 1/2 (data-parallel rank 0 only)
    zero_pp_rank_R_mp_rank_00_model_states.pt       stage 3, every rank
    [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt  every rank (bf16_ when bf16 is on)
    layer_XX-model_YY-model_states.pt               --pipeline, one per layer and TP rank
    layer_XX-model_states.pt                        --pipeline --no-model-axis (TP rank 0)
  OUT/expected.pt            the ground truth, written by plain torch.save (not by the
                             DeepSpeed path): {'model', 'model_native', 'module',
                             'exp_avg', 'exp_avg_sq', 'config', 'tag', 'files', ...};
                             see Expected() below.

--size-mb N scales the model so the tag directory is about N MiB (ZeRO-3 over 4 ranks at
2048 takes under 2 minutes on 2 cores); --no-expected skips OUT/expected.pt for benchmarks.
docs/deepspeed.md describes the files ("The files (facts)").
"""

import argparse
import collections
import copyreg
import math
import os
import random
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler  # noqa: E402
from deepspeed.runtime.zero.config import ZeroStageEnum  # noqa: E402
from deepspeed.utils.tensor_fragment import fragment_address  # noqa: E402

DS_VERSION = "0.19.0"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
# Padding a real run leaves is whatever the buffer held (usually zeros); --dirty-padding
# fills it with this instead, so a reader that takes padding for data fails loudly.
DIRTY = 12345.0
# --break KIND: one inconsistency each, in the last rank's files (expected.pt still
# describes the intact checkpoint).
BREAKS = {
    "missing-rank": "the last rank's optimizer file is not written",
    "mixed-world": "the last rank's optimizer file says partition_count ranks + 1",
    "mixed-tag": "the last rank's files are one step ahead (optimizer 'step'; stage 3 also "
                 "its model file's global_steps), as if from the next tag",
    "short-partition": "the last rank's last fp32 partition is one element short, so the "
                       "partitions no longer add up to param_shapes",
    "param-past-group": "param_shapes lists one more param, ghost.weight, past the flat group",
}


def ParseArgs(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=2,
                   help="0 (with --pipeline): no ZeRO and no optimizer state saved")
    p.add_argument("--ranks", type=int, choices=(1, 2, 3, 4), default=2)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--round-robin", action="store_true",
                   help="round_robin_gradients (stage 1/2): params reordered within a group")
    p.add_argument("--sub-group-size", type=int, default=1_000_000_000,
                   help="stage 3 sub_group_size, in partition elements")
    p.add_argument("--frozen", action="store_true", help="a frozen Linear (requires_grad False)")
    p.add_argument("--tied", action="store_true", help="head.weight tied to embed.weight")
    p.add_argument("--exclude-frozen", action="store_true",
                   help="save_checkpoint(exclude_frozen_parameters=True)")
    p.add_argument("--groups", type=int, choices=(1, 2), default=1,
                   help="2: weights and (biases, norms) in two param groups")
    p.add_argument("--step", type=int, default=2, help="Adam steps = global_steps (tag)")
    p.add_argument("--enum-getattr", action="store_true",
                   help="pickle ZeroStageEnum as getattr(ZeroStageEnum, name) (Python 3.11.0-6)")
    p.add_argument("--legacy", action="store_true",
                   help="non-zip torch.save (checkpoint_serialization: false)")
    p.add_argument("--pipeline", action="store_true",
                   help="PipelineModule: layer_XX-model_YY files, module=None (stage 0 or 1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (with --pipeline)")
    p.add_argument("--no-model-axis", action="store_true",
                   help="PipeDataParallelTopology (PipelineModule's default): layer_XX-model_states.pt")
    p.add_argument("--hostile-global", action="store_true",
                   help="client state holding a pickle of os.system (touches OUT/hostile_marker)")
    p.add_argument("--break", dest="break_", choices=sorted(BREAKS),
                   help="write a tag a strict reader must refuse (see BREAKS)")
    p.add_argument("--dirty-padding", action="store_true",
                   help=f"fill partition padding with {DIRTY} instead of zeros")
    p.add_argument("--size-mb", type=float, default=0,
                   help="scale the model so the tag directory is about this many MiB")
    p.add_argument("--no-expected", action="store_true", help="do not write OUT/expected.pt")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    if args.pipeline and args.stage > 1:
        p.error("--pipeline supports --stage 0 and 1 (DeepSpeed's pipeline engine refuses ZeRO-2/3)")
    if args.stage == 0 and not args.pipeline:
        p.error("--stage 0 needs --pipeline")
    if args.no_model_axis and (not args.pipeline or args.tp != 1):
        p.error("--no-model-axis needs --pipeline and --tp 1 (the topology has no model axis)")
    if args.tp != 1 and not args.pipeline:
        p.error("--tp needs --pipeline")
    if args.pipeline and (args.frozen or args.tied or args.groups != 1 or args.round_robin):
        p.error("--pipeline takes none of --frozen, --tied, --groups, --round-robin")
    if args.break_ and args.pipeline:
        p.error("--break applies to ZeRO checkpoints, not --pipeline")
    if args.step < 1:
        p.error("--step must be at least 1")
    return args


# ---------------------------------------------------------------------------------------
# The model and its training
# ---------------------------------------------------------------------------------------


class TinyModel(nn.Module):
    """Odd sizes on purpose: parameters straddle partitions and groups need padding."""

    def __init__(self, vocab: int, hidden: int, ffn: int, frozen: bool, tied: bool):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.norm = nn.LayerNorm(hidden)
        if frozen:
            self.frozen_proj = nn.Linear(hidden, hidden)
            for param in self.frozen_proj.parameters():
                param.requires_grad = False
        self.head = nn.Linear(hidden, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight
        self.register_buffer("position_ids", torch.arange(vocab))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, hidden))
        self.register_buffer("cache", torch.zeros(3), persistent=False)


def PipelineLayers(vocab: int, hidden: int, ffn: int) -> List[object]:
    """PipelineModule.forward_funcs: modules and a plain function (no file for it)."""
    return [nn.Embedding(vocab, hidden), nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden),
            nn.LayerNorm(hidden), lambda x: x, nn.Linear(hidden, vocab)]


def Sizes(args: argparse.Namespace) -> Tuple[int, int, int]:
    """(vocab, hidden, ffn): tiny by default, or scaled to --size-mb."""
    if not args.size_mb:
        return 37, 24, 41
    # Bytes per trainable parameter in the tag directory: fp32 master + two fp32 moments in
    # the optimizer files, plus the module-dtype copy in the model file for stage 1/2.
    per_param = 12 + (0 if args.stage == 3 else 2 * args.tp)
    params = args.size_mb * 2**20 / per_param
    # vocab = 2 h, ffn = 4 h: about 12 h^2 parameters; odd so partitions straddle.
    hidden = max(8, int(math.sqrt(params / 12))) | 1
    return 2 * hidden + 3, hidden, 4 * hidden + 1


def SeededNormal(numel: int, gen: torch.Generator, scale: float) -> torch.Tensor:
    return torch.randn(numel, generator=gen, dtype=torch.float32).mul_(scale)


class Trained:
    """Named trainable parameters after N Adam steps: fp32 master, moments, module copy."""

    def __init__(self, names: List[str], shapes: List[torch.Size], dtype: torch.dtype,
                 init: torch.Tensor, steps: int, gen: torch.Generator):
        self.names = names
        self.shapes = {n: s for n, s in zip(names, shapes)}
        numels = [s.numel() for s in shapes]
        self.offsets = {}
        offset = 0
        for name, numel in zip(names, numels):
            self.offsets[name] = (offset, numel)
            offset += numel
        # DeepSpeed's master weights start as the module-dtype weights cast up.
        master = init.to(dtype).float()
        exp_avg = torch.zeros_like(master)
        exp_avg_sq = torch.zeros_like(master)
        beta1, beta2 = BETAS
        for step in range(1, steps + 1):
            grad = SeededNormal(master.numel(), gen, 0.01)
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            del grad
            denom = exp_avg_sq.sqrt().div_(math.sqrt(1 - beta2**step)).add_(EPS)
            master.addcdiv_(exp_avg, denom, value=-LR / (1 - beta1**step))
            del denom
        self.master, self.exp_avg, self.exp_avg_sq = master, exp_avg, exp_avg_sq
        # After the step DeepSpeed copies the fp32 partition back into the module weights.
        self.bit16 = master.to(dtype)

    def Flat(self, which: str, name: str) -> torch.Tensor:
        offset, numel = self.offsets[name]
        return getattr(self, which).narrow(0, offset, numel)

    def Full(self, which: str, name: str) -> torch.Tensor:
        return self.Flat(which, name).view(self.shapes[name])


# ---------------------------------------------------------------------------------------
# Pickling as DeepSpeed's Python does
# ---------------------------------------------------------------------------------------


def ReduceStageByValue(member: ZeroStageEnum):
    return ZeroStageEnum, (int(member),)


def ReduceStageByName(member: ZeroStageEnum):
    return getattr, (ZeroStageEnum, member.name)


class HostileHook:
    """Client state a hostile trainer could leave: unpickling it runs a shell command."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


class Saver:
    """torch.save with DeepSpeed's options; records the files written."""

    def __init__(self, args: argparse.Namespace):
        self.legacy = args.legacy
        self.files: List[str] = []
        # Python 3.11.0-3.11.6 pickled Enum members as getattr(cls, name), the others as
        # cls(value); pin the form here, whatever Python runs this.
        copyreg.pickle(ZeroStageEnum, ReduceStageByName if args.enum_getattr else ReduceStageByValue)

    def Save(self, obj, path: str) -> None:
        if self.legacy:
            torch.save(obj, path, _use_new_zipfile_serialization=False)
        else:
            torch.save(obj, path)
        self.files.append(os.path.basename(path))


# ---------------------------------------------------------------------------------------
# ZeRO partitioning
# ---------------------------------------------------------------------------------------


def RoundRobin(count: int, ranks: int) -> List[int]:
    """stage_1_and_2._round_robin_reorder: indices i % ranks == 0 first, then 1, ..."""
    return [i for j in range(ranks) for i in range(count) if i % ranks == j]


def Padded(parts: List[torch.Tensor], total: int, fill: float, dtype: torch.dtype) -> torch.Tensor:
    flat = torch.full((total,), fill, dtype=dtype)
    offset = 0
    for part in parts:
        flat.narrow(0, offset, part.numel()).copy_(part.reshape(-1))
        offset += part.numel()
    return flat


def AdamGroupState(step: int, weight_decay: float, params: List[int]) -> dict:
    """One param group of FusedAdam's state_dict (DeepSpeed's default Adam)."""
    return {"lr": LR, "bias_correction": True, "betas": BETAS, "eps": EPS,
            "weight_decay": weight_decay, "step": step, "params": params}


def LossScalerFor(dtype: str, step: int):
    if dtype == "fp16":
        scaler = DynamicLossScaler(init_scale=2.0**16, scale_window=1000, min_scale=1.0,
                                   delayed_shift=2, consecutive_hysteresis=False,
                                   raise_error_at_min_scale=True, dtype=torch.float16)
        scaler.cur_iter = step
        return scaler
    return LossScaler(scale=1.0)


def Zero12OptimStates(trained: Trained, groups: List[List[str]], ranks: int, args, dirty: float,
                      zero_stage: ZeroStageEnum) -> Tuple[List[dict], List[collections.OrderedDict],
                                                          Dict[str, torch.Tensor]]:
    """Per rank optimizer_state_dict of DeepSpeedZeroOptimizer (stage_1_and_2.py).

    Each group is flattened in (round-robin) order, zero-padded at its end to a multiple
    of 2 x ranks (nccl_start_alignment_factor) and cut in `ranks` equal partitions. Also
    returns param_shapes (one OrderedDict per group, flat order) and the module-dtype flat
    buffers' views, which are what the module state_dict holds for trainable params.
    """
    dtype = DTYPES[args.dtype]
    per_rank = [dict() for _ in range(ranks)]
    param_shapes = []
    module_views: Dict[str, torch.Tensor] = {}
    fp32_parts = [[] for _ in range(ranks)]
    moments = [[] for _ in range(ranks)]
    paddings = [[] for _ in range(ranks)]
    mappings = [[] for _ in range(ranks)]
    for group in groups:
        order = RoundRobin(len(group), ranks) if args.round_robin else list(range(len(group)))
        names = [group[i] for i in order]
        numel = sum(trained.shapes[n].numel() for n in names)
        alignment = 2 * ranks
        total = (numel + alignment - 1) // alignment * alignment
        size = total // ranks
        # The module's trainable weights are views into the bit16 flat buffer (padding zero).
        flat16 = Padded([trained.Flat("bit16", n) for n in names], total, 0.0, dtype)
        offset = 0
        shapes = collections.OrderedDict()
        for name in names:
            shape = trained.shapes[name]
            module_views[name] = flat16.narrow(0, offset, shape.numel()).view(shape)
            shapes[name] = shape
            offset += shape.numel()
        param_shapes.append(shapes)
        flat32 = Padded([trained.Flat("master", n) for n in names], total, dirty, torch.float32)
        avg = Padded([trained.Flat("exp_avg", n) for n in names], total, dirty, torch.float32)
        avg_sq = Padded([trained.Flat("exp_avg_sq", n) for n in names], total, dirty, torch.float32)
        # fragment_address per param for link_hp_params, which walks bit16_groups (the
        # group's original order, not the round-robin one) with running offsets.
        starts, running = {}, 0
        for name in group:
            starts[name] = running
            running += trained.shapes[name].numel()
        for rank in range(ranks):
            left = rank * size
            if numel <= left:
                padding = size
            elif numel < left + size:
                padding = left + size - numel
            else:
                padding = 0
            paddings[rank].append(padding)
            fp32_parts[rank].append(flat32.narrow(0, left, size).clone())
            moments[rank].append((avg.narrow(0, left, size).clone(),
                                  avg_sq.narrow(0, left, size).clone()))
            mapping = collections.OrderedDict()
            for name in group:
                start, end = starts[name], starts[name] + trained.shapes[name].numel()
                lo, hi = max(start, left), min(end, left + size)
                if start < left + size and end > left and lo < hi:
                    mapping[name] = fragment_address(numel=hi - lo, start=lo - left)
            mappings[rank].append(mapping)
    weight_decays = GroupWeightDecays(len(groups))
    for rank in range(ranks):
        state = {i: {"step": args.step, "exp_avg": m, "exp_avg_sq": v}
                 for i, (m, v) in enumerate(moments[rank])}
        base = {"state": state,
                "param_groups": [AdamGroupState(args.step, weight_decays[i], [i])
                                 for i in range(len(groups))]}
        per_rank[rank] = {
            "loss_scaler": LossScalerFor(args.dtype, args.step),
            "dynamic_loss_scale": args.dtype == "fp16",
            "overflow": False,
            "clip_grad": 1.0,
            "base_optimizer_state": base,
            # _get_groups_without_padding: a narrow view, the padding stays in its storage.
            "single_partition_of_fp32_groups": [
                part.narrow(0, 0, part.numel() - pad)
                for part, pad in zip(fp32_parts[rank], paddings[rank])],
            "zero_stage": zero_stage,
            "group_paddings": paddings[rank],
            "partition_count": [ranks] * len(groups),
            "ds_version": DS_VERSION,
            "param_slice_mappings": mappings[rank],
        }
    return per_rank, param_shapes, module_views


def GroupWeightDecays(count: int) -> List[float]:
    return [0.01, 0.0][:count] if count == 2 else [0.0]


def Zero3Chunk(full: torch.Tensor, rank: int, ranks: int, fill: float) -> torch.Tensor:
    """ds_tensor: elements [rank*P, (rank+1)*P) of the flat param, P = ceil(numel/ranks)."""
    flat = full.reshape(-1)
    size = (flat.numel() + ranks - 1) // ranks
    chunk = torch.full((size,), fill, dtype=flat.dtype)
    lo, hi = min(rank * size, flat.numel()), min((rank + 1) * size, flat.numel())
    chunk.narrow(0, 0, hi - lo).copy_(flat[lo:hi])
    return chunk


def SubGroups(names: List[str], trained: Trained, ranks: int, limit: int) -> List[List[str]]:
    """stage3._create_fp16_sub_groups: cut a group when partition elements reach `limit`."""
    partition = {n: (trained.shapes[n].numel() + ranks - 1) // ranks for n in names}
    if limit >= sum(partition.values()):
        return [list(names)]
    subs, current, size = [], [], 0
    for name in names:
        current.append(name)
        size += partition[name]
        if size >= limit or name == names[-1]:
            subs.append(current)
            current, size = [], 0
    return subs


def Zero3OptimStates(trained: Trained, groups: List[List[str]], ranks: int, args,
                     dirty: float) -> Tuple[List[dict], List[collections.OrderedDict]]:
    """Per rank optimizer_state_dict of DeepSpeedZeroOptimizer_Stage3._rigid_state_dict."""
    subs, sub_group_of = [], []
    for index, group in enumerate(groups):
        for sub in SubGroups(group, trained, ranks, args.sub_group_size):
            subs.append(sub)
            sub_group_of.append(index)
    param_shapes = [collections.OrderedDict((n, trained.shapes[n]) for n in sub) for sub in subs]
    weight_decays = GroupWeightDecays(len(groups))
    per_rank = []
    for rank in range(ranks):
        flats, state = [], {}
        for index, sub in enumerate(subs):
            flats.append(torch.cat([Zero3Chunk(trained.Flat("master", n), rank, ranks, dirty)
                                    for n in sub]))
            state[index] = {
                "step": args.step,
                "exp_avg": torch.cat([Zero3Chunk(trained.Flat("exp_avg", n), rank, ranks, dirty)
                                      for n in sub]),
                "exp_avg_sq": torch.cat([Zero3Chunk(trained.Flat("exp_avg_sq", n), rank, ranks,
                                                    dirty) for n in sub]),
            }
        param_groups = [AdamGroupState(args.step, weight_decays[g],
                                       [i for i, owner in enumerate(sub_group_of) if owner == g])
                        for g in range(len(groups))]
        per_rank.append({
            "zero_stage": ZeroStageEnum.weights,
            "loss_scaler": LossScalerFor(args.dtype, args.step),
            "dynamic_loss_scale": args.dtype == "fp16",
            "overflow": False,
            "partition_count": ranks,
            "optimizer_state_dict": {"state": state, "param_groups": param_groups},
            "fp32_flat_groups": flats,
        })
    return per_rank, param_shapes


# ---------------------------------------------------------------------------------------
# The checkpoint
# ---------------------------------------------------------------------------------------


def DsConfig(args: argparse.Namespace) -> dict:
    zero = {"stage": args.stage, "contiguous_gradients": True, "overlap_comm": args.stage == 3,
            "reduce_bucket_size": 500000000, "round_robin_gradients": args.round_robin}
    if args.stage == 3:
        zero["sub_group_size"] = args.sub_group_size
    if args.stage == 0:  # an engine without optimizer (deepspeed.initialize with none)
        config = {"train_batch_size": 8 * args.ranks, "train_micro_batch_size_per_gpu": 8,
                  "zero_optimization": {"stage": 0}, "steps_per_print": 10}
        config["bf16" if args.dtype == "bf16" else "fp16"] = {"enabled": True}
        return config
    config = {
        "train_batch_size": 8 * args.ranks,
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                                 "weight_decay": 0.0}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
    }
    config["bf16" if args.dtype == "bf16" else "fp16"] = {"enabled": True}
    if args.dtype == "fp16":
        config["fp16"].update({"loss_scale": 0, "initial_scale_power": 16, "hysteresis": 2})
    if args.legacy:
        config["checkpoint"] = {"checkpoint_serialization": False}
    return config


def ClientState(args: argparse.Namespace, out: str) -> dict:
    """What a training script passes as client_state: args, RNG states, counters."""
    rng = np.random.RandomState(args.seed)
    py_random = random.Random(args.seed)
    state = {
        "args": argparse.Namespace(lr=LR, seed=args.seed, model="tiny", epochs=3),
        "iteration": args.step,
        "rng_state": {"python": py_random.getstate(), "numpy": rng.get_state(),
                      "torch": torch.Generator().manual_seed(args.seed).get_state()},
    }
    if args.hostile_global:
        state["callback"] = HostileHook(os.path.join(os.path.abspath(out), "hostile_marker"))
    return state


def ModelStates(args, module: Optional[dict], buffer_names: List[str], param_shapes, frozen_shapes,
                shared_params: dict, frozen_fragments, client_state: dict) -> dict:
    """engine._save_checkpoint's dict, keys in its order, client state merged last."""
    state = dict(module=module,
                 buffer_names=buffer_names,
                 optimizer=None,
                 param_shapes=param_shapes,
                 frozen_param_shapes=frozen_shapes,
                 shared_params=shared_params,
                 frozen_param_fragments=frozen_fragments,
                 lr_scheduler=({"last_batch_iteration": args.step - 1} if args.stage else None),
                 data_sampler=None,
                 random_ltd=None,
                 sparse_tensor_module_names=set(),
                 skipped_steps=0,
                 global_steps=args.step,
                 global_samples=args.step * 8 * args.ranks,
                 dp_world_size=args.ranks,
                 mp_world_size=args.tp,
                 ds_config=DsConfig(args),
                 ds_version=DS_VERSION)
    state.update(client_state)
    return state


def OptimFileName(args, rank: int, mp_rank: int = 0) -> str:
    # engine._get_zero_ckpt_prefix: "bf16_" whenever bf16 is enabled, whatever the stage.
    prefix = "bf16_" if args.dtype == "bf16" else ""
    return f"{prefix}zero_pp_rank_{rank}_mp_rank_{mp_rank:02d}_optim_states.pt"


def SharedParams(model: nn.Module) -> Dict[str, str]:
    """engine._get_shared_params: alias -> owner, first name seen owns (module walk order)."""
    owners, shared = {}, {}

    def Walk(module: nn.Module, prefix: str) -> None:
        for name, param in module.named_parameters(recurse=False):
            key = prefix + name
            if id(param) in owners:
                shared[key] = owners[id(param)]
            else:
                owners[id(param)] = key
        for name, child in module.named_children():
            Walk(child, prefix + name + ".")

    Walk(model, "")
    return shared


def BufferNames(model: nn.Module) -> List[str]:
    """engine._get_buffer_names: persistent buffers, module walk order."""
    names = []

    def Walk(module: nn.Module, prefix: str) -> None:
        for name, buf in module.named_buffers(recurse=False):
            if buf is not None and name not in module._non_persistent_buffers_set:
                names.append(prefix + name)
        for name, child in module.named_children():
            Walk(child, prefix + name + ".")

    Walk(model, "")
    return names


def TrainGroups(model: nn.Module, count: int) -> List[List[str]]:
    """The optimizer's param groups (trainable names, model order); 2: weights, then the rest."""
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    if count == 1:
        return [trainable]
    decay = [n for n in trainable if n.endswith("weight") and not n.startswith("norm.")]
    return [decay, [n for n in trainable if n not in decay]]


def Break(args: argparse.Namespace, per_rank: List[dict], param_shapes: list) -> list:
    """Applies --break to the last rank's optimizer state; returns param_shapes to save."""
    last = per_rank[-1]
    kind = args.break_
    if kind == "mixed-world":
        count = last["partition_count"]
        last["partition_count"] = [c + 1 for c in count] if isinstance(count, list) else count + 1
    elif kind == "mixed-tag":
        state = (last["base_optimizer_state"] if args.stage <= 2 else
                 last["optimizer_state_dict"])
        for value in state["state"].values():
            value["step"] += 1
        for group in state["param_groups"]:
            group["step"] += 1
    elif kind == "short-partition":
        key = "single_partition_of_fp32_groups" if args.stage <= 2 else "fp32_flat_groups"
        part = last[key][-1]
        last[key][-1] = part.narrow(0, 0, part.numel() - 1)
    elif kind == "param-past-group":
        param_shapes = [collections.OrderedDict(s) for s in param_shapes]
        param_shapes[-1]["ghost.weight"] = torch.Size([2 * args.ranks + 5])
    return param_shapes


def WriteZero(args: argparse.Namespace, saver: Saver, tag_dir: str) -> dict:
    """Stage 1/2/3 checkpoint of TinyModel; returns the ground truth."""
    dtype = DTYPES[args.dtype]
    ranks = args.ranks
    dirty = DIRTY if args.dirty_padding else 0.0
    torch.manual_seed(args.seed)
    vocab, hidden, ffn = Sizes(args)
    model = TinyModel(vocab, hidden, ffn, args.frozen, args.tied).to(dtype)
    named = dict(model.named_parameters())
    groups = TrainGroups(model, args.groups)
    order = [n for g in groups for n in g]
    gen = torch.Generator().manual_seed(args.seed + 1)
    with torch.no_grad():
        init = torch.cat([named[n].detach().reshape(-1).float() for n in order])
    trained = Trained(order, [named[n].shape for n in order], dtype, init, args.step, gen)
    del init
    frozen_names = [n for n, p in model.named_parameters() if not p.requires_grad]
    shared = SharedParams(model)
    buffer_names = BufferNames(model)
    client_state = ClientState(args, args.out)
    # _save_checkpoint saves frozen attributes when gradients are partitioned (stage >= 2)
    # and the caller did not exclude them; an empty OrderedDict when there are none.
    save_frozen = args.stage >= 2 and not args.exclude_frozen
    config = DsConfig(args)

    def ModuleStateDict(views: Dict[str, torch.Tensor]) -> collections.OrderedDict:
        sd = collections.OrderedDict()
        for key, value in model.state_dict().items():
            owner = shared.get(key, key)
            sd[key] = views[owner] if owner in views else value
        if args.exclude_frozen:
            for name in frozen_names:
                del sd[name]
        return sd

    files_before = len(saver.files)
    if args.stage <= 2:
        stage_enum = ZeroStageEnum.gradients if args.stage == 2 else ZeroStageEnum.optimizer_states
        per_rank, param_shapes, views = Zero12OptimStates(trained, groups, ranks, args, dirty,
                                                          stage_enum)
        frozen_shapes = collections.OrderedDict((n, named[n].shape) for n in frozen_names)
        # .detach().cpu() of a GPU param: a copy with its own storage.
        frozen_fragments = collections.OrderedDict((n, named[n].detach().clone())
                                                   for n in frozen_names)
        module = ModuleStateDict(views)
        saved_shapes = Break(args, per_rank, param_shapes)
        saver.Save(ModelStates(args, module, buffer_names, saved_shapes,
                               frozen_shapes if save_frozen else None, shared,
                               frozen_fragments if save_frozen else None, client_state),
                   os.path.join(tag_dir, "mp_rank_00_model_states.pt"))
        for rank in range(ranks):
            if args.break_ == "missing-rank" and rank == ranks - 1:
                break
            saver.Save({"optimizer_state_dict": per_rank[rank], "ds_config": config,
                        "ds_version": DS_VERSION}, os.path.join(tag_dir, OptimFileName(args, rank)))
    else:
        per_rank, param_shapes = Zero3OptimStates(trained, groups, ranks, args, dirty)
        # Partitioned params keep an empty tensor in the module (free_param); buffers stay.
        placeholders = {n: torch.empty(0, dtype=dtype) for n in named}
        saved_shapes = Break(args, per_rank, param_shapes)
        for rank in range(ranks):
            module = ModuleStateDict(placeholders)
            frozen_shapes = collections.OrderedDict((n, named[n].shape) for n in frozen_names)
            frozen_fragments = collections.OrderedDict(
                (n, Zero3Chunk(named[n].detach(), rank, ranks, dirty).to(dtype))
                for n in frozen_names)
            states = ModelStates(args, module, buffer_names, saved_shapes,
                                 frozen_shapes if save_frozen else None,
                                 shared if rank == 0 else {},
                                 frozen_fragments if save_frozen else None, client_state)
            if args.break_ == "mixed-tag" and rank == ranks - 1:
                states["global_steps"] += 1
            saver.Save(states,
                       os.path.join(tag_dir, f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"))
            if args.break_ == "missing-rank" and rank == ranks - 1:
                break
            saver.Save({"optimizer_state_dict": per_rank[rank], "ds_config": config,
                        "ds_version": DS_VERSION}, os.path.join(tag_dir, OptimFileName(args, rank)))
        module = ModuleStateDict(placeholders)
    del per_rank

    if args.no_expected:
        return {"files": saver.files[files_before:]}
    expected = Expected(args, model, trained, module, param_shapes, buffer_names, frozen_names,
                        shared, save_frozen)
    expected["groups"] = groups
    return expected


def Expected(args, model: nn.Module, trained: Trained, module: dict, param_shapes, buffer_names,
             frozen_names, shared: Dict[str, str], save_frozen: bool) -> dict:
    """The ground truth, from the model and the training, not from the files.

    model        what zero_to_fp32.py writes (convert_zero_checkpoint_to_fp32_state_dict):
                 buffers (cast to fp32 by .float()), frozen params (stage >= 2, not
                 excluded) in their saved dtype (_zero2/_zero3_merge_frozen_params take the
                 fragments as they are), trainable params (the fp32 masters) in param_shapes
                 order, then tied aliases; an alias the same tensor as its owner.
    model_native the same names with buffers and frozen params in their saved dtype (what a
                 zero-copy view shows); trainable params are the fp32 master weights.
    module       the module state_dict as saved (stage 3: empty placeholders for params).
    exp_avg, exp_avg_sq  name -> fp32 Adam moment in the param's shape (trainable params
                 and their tied aliases).
    """
    named = dict(model.named_parameters())
    sd = model.state_dict()
    expected_model = collections.OrderedDict()
    native = collections.OrderedDict()
    for name in sd:
        if name in buffer_names:
            expected_model[name] = sd[name].float()
            native[name] = sd[name].clone()
    if save_frozen:
        for name in frozen_names:
            expected_model[name] = named[name].detach().clone()
            native[name] = named[name].detach().clone()
    moments = {"exp_avg": collections.OrderedDict(), "exp_avg_sq": collections.OrderedDict()}
    for shapes in param_shapes:
        for name in shapes:
            expected_model[name] = trained.Full("master", name).clone()
            native[name] = expected_model[name]
            for key, value in moments.items():
                value[name] = trained.Full(key, name).clone()
    for alias, owner in shared.items():
        if owner in expected_model:
            expected_model[alias] = expected_model[owner]
            native[alias] = native[owner]
            for value in moments.values():
                if owner in value:
                    value[alias] = value[owner]
    return {"model": expected_model, "model_native": native,
            "module": collections.OrderedDict((k, v.clone()) for k, v in module.items()),
            "exp_avg": moments["exp_avg"], "exp_avg_sq": moments["exp_avg_sq"],
            "shared_params": dict(shared), "buffer_names": list(buffer_names)}


def TpSplit(name: str, layer: int) -> Optional[int]:
    """Megatron-like split dim of a tensor-parallel layer's tensor, None when replicated."""
    if layer in (0, 1, 6):  # vocab-parallel embedding, column-parallel linears
        return 0
    if layer == 3 and name.endswith("weight"):  # row-parallel linear (its bias replicated)
        return 1
    return None


def LayerFileName(args: argparse.Namespace, index: int, mp_rank: int) -> str:
    """PipelineModule.ckpt_layer_path: layer_{idx:02d}[-{rank_repr}]-model_states.pt, rank_repr
    the topology's get_rank_repr (data and pipe axes omitted): "model_YY" with a model axis
    (PipeModelDataParallelTopology), "" without one (PipeDataParallelTopology)."""
    rank_repr = "" if args.no_model_axis else f"-model_{mp_rank:02d}"
    return f"layer_{index:02d}{rank_repr}-model_states.pt"


def WritePipeline(args: argparse.Namespace, saver: Saver, tag_dir: str) -> dict:
    """PipelineModule checkpoint: one file per layer and TP rank, module=None, ZeRO-1 optim;
    --stage 0: no optimizer state at all (param_shapes, shared_params None, no optim files).
    The layer files come first: _save_checkpoint builds its dict with module=
    module_state_dict(), which PipelineEngine overrides to write them and return None."""
    dtype = DTYPES[args.dtype]
    torch.manual_seed(args.seed)
    vocab, hidden, ffn = Sizes(args)
    layers = PipelineLayers(vocab, hidden, ffn)
    for layer in layers:
        if isinstance(layer, nn.Module):
            layer.to(dtype)
    pipeline: Dict[str, collections.OrderedDict] = {}
    tp_rules: Dict[str, Optional[int]] = {}
    client_state = ClientState(args, args.out)
    config = DsConfig(args)
    gen = torch.Generator().manual_seed(args.seed + 1)
    for mp_rank in range(args.tp):
        # This TP rank's slice of every layer (a full copy for replicated tensors).
        rank_layers: List[Optional[collections.OrderedDict]] = []
        names, shapes, inits = [], [], []
        for index, layer in enumerate(layers):
            if not isinstance(layer, nn.Module):
                rank_layers.append(None)
                continue
            sd = collections.OrderedDict()
            for key, value in layer.state_dict().items():
                dim = TpSplit(key, index) if args.tp > 1 else None
                tp_rules[f"{index}.{key}"] = dim
                if dim is not None:
                    value = value.chunk(args.tp, dim=dim)[mp_rank]
                sd[key] = value.clone()
                names.append(f"{index}.{key}")
                shapes.append(sd[key].shape)
                inits.append(sd[key].reshape(-1).float())
            rank_layers.append(sd)
        trained, param_shapes = None, None
        if args.stage:  # without an optimizer the weights are the module's as built
            trained = Trained(names, shapes, dtype, torch.cat(inits), args.step, gen)
            per_rank, param_shapes, _ = Zero12OptimStates(trained, [names], args.ranks, args, 0.0,
                                                          ZeroStageEnum.optimizer_states)
        merged = collections.OrderedDict()
        for index, sd in enumerate(rank_layers):
            if sd is None:
                continue  # save_state_dict skips what has no state_dict()
            for key in sd:
                if trained is not None:
                    sd[key] = trained.Full("bit16", f"{index}.{key}").clone()
                merged[f"{index}.{key}"] = sd[key]
            # clone_tensors_for_torch_save: every tensor its own compact storage.
            saver.Save(sd, os.path.join(tag_dir, LayerFileName(args, index, mp_rank)))
        pipeline[f"model_{mp_rank:02d}"] = merged
        # _get_shared_params only `if self.optimizer and zero_optimizer_state`, else None.
        saver.Save(ModelStates(args, None, [], param_shapes, None, {} if args.stage else None,
                               None, client_state),
                   os.path.join(tag_dir, f"mp_rank_{mp_rank:02d}_model_states.pt"))
        for rank in range(args.ranks if args.stage else 0):
            saver.Save({"optimizer_state_dict": per_rank[rank], "ds_config": config,
                        "ds_version": DS_VERSION},
                       os.path.join(tag_dir, OptimFileName(args, rank, mp_rank)))
        if mp_rank == 0:
            first = (trained, param_shapes)
    trained, param_shapes = first
    fp32 = collections.OrderedDict(
        (n, trained.Full("master", n).clone()) for shapes in param_shapes or [] for n in shapes)
    # The merged model is what the layer files hold (module dtype), named <layer>.<key> as
    # PipelineModule names its parameters; model_fp32 is the ZeRO-1 master copy of TP rank 0.
    return {"model": pipeline["model_00"], "model_native": pipeline["model_00"],
            "module": pipeline["model_00"], "model_fp32": fp32,
            "exp_avg": collections.OrderedDict((n, trained.Full("exp_avg", n).clone())
                                               for n in fp32),
            "exp_avg_sq": collections.OrderedDict((n, trained.Full("exp_avg_sq", n).clone())
                                                  for n in fp32),
            "pipeline": pipeline, "tp_rules": tp_rules, "shared_params": {}, "buffer_names": []}


def Main(argv: List[str]) -> int:
    args = ParseArgs(argv)
    tag = f"global_step{args.step}"
    tag_dir = os.path.join(args.out, tag)
    os.makedirs(tag_dir, exist_ok=True)
    saver = Saver(args)
    try:
        if args.pipeline:
            expected = WritePipeline(args, saver, tag_dir)
        else:
            expected = WriteZero(args, saver, tag_dir)
    finally:
        copyreg.dispatch_table.pop(ZeroStageEnum, None)
    # Rank 0 copies DeepSpeed's recovery script into the save directory; a placeholder here,
    # so that readers meet the file a real save directory holds.
    script = os.path.join(args.out, "zero_to_fp32.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write("#!/usr/bin/env python\n# Placeholder for DeepSpeed's utils/zero_to_fp32.py, "
                "which save_checkpoint copies here.\n")
    os.chmod(script, 0o755)
    # Rank 0 writes `latest` after its own files (engine.save_checkpoint), no newline.
    with open(os.path.join(args.out, "latest"), "w", encoding="utf-8") as f:
        f.write(tag)
    if not args.no_expected:
        expected["config"] = {k: v for k, v in vars(args).items()}
        expected["tag"] = tag
        expected["files"] = sorted(saver.files)
        torch.save(expected, os.path.join(args.out, "expected.pt"))
    return 0


if __name__ == "__main__":
    sys.exit(Main(sys.argv[1:]))
