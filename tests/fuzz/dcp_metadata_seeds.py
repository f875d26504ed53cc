# Writes the seed corpus of dcp_metadata_fuzz (tests/fuzz/corpus/dcp_metadata): .metadata
# pickles in the shape FileSystemWriter.finish gives them, made with stand-in classes named
# like PyTorch's (torch 1.13 here has no torch.distributed.checkpoint), never copies of
# ../shared/fixtures. Usage: /usr/bin/python3 tests/fuzz/dcp_metadata_seeds.py tests/fuzz/corpus/dcp_metadata
import pickle, sys, types, os, pathlib
out = sys.argv[1]

def module(name):
    m = types.ModuleType(name); sys.modules[name] = m; return m

meta = module("torch.distributed.checkpoint.metadata")
fsm = module("torch.distributed.checkpoint.filesystem")
torchm = module("torch")
serm = module("torch.serialization")

def cls(mod, name, **extra):
    c = type(name, (), dict(extra)); c.__module__ = mod.__name__; c.__qualname__ = name
    setattr(mod, name, c); return c

def obj(c, **fields):
    o = c.__new__(c); o.__dict__.update(fields); return o

Metadata = cls(meta, "Metadata")
TSM = cls(meta, "TensorStorageMetadata")
BSM = cls(meta, "BytesStorageMetadata")
CSM = cls(meta, "ChunkStorageMetadata")
MI = cls(meta, "MetadataIndex")
SM = cls(meta, "StorageMeta")
SI = cls(fsm, "_StorageInfo")

class Size(tuple):
    def __reduce__(self): return (Size, (tuple(self),))
Size.__module__ = "torch"; Size.__qualname__ = "Size"; torchm.Size = Size

class Global:  # a bare global such as torch.bfloat16
    def __init__(self, mod, name): self.__module__, self.name = mod.__name__, name
    def __reduce__(self): return self.name
def dtype(name):
    if not hasattr(torchm, name): setattr(torchm, name, Global(torchm, name))
    return getattr(torchm, name)

class Layout:
    def __reduce__(self): return (serm._get_layout, ("torch.strided",))
def _get_layout(name): return Layout()
_get_layout.__module__ = "torch.serialization"; serm._get_layout = _get_layout
class MemFmt:
    def __reduce__(self): return (meta._MEM_FORMAT_ENCODING, (0,))
def _MEM_FORMAT_ENCODING(v): return MemFmt()
_MEM_FORMAT_ENCODING.__module__ = meta.__name__; _MEM_FORMAT_ENCODING.__qualname__ = "_MEM_FORMAT_ENCODING"
meta._MEM_FORMAT_ENCODING = _MEM_FORMAT_ENCODING

class TP:
    def __init__(self, dt): self.dt = dt
    def __reduce__(self): return (TPcls, (), (self.dt, Layout(), False, MemFmt(), False))
TPcls = cls(meta, "TensorProperties")

def tensor(dt, size, chunks):
    return obj(TSM, properties=TP(dtype(dt)), size=Size(size),
               chunks=[obj(CSM, offsets=Size(o), sizes=Size(s)) for o, s, _ in chunks])

def write(name, items, storage, planner, extra=True, version="1.0.0"):
    m = obj(Metadata, state_dict_metadata=items, planner_data=planner, storage_data=storage)
    if extra:
        m.storage_meta = obj(SM, checkpoint_id=pathlib.PurePosixPath("/ckpt"), save_id="s",
                             load_id=None, modules=[])
        m.version = version
    with open(os.path.join(out, name), "wb") as f:
        pickle.dump(m, f, protocol=4)

def build(tensors, bytes_items, transforms=None):
    items, storage, planner, off = {}, {}, {}, 0
    for fqn, dt, size, chunks in tensors:
        items[fqn] = tensor(dt, size, chunks)
        planner[fqn] = tuple(fqn.split(".", 1))
        for i, (o, s, rank) in enumerate(chunks):
            info = obj(SI, relative_path=f"__{rank}_0.distcp", offset=off, length=1000)
            if transforms: info.transform_descriptors = transforms
            storage[obj(MI, fqn=fqn, offset=Size(o), index=i)] = info
            off += 1000
    for fqn, path in bytes_items:
        items[fqn] = BSM.__new__(BSM)
        planner[fqn] = path
        storage[obj(MI, fqn=fqn, index=None)] = obj(SI, relative_path="__0_0.distcp", offset=off, length=300)
        off += 300
    return items, storage, planner

# one process: a model, optimizer state, param_groups (a list index in the path), a step
write("single.metadata", *build(
    [("model.w", "bfloat16", (8, 4), [((0, 0), (8, 4), 0)]),
     ("model.scale", "float32", (), [((), (), 0)]),
     ("optim.state.w.exp_avg", "float32", (8, 4), [((0, 0), (8, 4), 0)])],
    [("optim.param_groups.0.lr", ("optim", "param_groups", 0, "lr")), ("step", ("step",))]))
# four ranks: Shard(0), Shard(1), a 2x2 mesh, Replicate, an empty chunk
write("dtensor.metadata", *build(
    [("model.emb", "float16", (10, 4), [((0, 0), (3, 4), 0), ((3, 0), (3, 4), 1), ((6, 0), (3, 4), 2), ((9, 0), (1, 4), 3)]),
     ("model.down", "bfloat16", (4, 8), [((0, 0), (4, 2), 0), ((0, 2), (4, 2), 1), ((0, 4), (4, 2), 2), ((0, 6), (4, 2), 3)]),
     ("model.up", "int64", (4, 4), [((0, 0), (2, 2), 0), ((0, 2), (2, 2), 1), ((2, 0), (2, 2), 2), ((2, 2), (2, 2), 3)]),
     ("model.norm", "float64", (4,), [((0,), (4,), 0)]),
     ("model.head", "uint8", (2, 3), [((0, 0), (2, 1), 0), ((0, 1), (2, 1), 1), ((0, 2), (2, 1), 2), ((0, 3), (2, 0), 3)])],
    [("step", ("step",))]))
# an older writer: no storage_meta, no version; a transform recorded
write("old_writer.metadata", *build([("w", "bool", (3,), [((0,), (3,), 0)])], []), extra=False)
write("transforms.metadata", *build([("w", "complex64", (2,), [((0,), (2,), 0)])], [],
                                    transforms=["stream.zstd"]))
# hostile: a path out of the directory, a chunk past its tensor, a denied global
items, storage, planner = build([("w", "float32", (4,), [((0,), (4,), 0)])], [])
next(iter(storage.values())).relative_path = "../etc/passwd"
write("dotdot.metadata", items, storage, planner)
write("past_size.metadata", *build([("w", "float32", (4,), [((2,), (4,), 0)])], []))
items, storage, planner = build([("w", "float32", (4,), [((0,), (4,), 0)])], [])
evil = Global(sys.modules["os"], "system")
os.system = evil  # only so that pickle finds the name it writes; never called
items["w"].properties = TP(evil)
write("os_system.metadata", items, storage, planner)
