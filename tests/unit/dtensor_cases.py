"""DTensor rank files in PyTorch 2.2-2.4's pickled form, for dtensor_test.cc.

Usage: dtensor_cases.py OUT_DIR. Exits 77 when torch is missing.

PyTorch 1.13 (these machines) has no DTensor, so stand-ins named as 2.2-2.4 named them
write what their torch.save pickled, as read from that source: DTensor
(torch.distributed._tensor.api, __slots__ _local_tensor and _spec, so its state is a
(None, slots) pair) through Tensor.__reduce_ex__'s _rebuild_from_type_v2 of
_rebuild_wrapper_subclass; DTensorSpec and TensorMeta in
torch.distributed._tensor.placement_types with Shard and Replicate (dataclasses and a
NamedTuple); a DeviceMesh (torch.distributed.device_mesh) holding its `mesh` tensor and
_coordinate_on_dim. Every whole tensor is arange(numel) as float32, so each local element
is its index in the whole.

Writes old_rank_R.pt for R = 0..3, a 2x2 mesh ("dp", "tp"):
  w [5, 3]  [Shard(0), Shard(0)]  (uneven and nested: rows 0+2, 2+1, 3+1, 4+1)
  b [7]     [Replicate(), Shard(0)]
"""
import dataclasses
import os
import sys
import types
import typing

try:
    import torch
except ImportError:
    sys.exit(77)


def module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


api = module("torch.distributed._tensor.api")
placement_types = module("torch.distributed._tensor.placement_types")
device_mesh = module("torch.distributed.device_mesh")


def place(cls, m):
    cls.__module__ = m.__name__
    setattr(m, cls.__name__, cls)
    return cls


@dataclasses.dataclass(frozen=True)
class Shard:
    dim: int


@dataclasses.dataclass(frozen=True)
class Replicate:
    pass


class TensorMeta(typing.NamedTuple):
    shape: torch.Size
    stride: tuple
    dtype: torch.dtype


@dataclasses.dataclass
class DTensorSpec:
    mesh: object
    placements: tuple
    tensor_meta: object = None


class DeviceMesh:
    def __init__(self, mesh, names, coordinate):
        self.device_type = "cpu"
        self.mesh = mesh
        self.mesh_dim_names = names
        self._coordinate_on_dim = coordinate


class DTensor:
    __slots__ = ["_local_tensor", "_spec"]

    def __init__(self, local, spec):
        self._local_tensor = local
        self._spec = spec

    def __reduce_ex__(self, proto):
        meta = self._spec.tensor_meta
        args = (DTensor, meta.dtype, tuple(meta.shape), meta.stride, 0, torch.strided,
                torch.device("cpu"), False)
        state = (None, {"_local_tensor": self._local_tensor, "_spec": self._spec})
        return (torch._tensor._rebuild_from_type_v2,
                (torch._utils._rebuild_wrapper_subclass, DTensor, args, state))


for cls, m in [(Shard, placement_types), (Replicate, placement_types),
               (TensorMeta, placement_types), (DTensorSpec, placement_types),
               (DeviceMesh, device_mesh), (DTensor, api)]:
    place(cls, m)


def local_piece(whole, coordinate, mesh_shape, placements):
    """torch.chunk along each Shard, nested in placement order."""
    piece = whole
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, Shard):
            chunks = torch.chunk(piece, mesh_shape[mesh_dim], dim=p.dim)
            c = coordinate[mesh_dim]
            if c < len(chunks):
                piece = chunks[c]
            else:
                shape = list(piece.shape)
                shape[p.dim] = 0
                piece = piece.new_empty(shape)
    return piece.clone()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    mesh_shape = (2, 2)
    cases = {"w": ([5, 3], (Shard(0), Shard(0))), "b": ([7], (Replicate(), Shard(0)))}
    for rank in range(4):
        coordinate = [rank // 2, rank % 2]
        mesh = DeviceMesh(torch.arange(4, dtype=torch.int32).reshape(mesh_shape), ("dp", "tp"),
                          coordinate)
        state = {}
        for name, (shape, placements) in cases.items():
            n = 1
            for s in shape:
                n *= s
            whole = torch.arange(n, dtype=torch.float32).reshape(shape)
            meta = TensorMeta(torch.Size(shape), whole.stride(), torch.float32)
            spec = DTensorSpec(mesh, placements, meta)
            state[name] = DTensor(local_piece(whole, coordinate, mesh_shape, placements), spec)
        torch.save(state, os.path.join(out, "old_rank_%d.pt" % rank))


main()
