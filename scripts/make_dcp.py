#!/usr/bin/python3
"""Writes PyTorch distributed checkpoints (torch.distributed.checkpoint, "DCP") for ckptfs
tests and the bench, with PyTorch 1.13 and the standard library only.

    make_dcp.py OUT --case training|tp|uneven|big|wide [--ranks N] [--seed S] [--bytes SIZE]
                [--hostile KIND] [--hf] [--no-expected]
    make_dcp.py OUT --verify                   reassemble OUT's tensors, compare with
                                               its expected.safetensors
    make_dcp.py --self-check FIXTURES_DIR      prove the format against PyTorch 2.11's
                                               own files (/work/shared/fixtures/dcp)

PyTorch 1.13 has no torch.distributed.checkpoint; this script writes what PyTorch 2.11's
dcp.save with FileSystemWriter and DefaultSavePlanner writes, step by step as they do it:

  .metadata        pickle (protocol 4) of torch.distributed.checkpoint.metadata.Metadata:
                   state_dict_metadata (TensorStorageMetadata with chunks, or
                   BytesStorageMetadata), planner_data (flattened name -> path tuple, list
                   indices as ints), storage_data (MetadataIndex -> filesystem._StorageInfo),
                   storage_meta (StorageMeta), version "1.0.0". The classes here are
                   stand-ins registered under PyTorch's module names, so the pickle names
                   exactly the globals PyTorch's does, with the same state layout.
  __R_0.distcp     one file per rank R: the rank's non-tensor values first (torch.save of
                   each value), then its tensor chunks (torch.save of a contiguous tensor
                   with its own storage), ordered by the size of the whole tensor, smallest
                   first (stable), as 2.11's writer orders them. Items are appended; each
                   _StorageInfo is (relative_path, offset, length). Each item is the zip
                   torch.save of 2.11 writes (its records .format_version,
                   .storage_alignment, byteorder, .data/serialization_id included), written
                   here by hand: for the same value and serialization id, the same bytes.

How a tensor is split: DTensor's rule (compute_local_shape_and_global_offset): Shard(d)
splits like torch.chunk (ceil-sized pieces, the last smaller or empty; an empty piece's
offset is the dimension's size), over a 1-D or 2-D mesh in row-major rank order.
Replicate() and plain tensors (and non-tensor values) are held by every rank and saved
once: dedup_save_plans gives each to the rank whose plan is smallest so far (not always
the lowest rank). With more than one rank, plans and write results go through a pickle
round trip as torch.distributed's gather/scatter does, so that the metadata pickle shares
(memoizes) exactly the objects PyTorch's shares.

Cases (--ranks defaults to 4; 1 for training, 8 for wide):
  training  nested training state: model, optim state (exp_avg, step) and param_groups,
            step (int), a note (str); like the fixtures' single/ (1 rank).
  tp        Shard(0), Shard(1), Shard(2) of a 3-D tensor, Replicate(), a 2x2 mesh
            [Shard(0), Shard(1)], plain tensors and step; like the fixtures' dtensor/.
  uneven    Shard(0) of 10 rows (3,3,3,1), 9 rows (3,3,3,0: one empty chunk) and 2 rows
            (1,1,0,0) over 4 ranks, Shard(1) of 5 columns, a 0-d tensor, a list of
            tensors (model.experts.0, model.experts.1: int list indices in the paths).
  big       about --bytes (default 2G) of bf16 64 MiB matrices over 4 ranks, Shard(0) and
            Shard(1) alternating, written streaming: one whole tensor in memory at a time.
  wide      one 32000x8192 bf16 matrix Shard(1) over 8 ranks (the issue's figure for
            memory per tensor: chunks, not rows).
--hostile KIND breaks the case's output in exactly one way (expected.* stay those of the
sound case):
  path_outside      a _StorageInfo names "../x.distcp"
  absolute_path     a _StorageInfo names an absolute path (the real file's)
  range_past_end    an item's offset + length runs 4096 bytes past its file's end
  overlap           an extra chunk (rows 1.. of a chunk, its own stored item) overlaps it
  hole              one chunk of the most-split tensor (and its storage entry) is gone
  overflow          a tensor's size has a dimension of 2**64-1
  global_os_system  the pickle calls the global os.system ("echo ...") as `version`
  unknown_class     a value's storage metadata is ...metadata.SparseStorageMetadata
  missing_file      the last rank's .distcp file is missing
  transform         an item records transform_descriptors ["zstd"] (bytes not compressed)
--hf writes the Hugging Face form instead of .metadata + .distcp: per rank R and file
index K, shard-0000{R+1}-model-0000K-of-0000N.safetensors with the rank's chunks and
DCP_SHARDING_INFO / DCP_VERSION in __metadata__ (the model sub-tree only; tensors go to
files 1, 2, 1, 2, ... in order, as the fixture's fqn_to_index_mapping does).

--self-check writes the fixtures' own state dicts (make_fixtures.py's model, seed 1, same
placements) and compares: the .metadata disassembles to the same opcodes, globals and
values (uuid and path aside); every PyTorch item, loaded and saved again with its
serialization id, gives PyTorch's bytes; with PyTorch's save_id, path and serialization
ids put in, .metadata and every .distcp are byte-identical (torch 1.13 draws the same
random values here); the --hf shards have PyTorch's headers and tensor bytes.

Every case also writes expected.safetensors (every tensor whole, by its flattened name,
written by hand in the layout of safetensors.torch.save_file) and expected.json (the
non-tensor values, nested as the state dict had them; tuples become lists), unless
--no-expected (the bench's big case: .metadata and .distcp only). Output is
deterministic for a seed (uuids included).
"""

import argparse
import collections
import dataclasses
import enum
import io
import json
import os
import pathlib
import pickle
import pickletools
import random
import struct
import sys
import types
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

METADATA_MODULE = "torch.distributed.checkpoint.metadata"
FILESYSTEM_MODULE = "torch.distributed.checkpoint.filesystem"
DCP_VERSION = "1.0.0"
HF_DCP_VERSION = "1.0"
HOSTILE = {
    "path_outside": 'a _StorageInfo names "../x.distcp"',
    "absolute_path": "a _StorageInfo names an absolute path (the real file's)",
    "range_past_end": "an item's offset + length runs past its file's end",
    "overlap": "an extra chunk (its own stored bytes) overlaps another chunk",
    "hole": "one chunk of a sharded tensor (and its storage entry) is gone",
    "overflow": "a tensor's size has a dimension of 2**64-1",
    "global_os_system": "the pickle calls the global os.system",
    "unknown_class": "a value's storage metadata is a class PyTorch does not have",
    "missing_file": "the last rank's .distcp file is missing",
    "transform": 'an item records transform_descriptors ["zstd"] (bytes not compressed)',
}


class UsageError(Exception):
    """Bad command line; reported on one line with exit code 2."""


# ---------------------------------------------------------------------------
# Stand-ins for PyTorch's classes, pickled under PyTorch's names

def RegisterModule(name: str) -> types.ModuleType:
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so that submodules resolve
        sys.modules[name] = module
    return module


def StandIn(module_name: str):
    """Class decorator: the class pickles as module_name.<its name>."""
    module = RegisterModule(module_name)

    def Register(cls):
        cls.__module__ = module_name
        setattr(module, cls.__qualname__, cls)
        return cls
    return Register


RegisterModule("torch.distributed.checkpoint")


@StandIn(METADATA_MODULE)
class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2

    def __reduce_ex__(self, protocol):
        # By value, as the Python PyTorch 2.11 ran on pickles enums (3.11 pickles by name).
        return (self.__class__, (self._value_,))


class _StridedLayout:
    """torch.strided as PyTorch 2.x pickles it (1.13 cannot pickle layouts)."""

    def __reduce__(self):
        return (torch.serialization._get_layout, ("torch.strided",))


STRIDED = _StridedLayout()


@StandIn(METADATA_MODULE)
@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


@StandIn(METADATA_MODULE)
@dataclasses.dataclass
class TensorProperties:
    """State is the tuple (dtype, layout, requires_grad, memory format, pin_memory)."""
    dtype: torch.dtype
    requires_grad: bool = False
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, STRIDED, self.requires_grad,
                _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

    def __setstate__(self, state):
        self.dtype, _, self.requires_grad, _, self.pin_memory = state


@StandIn(METADATA_MODULE)
@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: List[ChunkStorageMetadata]


@StandIn(METADATA_MODULE)
@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@StandIn(METADATA_MODULE)
@dataclasses.dataclass
class StorageMeta:
    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: List[str] = dataclasses.field(default_factory=list)


@StandIn(METADATA_MODULE)
@dataclasses.dataclass
class Metadata:
    state_dict_metadata: Dict[str, Any]
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[StorageMeta] = None
    version: Optional[str] = None


@StandIn(METADATA_MODULE)
class MetadataIndex:
    """Like PyTorch's frozen dataclass: __dict__ is fqn, index, then offset (only for
    tensors); equal and hashed by (fqn, offset)."""

    def __init__(self, fqn: str, offset=None, index: Optional[int] = None):
        self.fqn = fqn
        self.index = index
        if offset is not None:
            self.offset = torch.Size(offset)

    def Key(self):
        return (self.fqn, tuple(self.offset) if hasattr(self, "offset") else None)

    def __eq__(self, other):
        return isinstance(other, MetadataIndex) and self.Key() == other.Key()

    def __hash__(self):
        return hash(self.Key())

    def Replace(self, index: int) -> "MetadataIndex":
        return MetadataIndex(self.fqn, getattr(self, "offset", None), index)


@StandIn(FILESYSTEM_MODULE)
@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: Optional[List[str]] = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}
    # No __setstate__, as in PyTorch: pickle's BUILD then interns the attribute names,
    # and the metadata pickle shares them (a dict.update here would not, and would leave
    # its own key strings in the class's shared-key table for every later instance).


# ---------------------------------------------------------------------------
# What a state dict holds: plain values, tensors, DTensor-like sharded tensors

class Lazy:
    """A whole tensor made on demand (the big case never holds the whole model)."""

    def __init__(self, shape: Tuple[int, ...], dtype: torch.dtype, make: Callable[[], torch.Tensor]):
        self.shape, self.dtype, self.make = tuple(shape), dtype, make


class DTensor:
    """A tensor distributed over a mesh (shape, e.g. (4,) or (2, 2); ranks row-major)
    with placements: ("S", dim) for Shard(dim), ("R",) for Replicate()."""

    def __init__(self, full, mesh: Tuple[int, ...], placements: List[tuple]):
        self.full, self.mesh, self.placements = full, tuple(mesh), list(placements)
        self.shape, self.dtype = tuple(full.shape), full.dtype


def IsTensor(value) -> bool:
    return isinstance(value, (torch.Tensor, DTensor, Lazy))


def Whole(value) -> torch.Tensor:
    if isinstance(value, DTensor):
        value = value.full
    return value.make() if isinstance(value, Lazy) else value


def MeshCoordinate(mesh: Tuple[int, ...], rank: int) -> Optional[List[int]]:
    total = 1
    for m in mesh:
        total *= m
    if rank >= total:
        return None
    coord = []
    for m in reversed(mesh):
        coord.append(rank % m)
        rank //= m
    return coord[::-1]


def LocalShapeAndOffset(shape, mesh, placements, coord) -> Tuple[List[int], List[int]]:
    """DTensor's compute_local_shape_and_global_offset: Shard(d) is torch.chunk's split
    of the current local size; an empty piece starts at the end of the dimension."""
    local, offset = list(shape), [0] * len(shape)
    for i, placement in enumerate(placements):
        if placement[0] != "S":
            continue
        d, n, k = placement[1], mesh[i], coord[i]
        full_chunk = (local[d] + n - 1) // n
        start = full_chunk * k
        if start >= local[d]:
            size, start = 0, local[d]
        else:
            size = min(local[d], start + full_chunk) - start
        local[d] = size
        offset[d] += start
    return local, offset


# ---------------------------------------------------------------------------
# Flattening, as DefaultSavePlanner / flatten_state_dict / traverse_state_dict do

def TraverseStateDict(state_dict: dict, visit: Callable[[tuple, Any], None]) -> None:
    """Mappings are always entered; a list is entered only if it holds a tensor or a
    container that is entered; anything else is one value (one bytes item)."""
    def IsTerminal(value) -> bool:
        if isinstance(value, dict):
            return False
        if not isinstance(value, list):
            return True
        for entry in value:
            if isinstance(entry, (dict, list)) and not IsTerminal(entry):
                return False
            if IsTensor(entry):
                return False
        return True

    def Walk(path: tuple, value) -> None:
        if IsTerminal(value):
            visit(path, value)
        elif isinstance(value, dict):
            for k, v in value.items():
                Walk(path + (str(k),), v)
        else:
            for i, v in enumerate(value):
                Walk(path + (i,), v)

    for key, value in state_dict.items():
        Walk((str(key),), value)


def FlattenStateDict(state_dict: dict) -> Tuple[dict, dict]:
    flat, mappings = {}, {}

    def Visit(path, value):
        fqn = ".".join(map(str, path))
        if fqn in flat:
            raise ValueError(f"duplicated flatten key {fqn}")
        flat[fqn] = value
        mappings[fqn] = path
    TraverseStateDict(state_dict, Visit)
    return flat, mappings


# ---------------------------------------------------------------------------
# Plans, as create_default_local_save_plan / dedup_save_plans /
# create_default_global_save_plan make them

BYTE_IO, TENSOR, SHARD = "byte_io", "tensor", "shard"


@dataclasses.dataclass
class TensorWriteData:
    chunk: ChunkStorageMetadata
    properties: TensorProperties
    size: torch.Size


@dataclasses.dataclass
class WriteItem:
    index: MetadataIndex
    type: str
    tensor_data: Optional[TensorWriteData] = None

    def StorageSize(self) -> Optional[int]:
        if self.tensor_data is None:
            return None
        n = 1
        for s in self.tensor_data.size:
            n *= s
        return n * ElementSize(self.tensor_data.properties.dtype)


@dataclasses.dataclass
class SavePlan:
    items: List[WriteItem]
    planner_data: Any = None


@dataclasses.dataclass
class WriteResult:
    index: MetadataIndex
    size_in_bytes: int
    storage_data: _StorageInfo


def ElementSize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def RoundTrip(obj):
    """What gather_object / scatter_object_list do to an object: a pickled copy."""
    return pickle.loads(pickle.dumps(obj))


def LocalPlan(flat: dict, mappings: dict, rank: int) -> SavePlan:
    items = []
    for fqn, obj in flat.items():
        if isinstance(obj, DTensor):
            coord = MeshCoordinate(obj.mesh, rank)
            if coord is None:
                continue
            sizes, offsets = LocalShapeAndOffset(obj.shape, obj.mesh, obj.placements, coord)
            sizes, offsets = torch.Size(sizes), torch.Size(offsets)
            items.append(WriteItem(MetadataIndex(fqn, offsets), SHARD, TensorWriteData(
                ChunkStorageMetadata(offsets, sizes), TensorProperties(obj.dtype),
                torch.Size(obj.shape))))
        elif IsTensor(obj):
            offsets = torch.Size([0] * len(obj.shape))
            items.append(WriteItem(MetadataIndex(fqn, offsets), TENSOR, TensorWriteData(
                ChunkStorageMetadata(offsets, torch.Size(obj.shape)),
                TensorProperties(obj.dtype), torch.Size(obj.shape))))
        else:
            items.append(WriteItem(MetadataIndex(fqn), BYTE_IO))
    return SavePlan(items, mappings)


def DedupSavePlans(plans: List[SavePlan]) -> List[SavePlan]:
    """Each item held by several ranks stays with the rank whose plan is smallest so far
    (ties: lowest rank), visiting items in plan order."""
    holders: Dict[MetadataIndex, List[int]] = {}
    by_index: Dict[MetadataIndex, WriteItem] = {}
    for p, plan in enumerate(plans):
        for item in plan.items:
            holders.setdefault(item.index, [])
            if p not in holders[item.index]:
                holders[item.index].append(p)
            by_index[item.index] = item
    remove = [set() for _ in plans]
    size = [0] * len(plans)
    for index, ranks in holders.items():
        keep = min(sorted(ranks), key=lambda p: size[p])
        size[keep] += by_index[index].StorageSize() or 1
        for p in ranks:
            if p != keep:
                remove[p].add(index)
    return [dataclasses.replace(plan, items=[i for i in plan.items if i.index not in remove[p]])
            for p, plan in enumerate(plans)]


def GlobalPlan(plans: List[SavePlan]) -> Tuple[List[SavePlan], Metadata]:
    md: Dict[str, Any] = {}
    new_plans = []
    for plan in plans:
        items = []
        for item in plan.items:
            if item.type == BYTE_IO:
                md[item.index.fqn] = BytesStorageMetadata()
                items.append(item)
                continue
            tmd = md.setdefault(item.index.fqn, TensorStorageMetadata(
                item.tensor_data.properties, item.tensor_data.size, []))
            items.append(dataclasses.replace(item, index=item.index.Replace(len(tmd.chunks))))
            tmd.chunks.append(item.tensor_data.chunk)
        new_plans.append(dataclasses.replace(plan, items=items))
    metadata = Metadata(md)
    merged = dict(collections.ChainMap(*[p.planner_data for p in new_plans]))
    return new_plans, dataclasses.replace(metadata, planner_data=merged)


# ---------------------------------------------------------------------------
# torch.save as PyTorch 2.11 writes it (1.13 writes fewer records): a zip of stored
# records, each local header padded with an "FB" extra field so that data starts at a
# multiple of 64, a data descriptor after each record, central directory, zip64 end
# records. Records: data.pkl, .format_version, .storage_alignment, byteorder, data/N,
# version, .data/serialization_id.

ZIP_ALIGNMENT = 64


class _RecordCollector:
    """Takes the place of torch's PyTorchFileWriter under torch.serialization._save."""

    def __init__(self):
        self.records: List[Tuple[str, Any]] = []

    def write_record(self, name, data, size):
        self.records.append((name, data if isinstance(data, (bytes, bytearray)) else None))


class TorchZipWriter:
    """Writes one torch.save zip to a file at its current position (offsets relative to
    that position, as torch.save into an open file gives)."""

    def __init__(self, f):
        self.f, self.start, self.central = f, f.tell(), []

    def Record(self, name: str, data) -> None:
        import zlib
        name_bytes = f"archive/{name}".encode()
        cursor = self.f.tell() - self.start
        size = len(data) if isinstance(data, (bytes, bytearray)) else data.nbytes
        if size >= 0xFFFFFFFF or cursor >= 0xFFFFFFFF:
            raise ValueError("records of 4 GiB or more need zip64 headers (not written here)")
        begin = cursor + 30 + len(name_bytes) + 4
        pad = -begin % ZIP_ALIGNMENT
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        flags = 0x0808 if size else 0x0800  # an empty record has no data descriptor
        self.f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0,
                                 len(name_bytes), len(extra)) + name_bytes + extra)
        crc = 0
        if size:
            self.f.write(data)
            crc = zlib.crc32(data) & 0xFFFFFFFF
            self.f.write(struct.pack("<IIII", 0x08074B50, crc, size, size))
        self.central.append((name_bytes, flags, crc, size, cursor))

    def Finish(self) -> None:
        cd_offset = self.f.tell() - self.start
        for name_bytes, flags, crc, size, offset in self.central:
            self.f.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0, 0, flags, 0, 0, 0,
                                     crc, size, size, len(name_bytes), 0, 0, 0, 0, 0, offset)
                         + name_bytes)
        eocd64 = self.f.tell() - self.start
        cd_size, n = eocd64 - cd_offset, len(self.central)
        self.f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 0x2D, 0, 0, n, n,
                                 cd_size, cd_offset))
        self.f.write(struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1))
        self.f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, cd_size, cd_offset, 0))


def TorchSave(obj, f, serialization_id: Optional[str] = None) -> None:
    """torch.save(obj, f) with PyTorch 2.11's records; serialization_id=None writes
    1.13's records instead (data.pkl, data/N, version), byte for byte."""
    collector = _RecordCollector()
    torch.serialization._save(obj, collector, pickle, 2)
    storages = [name for name, data in collector.records if data is None]
    if storages and not (isinstance(obj, torch.Tensor) and storages == ["data/0"]):
        raise ValueError("TorchSave takes one tensor with its own storage, or plain values")
    zw = TorchZipWriter(f)
    zw.Record("data.pkl", collector.records[0][1])
    if serialization_id is not None:
        zw.Record(".format_version", b"1")
        zw.Record(".storage_alignment", str(ZIP_ALIGNMENT).encode())
        zw.Record("byteorder", sys.byteorder.encode())
    if storages:
        zw.Record("data/0", TensorRawBytes(obj) if obj.numel() else b"")
    zw.Record("version", b"3\n")
    if serialization_id is not None:
        zw.Record(".data/serialization_id", serialization_id.encode())
    zw.Finish()


class SerializationIds:
    """2.11 gives every torch.save a 40-digit id; here each rank draws them from the
    seed, or takes them from `fixed` (rank -> ids in file order; --self-check)."""

    def __init__(self, seed: int, fixed: Optional[Dict[int, List[str]]] = None):
        self.seed, self.fixed, self.rngs = seed, fixed, {}

    def Next(self, rank: int) -> str:
        if self.fixed is not None:
            return self.fixed[rank].pop(0)
        rng = self.rngs.setdefault(rank, random.Random(self.seed * 7919 + rank))
        return "".join(rng.choice("0123456789") for _ in range(40))


# ---------------------------------------------------------------------------
# Writing the rank files and .metadata

def ChunkOf(whole: torch.Tensor, item: WriteItem) -> torch.Tensor:
    chunk = whole
    for d, (o, s) in enumerate(zip(item.tensor_data.chunk.offsets, item.tensor_data.chunk.sizes)):
        chunk = chunk.narrow(d, o, s)
    if not chunk.is_contiguous() or chunk.storage().size() != chunk.numel() \
            or chunk.storage_offset() != 0:
        chunk = chunk.clone(memory_format=torch.contiguous_format)
    return chunk


def WriteRanks(out_dir: str, plans: List[SavePlan], flat: dict,
               on_whole: Callable[[str, torch.Tensor], None],
               ids: SerializationIds) -> List[List[WriteResult]]:
    """Writes __R_0.distcp for every rank at once, so each whole tensor is made once:
    each rank's tensors go in order of whole-tensor size (stable), which is one global
    order filtered per rank. on_whole sees every tensor once, whole."""
    keys = [f"__{r}_0.distcp" for r in range(len(plans))]
    files = [open(os.path.join(out_dir, k), "wb") for k in keys]
    results: List[List[WriteResult]] = [[] for _ in plans]
    try:
        def Save(r, obj, item):
            f = files[r]
            offset = f.tell()
            TorchSave(obj, f, ids.Next(r))
            length = f.tell() - offset
            results[r].append(WriteResult(item.index, length, _StorageInfo(keys[r], offset, length)))

        for r, plan in enumerate(plans):
            for item in plan.items:
                if item.type == BYTE_IO:
                    Save(r, flat[item.index.fqn], item)
        holders: Dict[str, List[Tuple[int, WriteItem]]] = collections.defaultdict(list)
        for r, plan in enumerate(plans):
            for item in plan.items:
                if item.type != BYTE_IO:
                    holders[item.index.fqn].append((r, item))
        order = [fqn for fqn, v in flat.items() if IsTensor(v)]
        sizes = {fqn: TensorBytes(flat[fqn]) for fqn in order}
        for fqn in sorted(order, key=lambda n: sizes[n]):
            whole = Whole(flat[fqn])
            for r, item in holders.get(fqn, []):
                Save(r, ChunkOf(whole, item), item)
            on_whole(fqn, whole)
            del whole
    finally:
        for f in files:
            f.close()
    return results


def TensorBytes(value) -> int:
    n = 1
    for s in value.shape:
        n *= s
    return n * ElementSize(value.dtype)


def SaveId(seed: int) -> str:
    return str(uuid.UUID(int=random.Random(seed).getrandbits(128), version=4))


def SaveDcp(out_dir: str, state_dict: dict, ranks: int, seed: int,
            on_whole: Callable[[str, torch.Tensor], None],
            ids: Optional[SerializationIds] = None) -> Metadata:
    """dcp.save's steps: local plans, (gather), global plan, (scatter), write, (gather),
    finish. Writes the rank files and returns the Metadata (not yet written)."""
    dist = ranks > 1
    plans, flat = [], None
    for r in range(ranks):
        flat, mappings = FlattenStateDict(state_dict)
        plan = LocalPlan(flat, mappings, r)
        plans.append(RoundTrip(plan) if dist else plan)
    plans = DedupSavePlans(plans)
    plans, metadata = GlobalPlan(plans)
    if dist:
        plans = [RoundTrip(p) for p in plans]
    results = WriteRanks(out_dir, plans, flat, on_whole, ids or SerializationIds(seed))
    if dist:
        results = [RoundTrip(r) for r in results]
    storage = {}
    for wr_list in results:
        storage.update({wr.index: wr.storage_data for wr in wr_list})
    metadata.storage_data = storage
    metadata.storage_meta = StorageMeta(checkpoint_id=pathlib.Path(os.path.abspath(out_dir)),
                                        save_id=SaveId(seed))
    metadata.version = DCP_VERSION
    return metadata


def WriteMetadata(out_dir: str, metadata: Metadata) -> None:
    with open(os.path.join(out_dir, ".metadata"), "wb") as f:
        f.write(MetadataBytes(metadata))


# ---------------------------------------------------------------------------
# expected.safetensors and expected.json

ST_DTYPES = {  # torch dtype -> (safetensors name, rank in the reference library's order)
    torch.bool: ("BOOL", 0), torch.uint8: ("U8", 1), torch.int8: ("I8", 2),
    torch.int16: ("I16", 5), torch.float16: ("F16", 7), torch.bfloat16: ("BF16", 8),
    torch.int32: ("I32", 9), torch.float32: ("F32", 11), torch.float64: ("F64", 12),
    torch.int64: ("I64", 13),
}
SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def TensorRawBytes(t: torch.Tensor):
    """The tensor's bytes, little-endian, without a copy where it is contiguous."""
    t = t.contiguous().reshape(-1)
    return t.view(SAME_SIZE_INT[t.element_size()]).numpy()


class SafetensorsWriter:
    """Writes a safetensors file as safetensors.torch.save_file lays it out (tensors by
    dtype, widest first, then by name; header padded with spaces to 8 bytes), taking
    tensors one at a time in any order."""

    def __init__(self, path: str, specs: Dict[str, Tuple[torch.dtype, Tuple[int, ...]]],
                 metadata: Optional[Dict[str, str]] = None):
        names = sorted(specs, key=lambda n: (-ST_DTYPES[specs[n][0]][1], n))
        header: Dict[str, Any] = {}
        if metadata:
            header["__metadata__"] = metadata
        self.where, offset = {}, 0
        for n in names:
            dtype, shape = specs[n]
            size = ElementSize(dtype)
            for s in shape:
                size *= s
            header[n] = {"dtype": ST_DTYPES[dtype][0], "shape": list(shape),
                         "data_offsets": [offset, offset + size]}
            self.where[n] = (offset, size)
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        self.base = 8 + len(text)
        self.f = open(path, "wb")
        self.f.write(struct.pack("<Q", len(text)) + text)
        self.f.truncate(self.base + offset)
        self.missing = set(names)

    def Write(self, name: str, t: torch.Tensor) -> None:
        offset, size = self.where[name]
        data = TensorRawBytes(t)
        assert data.nbytes == size, name
        self.f.seek(self.base + offset)
        self.f.write(data)
        self.missing.discard(name)

    def Close(self) -> None:
        self.f.close()
        if self.missing:
            raise RuntimeError(f"tensors never written: {sorted(self.missing)}")


def FlatTensors(state_dict: dict) -> Dict[str, Any]:
    flat, _ = FlattenStateDict(state_dict)
    return {fqn: v for fqn, v in flat.items() if IsTensor(v)}


def NonTensorValues(value):
    """The state dict without its tensors (dicts left empty by that are dropped)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if IsTensor(v):
                continue
            v2 = NonTensorValues(v)
            if isinstance(v, dict) and v and not v2:
                continue
            out[str(k)] = v2
        return out
    if isinstance(value, (list, tuple)):
        return [None if IsTensor(v) else NonTensorValues(v) for v in value]
    return value


def WriteExpectedJson(out_dir: str, state_dict: dict) -> None:
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(NonTensorValues(state_dict), f, indent=1, sort_keys=False)
        f.write("\n")


# ---------------------------------------------------------------------------
# Cases

def FixtureModel(seed: int) -> Dict[str, torch.Tensor]:
    """The model of the fixtures' make_fixtures.py (same names, shapes, dtypes, seed use)."""
    g = torch.Generator().manual_seed(seed)
    k = 1 + seed % 3
    return {
        "embed.weight": torch.randn(64 * k + 3, 24, generator=g).to(torch.bfloat16),
        "layers.0.attn.qkv.weight": torch.randn(72, 24 + k, generator=g),
        "layers.0.attn.qkv.bias": torch.randn(72, generator=g).to(torch.float16),
        "layers.0.mlp.up.weight": torch.randn(96, 24, generator=g).to(torch.bfloat16),
        "layers.0.mlp.down.weight": torch.randn(24, 96, generator=g).to(torch.bfloat16),
        "layers.0.norm.weight": torch.randn(24, generator=g),
        "pos_ids": torch.arange(17 + k, dtype=torch.int64),
        "scale": torch.tensor(0.5 + seed),
        "head.weight": torch.randn(11, 24, 3, generator=g).to(torch.float64),
    }


def TrainingCase(seed: int, ranks: int) -> dict:
    m = FixtureModel(seed)
    g = torch.Generator().manual_seed(seed + 100)
    opt = {"state": {n: {"exp_avg": torch.randn(v.shape, generator=g), "step": torch.tensor(7.0)}
                     for n, v in list(m.items())[:3]},
           "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95), "params": list(m)[:3]}]}
    return {"model": m, "optim": opt, "step": 1234, "note": "single-process dcp.save"}


def TpCase(seed: int, ranks: int) -> dict:
    """The fixtures' dtensor/ placements (a 2-D mesh needs an even rank count)."""
    m = FixtureModel(seed)
    mesh, mesh2 = (ranks,), (2, ranks // 2)
    place = {
        "embed.weight": (mesh, [("S", 0)]),
        "layers.0.attn.qkv.weight": (mesh, [("S", 0)]),
        "layers.0.attn.qkv.bias": (mesh, [("S", 0)]),
        "layers.0.mlp.up.weight": (mesh2, [("S", 0), ("S", 1)]),
        "layers.0.mlp.down.weight": (mesh, [("S", 1)]),
        "layers.0.norm.weight": (mesh, [("R",)]),
        "head.weight": (mesh, [("S", 2)]),
    }
    if ranks % 2:
        place["layers.0.mlp.up.weight"] = (mesh, [("S", 1)])
    dsd = {}
    for k, v in m.items():
        dsd[k] = DTensor(v, *place[k]) if k in place else v
    return {"model": dsd, "step": 99}


def UnevenCase(seed: int, ranks: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    mesh = (ranks,)
    return {"model": {
        "rows10.weight": DTensor(torch.randn(10, 6, generator=g), mesh, [("S", 0)]),
        "rows9.weight": DTensor(torch.randn(9, 6, generator=g).to(torch.bfloat16), mesh, [("S", 0)]),
        "rows2.weight": DTensor(torch.randn(2, 5, generator=g).to(torch.float16), mesh, [("S", 0)]),
        "cols5.weight": DTensor(torch.randn(4, 5, generator=g), mesh, [("S", 1)]),
        "ids": DTensor(torch.arange(7, dtype=torch.int32), mesh, [("S", 0)]),
        "scale": torch.tensor(2.0 + seed),
        "experts": [DTensor(torch.randn(6, 3, generator=g), mesh, [("S", 0)]),
                    torch.randn(3, generator=g).to(torch.float64)],
    }, "step": 5, "epoch": [1, 2]}


def BigCase(seed: int, ranks: int, total_bytes: int) -> dict:
    """bf16 matrices of up to 8192x4096 (64 MiB), Shard(0) and Shard(1) alternating."""
    rows, cols = 8192, 4096
    per_row = cols * 2
    model, left, i = {}, total_bytes, 0
    while left >= per_row:
        n = min(rows, left // per_row)
        model[f"layers.{i}.weight"] = DTensor(
            Lazy((n, cols), torch.bfloat16, lambda n=n, i=i: WeightLike(n, cols, seed * 1000 + i)),
            (ranks,), [("S", i % 2)])
        left -= n * per_row
        i += 1
    return {"model": model, "step": 1}


def WeightLike(n: int, cols: int, seed: int, block_rows: int = 1024) -> torch.Tensor:
    """n x cols bf16 normal values, drawn in blocks to keep the float32 draw small."""
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, cols, dtype=torch.bfloat16)
    for a in range(0, n, block_rows):
        b = min(n, a + block_rows)
        out[a:b] = torch.randn(b - a, cols, generator=g)
    return out


def WideCase(seed: int, ranks: int) -> dict:
    """The issue's memory figure: one 32000x8192 bf16 matrix (500 MiB) split along dim 1."""
    return {"model": {"embed.weight": DTensor(
        Lazy((32000, 8192), torch.bfloat16, lambda: WeightLike(32000, 8192, seed)),
        (ranks,), [("S", 1)])}, "step": 1}


CASES = {"training": (TrainingCase, 1), "tp": (TpCase, 4), "uneven": (UnevenCase, 4),
         "big": (None, 4), "wide": (WideCase, 8)}


def MakeStateDict(case: str, seed: int, ranks: int, total_bytes: int) -> dict:
    if case == "big":
        return BigCase(seed, ranks, total_bytes)
    return CASES[case][0](seed, ranks)


# ---------------------------------------------------------------------------
# Writing a case

def WriteCase(out_dir: str, state_dict: dict, ranks: int, seed: int,
              ids: Optional[SerializationIds] = None, with_expected: bool = True) -> Metadata:
    os.makedirs(out_dir, exist_ok=True)
    if not with_expected:
        return SaveDcp(out_dir, state_dict, ranks, seed, lambda name, whole: None, ids)
    tensors = FlatTensors(state_dict)
    expected = SafetensorsWriter(os.path.join(out_dir, "expected.safetensors"),
                                 {n: (v.dtype, v.shape) for n, v in tensors.items()})
    try:
        metadata = SaveDcp(out_dir, state_dict, ranks, seed, expected.Write, ids)
    finally:
        expected.Close()
    WriteExpectedJson(out_dir, state_dict)
    return metadata


# ---------------------------------------------------------------------------
# The Hugging Face form (HuggingFaceStorageWriter(save_distributed=True,
# enable_consolidation=False)): per rank R and file index K,
# shard-0000{R+1}-model-0000K-of-0000N.safetensors holding that rank's chunks of the
# tensors mapped to K, with DCP_SHARDING_INFO (fqn -> saved_offsets) in __metadata__

def HfShardName(rank: int, k: int, n: int) -> str:
    return f"shard-{rank + 1:05d}-model-{k:05d}-of-{n:05d}.safetensors"


def WriteHf(out_dir: str, state_dict: dict, ranks: int) -> None:
    """The model sub-tree (state_dict["model"] when there is one) as HF DCP shards;
    tensors go to file index 1, 2, 1, 2, ... in order, as the fixture's mapping does.
    Non-tensor values are not written (the HF writer saves tensors only)."""
    os.makedirs(out_dir, exist_ok=True)
    model = state_dict["model"] if isinstance(state_dict.get("model"), dict) else state_dict
    flat, mappings = FlattenStateDict(model)
    flat = {f: v for f, v in flat.items() if IsTensor(v)}
    mappings = {f: mappings[f] for f in flat}
    file_index = {fqn: i % 2 + 1 for i, fqn in enumerate(flat)}
    n_files = max(file_index.values(), default=1)
    plans = DedupSavePlans([LocalPlan(flat, mappings, r) for r in range(ranks)])
    sizes = {fqn: TensorBytes(v) for fqn, v in flat.items()}
    writers: Dict[Tuple[int, int], SafetensorsWriter] = {}
    holders: Dict[str, List[Tuple[int, WriteItem]]] = collections.defaultdict(list)
    for r, plan in enumerate(plans):
        for k in range(1, n_files + 1):
            items = sorted([i for i in plan.items if file_index[i.index.fqn] == k],
                           key=lambda i: sizes[i.index.fqn])
            if not items:
                continue
            info = {i.index.fqn: {"saved_offsets": list(i.tensor_data.chunk.offsets)} for i in items}
            writers[(r, k)] = SafetensorsWriter(
                os.path.join(out_dir, HfShardName(r, k, n_files)),
                {i.index.fqn: (i.tensor_data.properties.dtype, tuple(i.tensor_data.chunk.sizes))
                 for i in items},
                {"format": "pt", "DCP_VERSION": HF_DCP_VERSION, "DCP_SHARDING_INFO": json.dumps(info)})
            for i in items:
                holders[i.index.fqn].append((r, i))
    expected = SafetensorsWriter(os.path.join(out_dir, "expected.safetensors"),
                                 {n: (v.dtype, v.shape) for n, v in flat.items()})
    for fqn in sorted(flat, key=lambda f: sizes[f]):
        whole = Whole(flat[fqn])
        for r, item in holders[fqn]:
            writers[(r, file_index[fqn])].Write(fqn, ChunkOf(whole, item))
        expected.Write(fqn, whole)
        del whole
    for w in list(writers.values()) + [expected]:
        w.Close()
    WriteExpectedJson(out_dir, {})


def VerifyHf(out_dir: str) -> int:
    """Consolidates the HF shards by their DCP_SHARDING_INFO; compares with expected."""
    expected = ReadSafetensors(os.path.join(out_dir, "expected.safetensors"))
    wholes: Dict[str, torch.Tensor] = {}
    for name in sorted(os.listdir(out_dir)):
        if not name.startswith("shard-"):
            continue
        path = os.path.join(out_dir, name)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            info = json.loads(json.loads(f.read(n))["__metadata__"]["DCP_SHARDING_INFO"])
        for fqn, chunk in ReadSafetensors(path).items():
            want = expected[fqn]
            whole = wholes.setdefault(fqn, torch.zeros(want.shape, dtype=want.dtype))
            view = whole
            for d, (o, m) in enumerate(zip(info[fqn]["saved_offsets"], chunk.shape)):
                view = view.narrow(d, o, m)
            view.copy_(chunk)
    for fqn, want in expected.items():
        got = wholes.get(fqn)
        if got is None or TensorRawBytes(got).tobytes() != TensorRawBytes(want).tobytes():
            print(f"{out_dir}: {fqn} differs from expected.safetensors")
            return 1
    print(f"OK {out_dir}: {len(expected)} tensors equal expected.safetensors")
    return 0


# ---------------------------------------------------------------------------
# Hostile variants: one thing broken in an otherwise sound checkpoint

@StandIn(METADATA_MODULE)
@dataclasses.dataclass
class SparseStorageMetadata:
    """No such class in PyTorch: a reader must not guess what it means."""
    format: str = "coo"


class _HugeSize(tuple):
    """Pickles as torch.Size of dimensions torch.Size itself refuses (2**64-1)."""

    def __reduce__(self):
        return (torch.Size, (tuple(self),))


PLACEHOLDER_MODULE = "zz"  # same length as "os": the pickle is patched to name os.system
RegisterModule(PLACEHOLDER_MODULE).system = lambda command: None
sys.modules[PLACEHOLDER_MODULE].system.__module__ = PLACEHOLDER_MODULE
sys.modules[PLACEHOLDER_MODULE].system.__qualname__ = "system"


class _OsSystemCall:
    def __reduce__(self):
        return (sys.modules[PLACEHOLDER_MODULE].system, ("echo ckptfs-hostile-metadata-ran",))


def TensorEntries(md: Metadata) -> List[Tuple[MetadataIndex, _StorageInfo]]:
    return [(i, info) for i, info in md.storage_data.items() if hasattr(i, "offset")]


def ReadItem(out_dir: str, info: _StorageInfo):
    with open(os.path.join(out_dir, info.relative_path), "rb") as f:
        f.seek(info.offset)
        return torch.load(io.BytesIO(f.read(info.length)))


def AppendItem(out_dir: str, relative_path: str, value) -> _StorageInfo:
    with open(os.path.join(out_dir, relative_path), "ab") as f:
        offset = f.tell()
        torch.save(value, f)
        return _StorageInfo(relative_path, offset, f.tell() - offset)


def Break(out_dir: str, md: Metadata, kind: str, ranks: int) -> None:
    """Breaks md (and the files) one way; the caller then writes md."""
    index, info = TensorEntries(md)[0]
    if kind == "path_outside":
        info.relative_path = "../x.distcp"
    elif kind == "absolute_path":
        info.relative_path = os.path.abspath(os.path.join(out_dir, info.relative_path))
    elif kind == "range_past_end":
        size = os.path.getsize(os.path.join(out_dir, info.relative_path))
        info.length = size - info.offset + 4096
    elif kind == "transform":
        info.transform_descriptors = ["zstd"]
    elif kind == "overlap":
        for index, info in TensorEntries(md):
            if len(index.offset) and ReadItem(out_dir, info).shape[0] >= 2:
                break
        else:
            raise UsageError("overlap needs a tensor chunk of 2 rows or more")
        chunk = ReadItem(out_dir, info)
        piece = chunk.narrow(0, 1, min(2, chunk.shape[0] - 1)).clone()
        offsets = torch.Size([index.offset[0] + 1] + list(index.offset[1:]))
        entry = md.state_dict_metadata[index.fqn]
        extra = MetadataIndex(index.fqn, offsets, len(entry.chunks))
        entry.chunks.append(ChunkStorageMetadata(offsets, torch.Size(piece.shape)))
        md.storage_data[extra] = AppendItem(out_dir, info.relative_path, piece)
    elif kind == "hole":
        def NonEmpty(c):
            n = 1
            for s in c.sizes:
                n *= s
            return n > 0
        fqn = max((f for f, e in md.state_dict_metadata.items() if isinstance(e, TensorStorageMetadata)),
                  key=lambda f: sum(map(NonEmpty, md.state_dict_metadata[f].chunks)))
        chunks = md.state_dict_metadata[fqn].chunks
        gone = [c for c in chunks if NonEmpty(c)][-1]
        chunks.remove(gone)
        del md.storage_data[MetadataIndex(fqn, gone.offsets)]
    elif kind == "overflow":
        for entry in md.state_dict_metadata.values():
            if isinstance(entry, TensorStorageMetadata) and len(entry.size):
                entry.size = _HugeSize((2**64 - 1,) + tuple(entry.size[1:]))
                break
    elif kind == "global_os_system":
        md.version = _OsSystemCall()
    elif kind == "unknown_class":
        byte_items = [f for f, e in md.state_dict_metadata.items() if isinstance(e, BytesStorageMetadata)]
        fqn = byte_items[0] if byte_items else next(iter(md.state_dict_metadata))
        md.state_dict_metadata[fqn] = SparseStorageMetadata()
    elif kind == "missing_file":
        os.remove(os.path.join(out_dir, f"__{ranks - 1}_0.distcp"))
    else:
        raise UsageError(f"unknown --hostile {kind}")


def MetadataBytes(md: Metadata) -> bytes:
    data = pickle.dumps(md, protocol=4)
    placeholder = b"\x8c\x02zz\x94\x8c\x06system"
    if placeholder in data:
        assert data.count(placeholder) == 1
        data = data.replace(placeholder, b"\x8c\x02os\x94\x8c\x06system")
    return data


# ---------------------------------------------------------------------------
# --self-check: our .metadata against PyTorch 2.11's, opcode by opcode

INT_OPS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"}
STR_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
GET_OPS = {"BINGET", "LONG_BINGET", "GET"}
UUID_CHARS = set("0123456789abcdef-")


def NormalizedOps(data: bytes) -> List[tuple]:
    """(opcode, value) for every opcode but FRAME, with same-meaning opcodes merged and
    the values that legitimately differ replaced: uuids, and the parts of
    StorageMeta.checkpoint_id (a path: dropped, memo renumbered)."""
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(data) if op.name != "FRAME"]
    out, memo, renumber = [], [], {}
    skipping = False
    last_str, recent = None, [None, None]  # the last string pushed; the last two
    for name, arg in ops:
        if skipping:  # the path's parts: MARK, strings, TUPLE
            if name == "MEMOIZE":
                memo.append(None)
                renumber[len(memo) - 1] = None
            if name == "TUPLE":
                skipping = False
                out.append(("PATH", None))
            continue
        if name == "MEMOIZE":
            memo.append(last_str)
            renumber[len(memo) - 1] = sum(1 for v in renumber.values() if v is not None)
            out.append(("MEMOIZE", None))
            continue
        if name == "STACK_GLOBAL":
            out.append(("GLOBAL", f"{recent[0]}.{recent[1]}"))
            skipping = recent == ["pathlib", "PosixPath"]
            last_str = None
            continue
        if name in STR_OPS:
            out.append(("STR", "<uuid>" if len(arg) == 36 and set(arg) <= UUID_CHARS else arg))
            last_str = arg
        elif name in GET_OPS:
            out.append(("GET", renumber.get(arg)))
            last_str = memo[arg] if arg < len(memo) else None
        elif name in INT_OPS:
            out.append(("INT", arg))
            last_str = None
        else:
            out.append((name, arg))
            last_str = None
        if last_str is not None:
            recent = [recent[1], last_str]
    return out


def FirstDifference(ours: bytes, theirs: bytes) -> Optional[str]:
    a, b = NormalizedOps(ours), NormalizedOps(theirs)
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            context = " ".join(str(v) for _, v in b[max(0, i - 6):i] if v is not None)
            return f"opcode {i}: ours {x}, PyTorch's {y} (after: {context})"
    return None


def SelfCheck(fixtures: str) -> int:
    """For the fixtures' own state dicts (same seed; torch 1.13 draws the same random
    values as 2.11 here): the .metadata pickles the same opcodes and globals (values
    aside: uuid, path); with PyTorch's save_id, path and serialization ids put in, the
    .metadata and every .distcp file are byte-identical."""
    import tempfile
    failures = 0
    for name, case, ranks in (("single", "training", 1), ("dtensor", "tp", 4)):
        theirs_dir = os.path.join(fixtures, name)
        theirs_path = os.path.join(theirs_dir, ".metadata")
        theirs_md = LoadMetadata(theirs_path)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, name)
            metadata = WriteCase(out, MakeStateDict(case, 1, ranks, 0), ranks, 1,
                                 SerializationIds(1, FixtureSerializationIds(theirs_dir, theirs_md)))
            WriteMetadata(out, metadata)
            ours = open(os.path.join(out, ".metadata"), "rb").read()
            diff = FirstDifference(ours, open(theirs_path, "rb").read())
            if diff is None:
                diff = CompareItems(out, theirs_dir)
            identical = []
            if diff is None:
                metadata.storage_meta = theirs_md.storage_meta
                same = MetadataBytes(metadata) == open(theirs_path, "rb").read()
                identical.append(".metadata" if same else ".metadata NOT")
                for r in range(ranks):
                    f = f"__{r}_0.distcp"
                    same = open(os.path.join(out, f), "rb").read() == \
                        open(os.path.join(theirs_dir, f), "rb").read()
                    identical.append(f if same else f"{f} NOT")
                if any(x.endswith("NOT") for x in identical):
                    diff = "not byte-identical: " + ", ".join(identical)
        if diff is None:
            print(f"OK {name}: .metadata of --case {case} --ranks {ranks} has the opcodes "
                  f"and globals of {theirs_path}; PyTorch's items, saved again, are "
                  f"byte-identical; with PyTorch's ids put in, byte-identical: "
                  + ", ".join(identical))
        else:
            failures += 1
            print(f"DIFFERENT {name}: {diff}")
    with tempfile.TemporaryDirectory() as tmp:
        WriteHf(tmp, MakeStateDict("tp", 1, 4, 0), 4)
        diff = CompareHf(tmp, os.path.join(fixtures, "hf_dcp"))
    if diff is None:
        print(f"OK hf_dcp: --case tp --hf writes the files, headers (as JSON: __metadata__'s "
              f"key order is a hash map's) and tensor bytes of {os.path.join(fixtures, 'hf_dcp')}")
    else:
        failures += 1
        print(f"DIFFERENT hf_dcp: {diff}")
    return 1 if failures else 0


def FixtureSerializationIds(theirs_dir: str, md: Metadata) -> Dict[int, List[str]]:
    import zipfile
    ids: Dict[int, List[Tuple[int, str]]] = collections.defaultdict(list)
    for info in md.storage_data.values():
        rank = int(info.relative_path.split("_")[2])
        with open(os.path.join(theirs_dir, info.relative_path), "rb") as f:
            f.seek(info.offset)
            z = zipfile.ZipFile(io.BytesIO(f.read(info.length)))
        ids[rank].append((info.offset, z.read("archive/.data/serialization_id").decode()))
    return {r: [sid for _, sid in sorted(v)] for r, v in ids.items()}


def SafetensorsHeader(path: str) -> Tuple[dict, int]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), n


def CompareHf(ours: str, theirs: str) -> Optional[str]:
    """Same shard names, byte sizes, header lengths and headers (as JSON: the order of
    __metadata__'s keys is a hash map's in the reference library)."""
    names = sorted(n for n in os.listdir(theirs) if n.startswith("shard-"))
    if sorted(n for n in os.listdir(ours) if n.startswith("shard-")) != names:
        return f"shard names differ from {names}"
    for n in names:
        a, b = os.path.join(ours, n), os.path.join(theirs, n)
        if SafetensorsHeader(a) != SafetensorsHeader(b):
            return f"{n}: header differs"
        if os.path.getsize(a) != os.path.getsize(b):
            return f"{n}: size differs"
        skip = 8 + SafetensorsHeader(a)[1]
        with open(a, "rb") as fa, open(b, "rb") as fb:
            fa.seek(skip)
            fb.seek(skip)
            if fa.read() != fb.read():
                return f"{n}: tensor bytes differ"
    return None


def CompareItems(ours_dir: str, theirs_dir: str) -> Optional[str]:
    """Every item is where its _StorageInfo says and holds what the metadata says; every
    item of PyTorch's, loaded and saved again by TorchSave with its serialization id,
    gives the very same bytes."""
    import zipfile
    for d in (ours_dir, theirs_dir):
        md = LoadMetadata(os.path.join(d, ".metadata"))
        for index, info in md.storage_data.items():
            with open(os.path.join(d, info.relative_path), "rb") as f:
                f.seek(info.offset)
                blob = f.read(info.length)
            value = torch.load(io.BytesIO(blob))
            entry = md.state_dict_metadata[index.fqn]
            if isinstance(entry, TensorStorageMetadata):
                chunk = entry.chunks[index.index]
                if tuple(value.shape) != tuple(chunk.sizes) or value.dtype != entry.properties.dtype:
                    return f"{d}: {index.fqn} chunk {index.index} holds {tuple(value.shape)}"
            if d == theirs_dir:
                sid = zipfile.ZipFile(io.BytesIO(blob)).read("archive/.data/serialization_id")
                again = io.BytesIO()
                TorchSave(value, again, sid.decode())
                if again.getvalue() != blob:
                    return f"{d}: {index.fqn} saved again differs from PyTorch's item"
    return None


def ReadSafetensors(path: str) -> Dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        by_name = {v[0]: k for k, v in ST_DTYPES.items()}
        for name, e in header.items():
            if name == "__metadata__":
                continue
            dtype = by_name[e["dtype"]]
            begin, end = e["data_offsets"]
            f.seek(base + begin)
            raw = bytearray(f.read(end - begin))
            t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            size = ElementSize(dtype)
            t = t.view(SAME_SIZE_INT[size]).view(dtype) if dtype != torch.bool else t.view(torch.bool)
            out[name] = t.reshape(e["shape"])
    return out


def Verify(out_dir: str) -> int:
    """Reassembles every tensor from .metadata and the .distcp items and compares it with
    expected.safetensors, bit for bit; prints OK or the first problem."""
    md = LoadMetadata(os.path.join(out_dir, ".metadata"))
    expected = ReadSafetensors(os.path.join(out_dir, "expected.safetensors"))
    wholes: Dict[str, torch.Tensor] = {}
    for index, info in md.storage_data.items():
        entry = md.state_dict_metadata[index.fqn]
        if not isinstance(entry, TensorStorageMetadata):
            continue
        with open(os.path.join(out_dir, info.relative_path), "rb") as f:
            f.seek(info.offset)
            chunk = torch.load(io.BytesIO(f.read(info.length)))
        whole = wholes.setdefault(index.fqn, torch.zeros(tuple(entry.size), dtype=entry.properties.dtype))
        view = whole
        for d, (o, n) in enumerate(zip(index.offset, chunk.shape)):
            view = view.narrow(d, o, n)
        view.copy_(chunk)
    for name, want in expected.items():
        got = wholes.get(name)
        if got is None:
            print(f"{out_dir}: {name} missing from the checkpoint")
            return 1
        a, b = TensorRawBytes(got), TensorRawBytes(want)
        if got.shape != want.shape or a.tobytes() != b.tobytes():
            print(f"{out_dir}: {name} differs from expected.safetensors")
            return 1
    print(f"OK {out_dir}: {len(expected)} tensors equal expected.safetensors")
    return 0


def LoadMetadata(path: str) -> Metadata:
    """Our own reader, for checks: the stand-in classes, torch.Size, dtypes."""
    allowed = {(METADATA_MODULE, n) for n in (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")}
    allowed |= {(FILESYSTEM_MODULE, "_StorageInfo"), ("torch", "Size"),
                ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath")}

    class Reader(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) in allowed or (module == "torch" and isinstance(
                    getattr(torch, name, None), torch.dtype)):
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"global {module}.{name} refused")
    with open(path, "rb") as f:
        return Reader(f).load()


def Main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--case", choices=sorted(CASES), default="training")
    parser.add_argument("--ranks", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bytes", default="2G")
    parser.add_argument("--hostile", choices=sorted(HOSTILE))
    parser.add_argument("--hf", action="store_true")
    parser.add_argument("--no-expected", action="store_true",
                        help="skip expected.safetensors and expected.json (the bench)")
    parser.add_argument("--self-check", metavar="FIXTURES_DIR")
    parser.add_argument("--verify", action="store_true",
                        help="check OUT (written before) against its expected.safetensors")
    args = parser.parse_args(argv)
    if args.self_check:
        return SelfCheck(args.self_check)
    if args.verify:
        if os.path.exists(os.path.join(args.out, ".metadata")):
            return Verify(args.out)
        return VerifyHf(args.out)
    if not args.out:
        raise UsageError("OUT is required (or --self-check FIXTURES_DIR)")
    ranks = args.ranks or CASES[args.case][1]
    if ranks < 1:
        raise UsageError("--ranks must be at least 1")
    state_dict = MakeStateDict(args.case, args.seed, ranks, ParseSize(args.bytes))
    if args.hf:
        if args.hostile:
            raise UsageError("--hostile applies to .metadata + .distcp, not --hf")
        if args.no_expected:
            raise UsageError("--no-expected applies to .metadata + .distcp, not --hf")
        WriteHf(args.out, state_dict, ranks)
        return 0
    if args.no_expected and args.hostile:
        raise UsageError("--hostile keeps expected.* of the sound case; drop --no-expected")
    metadata = WriteCase(args.out, state_dict, ranks, args.seed, with_expected=not args.no_expected)
    if args.hostile:
        Break(args.out, metadata, args.hostile, ranks)
    WriteMetadata(args.out, metadata)
    return 0


def ParseSize(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    if not t or t[-1] not in "KMG0123456789":
        raise UsageError(f"bad size {text!r}")
    unit = t[-1] if t[-1] in "KMG" else ""
    try:
        return int(float(t[:len(t) - len(unit)]) * units[unit])
    except ValueError:
        raise UsageError(f"bad size {text!r}") from None


if __name__ == "__main__":
    try:
        sys.exit(Main(sys.argv[1:]))
    except UsageError as e:
        print(f"make_dcp.py: {e}", file=sys.stderr)
        sys.exit(2)
