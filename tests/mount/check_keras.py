#!/usr/bin/python3
"""Checks mounted Keras checkpoints (tests/mount/keras_mount_test.cc) as a user sees them.

  check_keras.py generated OUT KEY=MNT ...   MNT mounts checkpoint KEY of OUT/expected.json
                                            (scripts/make_keras.py)
  check_keras.py generated-every-tensor OUT KEY=MNT ...
                                            the same, MNT mounted with --model-key '': the
                                            optimizer in the merged files under its paths
  check_keras.py fixture DIR FILE=MNT ...    MNT mounts DIR/FILE, a real Keras file listed in
                                            DIR/manifest.json (../shared/fixtures/keras)
  check_keras.py run OUT RUN MNT             MNT mounts OUT/RUN, a run of make_keras.py:
                                            its entries, `latest`, and each entry in full
  check_keras.py live OUT RUN_DIR MNT        MNT mounts RUN_DIR, a copy of OUT/run_epochs:
                                            epoch 11 saved in place appears once complete
  check_keras.py self-check OUT              no mount: expected.json against the files,
                                            read with h5py and named by the rule below

What every mounted checkpoint must show:
- tensors/: one file per HDF5 dataset, optimizer's included, at the dataset's path split at
  '/' with each component escaped ('%' -> %25, '.'/'..' -> %2E/%2E%2E); .npy for dtypes
  numpy has, a one-tensor .safetensors for BF16 (docs/usage.md: dtypes numpy lacks) with
  the float32 .npy of its widened values beside it.
- model.safetensors (parsed by hand) and pytorch_model.bin (torch.load): the model, that is
  every dataset but the optimizer's (Keras 3: under optimizer/; legacy: optimizer_weights/),
  named as the rule says (ModelName* below); torch 1.13 lacks U16/U32/U64, left out there.
- shards/: the stored files unchanged. .ckptfs/metadata.json: the keys the input has.
The naming rule is computed here from the HDF5 files with h5py, independently of
make_keras.py, whose own names (expected.json) must agree (self-check).
"""
import hashlib
import io
import json
import os
import sys
import zipfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import Checker, EscapeComponent, ParseSafetensors, RunMain, Validate  # noqa: E402

# numpy's dtype str (or "bfloat16") -> safetensors dtype.
ST_DTYPES = {"<f2": "F16", "<f4": "F32", "<f8": "F64", "|i1": "I8", "<i2": "I16", "<i4": "I32",
             "<i8": "I64", "|u1": "U8", "<u2": "U16", "<u4": "U32", "<u8": "U64", "|b1": "BOOL",
             "bfloat16": "BF16"}
NO_TORCH = {"U16", "U32", "U64"}  # PyTorch 1.13 lacks them (docs/formats.md)


def Sha(data):
    return hashlib.sha256(data).hexdigest()


def Text(value):
    return value.decode("utf8") if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------------------
# The HDF5 files, read with h5py

def OpenH5s(path):
    """The HDF5 files of a checkpoint as (shard file name, h5py.File): a .weights.h5 or
    legacy .h5, a .keras zip (its model.weights.h5 member) or directory, a sharded
    directory (its *.weights.json's shards)."""
    if path.endswith(".weights.json"):
        return [(s, h5py.File(os.path.join(os.path.dirname(path), s), "r"))
                for s in ShardsOf(path)]
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        indexes = [n for n in names if n.endswith(".weights.json")]
        if indexes:
            return OpenH5s(os.path.join(path, indexes[0]))
        if "model.weights.h5" in names:
            return [("model.weights.h5", h5py.File(os.path.join(path, "model.weights.h5"), "r"))]
        h5s = [n for n in names if n.endswith(".h5")]
        return [(h5s[0], h5py.File(os.path.join(path, h5s[0]), "r"))]
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            data = z.read("model.weights.h5")
        return [("model.weights.h5", h5py.File(io.BytesIO(data), "r"))]
    return [(os.path.basename(path), h5py.File(path, "r"))]


def ShardsOf(index):
    """The shard files a ShardedH5IOStore map names (a name, or a list of names, per group)."""
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    return sorted({s for v in weight_map.values() for s in (v if isinstance(v, list) else [v])})


def Datasets(h5s):
    """HDF5 path -> (shard, h5py.Dataset) over every shard."""
    out = {}
    for shard, f in h5s:
        def Visit(name, obj, shard=shard):
            if isinstance(obj, h5py.Dataset):
                assert name not in out, f"{name} in two shards"
                out[name] = (shard, obj)
        f.visititems(Visit)
    return out


def DtypeOf(ds):
    marked = Text(ds.attrs.get("dtype", "")) == "bfloat16"
    if ds.dtype.kind == "V" and ds.dtype.itemsize == 2 and marked:
        return "bfloat16"
    if ds.dtype == np.bool_:
        return "|b1"
    return ds.dtype.newbyteorder("<").str if ds.dtype.byteorder == ">" else ds.dtype.str


def LittleEndianBytes(ds):
    value = ds[()]
    value = np.ascontiguousarray(value)
    if value.dtype.kind in "iuf" and value.dtype.byteorder == ">":
        value = value.astype(value.dtype.newbyteorder("<"))
    return value.tobytes()


def IsLegacy(h5s):
    f = h5s[0][1]
    return "model_weights" in f or any(k.startswith("layer_names") for k in f.attrs)


def LoadAttributes(group, name):
    """legacy_h5_format.load_attributes_from_hdf5_group: NAME, else NAME0, NAME1, ...;
    strings fixed- or variable-length; an empty list is stored as a float64 array."""
    if name in group.attrs:
        values = list(group.attrs[name])
    else:
        values, i = [], 0
        while f"{name}{i}" in group.attrs:
            values += list(group.attrs[f"{name}{i}"])
            i += 1
    return [Text(v) for v in values if isinstance(v, (bytes, str))]


def ModelNamesLegacy(f, paths):
    """Legacy: datasets of the groups listed in layer_names (under model_weights/ for a full
    model, else at the root) are named by their weight_names entry, LAYER/WEIGHT where two
    layers list the same weight name; optimizer_weights/ is not the model; any other
    dataset is named by its full path."""
    base = f["model_weights"] if "model_weights" in f else f
    prefix = "model_weights/" if "model_weights" in f else ""
    listed = {}  # dataset path -> (layer, weight name)
    for layer in LoadAttributes(base, "layer_names"):
        if layer not in base:
            continue
        for w in LoadAttributes(base[layer], "weight_names"):
            listed[f"{prefix}{layer}/{w}"] = (layer, w)
    counts = {}
    for layer, w in listed.values():
        counts[w] = counts.get(w, 0) + 1
    names = {}
    for p in paths:
        if p.startswith("optimizer_weights/"):
            names[p] = None
        elif p in listed:
            layer, w = listed[p]
            names[p] = w if counts[w] == 1 else f"{layer}/{w}"
        else:
            names[p] = p
    return names


def VarsGroupNames(h5s):
    """Every group's `name` attribute (Keras >= 3.6), path -> name; for a group in several
    shards, the first that has one (ShardedH5IOStore writes it in the first only)."""
    out = {}
    for _, f in h5s:
        def Visit(name, obj):
            if isinstance(obj, h5py.Group) and "name" in obj.attrs:
                out.setdefault(name, Text(obj.attrs["name"]))
        f.visititems(Visit)
    return out


def ModelNamesKeras3(h5s, paths):
    """Keras 3: optimizer/... is not the model; a dataset P/vars/I is N/I where N is the
    `name` of P/vars, unless that group has none or another model vars group holding
    variables has the same name: then, like any other dataset, its full HDF5 path."""
    group_names = VarsGroupNames(h5s)
    model_groups = {p.rsplit("/", 1)[0] for p in paths
                    if "/" in p and not p.startswith("optimizer/")}
    owners = {}
    for g in model_groups:
        if g.split("/")[-1] == "vars" and g in group_names:
            owners.setdefault(group_names[g], set()).add(g)
    names = {}
    for p in paths:
        if p.startswith("optimizer/"):
            names[p] = None
            continue
        g, _, i = p.rpartition("/")
        n = group_names.get(g)
        if g.split("/")[-1] == "vars" and n is not None and len(owners[n]) == 1:
            names[p] = f"{n}/{i}"
        else:
            names[p] = p
    return names


def ReadCheckpoint(path):
    """What the mount of `path` must show, from the HDF5 files alone: datasets (list of
    dicts: path, shard, model_name, dtype, shape, sha256), the expected metadata.json
    values, and the files shards/ must hold."""
    h5s = OpenH5s(path)
    found = Datasets(h5s)
    names = (ModelNamesLegacy(h5s[0][1], found) if IsLegacy(h5s) else
             ModelNamesKeras3(h5s, found))
    datasets = [{"path": p, "shard": shard, "model_name": names[p], "dtype": DtypeOf(ds),
                 "shape": list(ds.shape), "sha256": Sha(LittleEndianBytes(ds))}
                for p, (shard, ds) in sorted(found.items())]
    return datasets, ExpectedMetadata(path, h5s)


def ExpectedMetadata(path, h5s):
    meta = {}
    f = h5s[0][1]
    if IsLegacy(h5s):
        for key in ("keras_version", "backend"):
            if key in f.attrs:
                meta[key] = Text(f.attrs[key])
        if "model_config" in f.attrs:
            meta["config"] = json.loads(Text(f.attrs["model_config"]))
        if "training_config" in f.attrs:
            meta["training_config"] = json.loads(Text(f.attrs["training_config"]))
        base = f["model_weights"] if "model_weights" in f else f
        meta["layer_names"] = LoadAttributes(base, "layer_names")
        return meta
    names = VarsGroupNames(h5s)
    if names:  # a Keras 3.5 file has none: no key to test
        meta["names"] = names
    files = {}
    if os.path.isdir(path):
        for n in ("config.json", "metadata.json"):
            if os.path.exists(os.path.join(path, n)):
                with open(os.path.join(path, n), "rb") as g:
                    files[n] = g.read()
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            files = {n: z.read(n) for n in ("config.json", "metadata.json") if n in z.namelist()}
    if "config.json" in files:
        meta["config"] = json.loads(files["config.json"])
    if "metadata.json" in files:
        meta["metadata"] = json.loads(files["metadata.json"])
        if "keras_version" in meta["metadata"]:
            meta["keras_version"] = meta["metadata"]["keras_version"]
    return meta


def StoredFiles(path):
    """name -> path of the files shards/ must hold unchanged: the file itself, a directory's
    weight files, a sharded store's shards and map (docs/keras.md)."""
    if path.endswith(".weights.json"):
        d = os.path.dirname(path)
        return {n: os.path.join(d, n) for n in ShardsOf(path) + [os.path.basename(path)]}
    if not os.path.isdir(path):
        return {os.path.basename(path): path}
    return {n: os.path.join(path, n) for n in os.listdir(path) if n.endswith(".h5")}


# ---------------------------------------------------------------------------
# The mount

def TensorFile(mnt, h5path, dtype):
    ext = ".safetensors" if dtype == "bfloat16" else ".npy"
    return os.path.join(mnt, "tensors", *[EscapeComponent(c) for c in h5path.split("/")]) + ext


def ParseSafetensorsFile(path, c, what):
    with open(path, "rb") as f:
        data = f.read()
    st = ParseSafetensors(data, what)
    Validate(st, len(data), what, c)
    return {n: (e.dtype, e.shape, data[st.data_start + e.begin:st.data_start + e.end])
            for n, e in st.entries.items()}


def TorchBytes(t):
    import torch
    if t.numel() == 0:
        return b""
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits as int16
        t = t.view(torch.int16)
    return t.reshape(-1).contiguous().numpy().tobytes()


def CheckMount(c, what, mnt, datasets, metadata, stored):
    """`datasets` as ReadCheckpoint gives them (sha256 of the expected bytes)."""
    # tensors/: every dataset, and nothing else.
    seen = set()
    for d in datasets:
        path = TensorFile(mnt, d["path"], d["dtype"])
        seen.add(os.path.relpath(path, os.path.join(mnt, "tensors")))
        tag = f"{what}: tensors/{os.path.relpath(path, os.path.join(mnt, 'tensors'))}"
        if not c.Expect(os.path.isfile(path), f"{tag}: missing"):
            continue
        if d["dtype"] == "bfloat16":
            one = ParseSafetensorsFile(path, c, tag)
            if c.Equal(len(one), 1, f"{tag}: one tensor"):
                dtype, shape, raw = list(one.values())[0]
                c.Equal((dtype, shape), ("BF16", d["shape"]), f"{tag}: dtype, shape")
                c.Equal(Sha(raw), d["sha256"], f"{tag}: bytes")
                # Beside it, the .npy of its values widened to float32 (bf16: the top half).
                npy = path[:-len(".safetensors")] + ".npy"
                seen.add(os.path.relpath(npy, os.path.join(mnt, "tensors")))
                if c.Expect(os.path.isfile(npy), f"{tag}: no widened .npy beside it"):
                    wide = np.load(npy)
                    want = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
                    c.Equal((wide.dtype.str, list(wide.shape)), ("<f4", d["shape"]),
                            f"{tag}: widened dtype, shape")
                    c.Expect(np.array_equal(wide.reshape(-1), want, equal_nan=True),
                             f"{tag}: widened values")
            continue
        a = np.load(path)
        c.Equal((a.dtype.str, list(a.shape)), (d["dtype"], d["shape"]), f"{tag}: dtype, shape")
        c.Equal(Sha(np.ascontiguousarray(a).tobytes()), d["sha256"], f"{tag}: values")
    listed = set()
    for root, _, files in os.walk(os.path.join(mnt, "tensors")):
        listed |= {os.path.relpath(os.path.join(root, f), os.path.join(mnt, "tensors"))
                   for f in files}
    c.Equal(sorted(listed - seen), [], f"{what}: tensors/ files that are no dataset")

    model = {d["model_name"]: d for d in datasets if d["model_name"] is not None}
    c.Equal(len(model), len([d for d in datasets if d["model_name"] is not None]),
            f"{what}: model names are unique")
    merged = ParseSafetensorsFile(os.path.join(mnt, "model.safetensors"), c,
                                  f"{what}: model.safetensors")
    c.Equal(sorted(merged), sorted(model), f"{what}: model.safetensors names")
    for name, (dtype, shape, raw) in merged.items():
        if name in model:
            d = model[name]
            c.Equal((dtype, shape), (ST_DTYPES[d["dtype"]], d["shape"]),
                    f"{what}: model.safetensors {name}: dtype, shape")
            c.Equal(Sha(raw), d["sha256"], f"{what}: model.safetensors {name}: bytes")

    import torch
    state = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
    in_torch = {n: d for n, d in model.items() if ST_DTYPES[d["dtype"]] not in NO_TORCH}
    c.Equal(sorted(state), sorted(in_torch), f"{what}: pytorch_model.bin names")
    torch_dtypes = {"F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
                    "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
                    "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool,
                    "BF16": torch.bfloat16}
    for name, t in state.items():
        if name in in_torch:
            d = in_torch[name]
            c.Equal((t.dtype, list(t.shape)), (torch_dtypes[ST_DTYPES[d["dtype"]]], d["shape"]),
                    f"{what}: pytorch_model.bin {name}: dtype, shape")
            c.Equal(Sha(TorchBytes(t)), d["sha256"], f"{what}: pytorch_model.bin {name}: bytes")

    shards = os.path.join(mnt, "shards")
    have = sorted(os.listdir(shards))
    for name, source in stored.items():
        if c.Expect(name in have, f"{what}: shards/{name} missing (shards/ has {have})"):
            with open(os.path.join(shards, name), "rb") as a, open(source, "rb") as b:
                c.Expect(a.read() == b.read(),
                         f"{what}: shards/{name} differs from the stored file")

    with open(os.path.join(mnt, ".ckptfs", "metadata.json")) as f:
        ours = json.load(f)
    for key, value in metadata.items():
        if c.Expect(key in ours, f"{what}: metadata.json has no {key!r} (has {sorted(ours)})"):
            c.Equal(ours[key], value, f"{what}: metadata.json {key!r}")


# ---------------------------------------------------------------------------
# Modes

def Pairs(args):
    for a in args:
        key, _, mnt = a.rpartition("=")
        yield key, mnt


def Generated(c, out, args, every_tensor=False):
    """every_tensor: MNT was mounted with --model-key '': the merged files hold the
    optimizer too, under its HDF5 paths (docs/keras.md)."""
    with open(os.path.join(out, "expected.json")) as f:
        expected = json.load(f)["checkpoints"]
    n = 0
    for key, mnt in Pairs(args):
        e = expected[key]
        if every_tensor:
            for d in e["datasets"]:
                d["model_name"] = d["model_name"] or d["path"]
        source = os.path.join(out, e["path"])
        # The writer's record, with the metadata the files themselves give (names, and
        # for .keras the JSON files) merged over what it recorded.
        datasets, meta = ReadCheckpoint(source)
        meta.update(e["metadata"])
        CheckMount(c, key, mnt, e["datasets"], meta, StoredFiles(source))
        n += len(e["datasets"])
    return f"{n} datasets in {len(args)} generated checkpoints agree in every view"


def SelfCheck(c, out):
    """expected.json (what make_keras.py meant to write, named by its own reckoning)
    against the files read with h5py and named by this script's rule."""
    with open(os.path.join(out, "expected.json")) as f:
        expected = json.load(f)["checkpoints"]
    for key, e in expected.items():
        datasets, meta = ReadCheckpoint(os.path.join(out, e["path"]))
        got = {d["path"]: d for d in datasets}
        want = {d["path"]: d for d in e["datasets"]}
        c.Equal(sorted(got), sorted(want), f"{key}: dataset paths")
        for p, d in want.items():
            if p in got:
                for field in ("model_name", "dtype", "shape", "sha256", "shard"):
                    c.Equal(got[p][field], d[field], f"{key}: {p}: {field}")
        for k, v in e["metadata"].items():
            c.Equal(meta.get(k), v, f"{key}: metadata {k}")
        if "layer_names_chunks" in e:
            f = OpenH5s(os.path.join(out, e["path"]))[0][1]
            base = f["model_weights"] if "model_weights" in f else f
            c.Equal(sorted(k for k in base.attrs if k.startswith("layer_names")),
                    [f"layer_names{i}" for i in range(e["layer_names_chunks"])],
                    f"{key}: layer_names split")
    return f"{len(expected)} generated checkpoints: expected.json agrees with the files"


def Fixture(c, fixtures, args):
    with open(os.path.join(fixtures, "manifest.json")) as f:
        manifest = {e["file"]: e for e in json.load(f)}
    n = 0
    for name, mnt in Pairs(args):
        entry = manifest[name]
        source = os.path.join(fixtures, name)
        datasets, meta = ReadCheckpoint(source)
        # The bytes straight from the fixture at the manifest's offsets (absolute, in the
        # .keras zip too), not through h5py: they must equal what h5py read.
        by_path = {d["path"]: d for d in datasets}
        c.Equal(sorted(by_path), sorted(d["name"] for d in entry["datasets"]),
                f"{name}: datasets (h5py vs manifest)")
        with open(source, "rb") as f:
            for d in entry["datasets"]:
                raw = os.pread(f.fileno(), d["nbytes"], d["offset_in_file"])
                if d["name"] in by_path:
                    c.Equal(Sha(raw), by_path[d["name"]]["sha256"],
                            f"{name}: {d['name']} at offset {d['offset_in_file']}")
                    by_path[d["name"]]["sha256"] = Sha(raw)
        if entry.get("metadata.json"):
            c.Equal(meta.get("metadata"), entry["metadata.json"],
                    f"{name}: metadata.json (manifest)")
        CheckMount(c, name, mnt, datasets, meta, {os.path.basename(source): source})
        n += len(datasets)
    return f"{n} datasets of {len(args)} real Keras files agree in every view"


def Run(c, out, run, mnt):
    with open(os.path.join(out, "expected.json")) as f:
        expected = json.load(f)
    r = expected["runs"][run]
    have = sorted(os.listdir(mnt))
    views = os.path.join(mnt, "views")
    for entry in r["entries"]:
        # SOURCE's file at its own path (a file stays a file), its views in views/.
        c.Expect(entry in have, f"{run}: {entry} is not in the mount (ls: {have})")
        c.Expect(os.path.isdir(os.path.join(views, entry)),
                 f"{run}: views/{entry} is not a directory of the mount")
    for entry in r.get("absent", []):  # a save in progress appears once complete
        c.Expect(entry not in have, f"{run}: {entry} is listed (ls: {have})")
    latest = os.path.join(mnt, "latest")
    if c.Expect(os.path.islink(latest), f"{run}: no latest symlink (ls: {have})"):
        c.Equal(os.readlink(latest), r["latest"], f"{run}: latest")
    for entry in r["entries"]:
        key = f"{run}/{entry}"
        e = expected["checkpoints"][key]
        source = os.path.join(out, e["path"])
        _, meta = ReadCheckpoint(source)
        meta.update(e["metadata"])
        CheckMount(c, key, os.path.join(views, entry), e["datasets"], meta, StoredFiles(source))
        if os.path.isfile(source):
            with open(os.path.join(mnt, entry), "rb") as got, open(source, "rb") as want:
                c.Expect(got.read() == want.read(), f"{key}: the mount's file is not SOURCE's")
    # views/latest/ serves the latest entry's model.
    latest = os.path.join(views, "latest")
    e = expected["checkpoints"][f"{run}/{r['latest']}"]
    merged = ParseSafetensorsFile(os.path.join(latest, "model.safetensors"), c, f"{run}: latest")
    model = {d["model_name"]: d["sha256"] for d in e["datasets"] if d["model_name"]}
    c.Equal({n: Sha(v[2]) for n, v in merged.items()}, model, f"{run}: latest/model.safetensors")
    return f"run {run}: {len(r['entries'])} entries, latest {r['latest']}"


def Live(c, out, run_dir, mnt):
    """MNT mounts RUN_DIR, a copy of OUT/run_epochs. Saves epoch 11 (OUT/run_next) into it as
    ModelCheckpoint does, in place: two thirds of the file first (HDF5's superblock records
    the whole file's end), which must not be listed nor be latest; then the rest, after
    which the entry appears, latest moves to it and it serves the new weights."""
    import time
    name = "weights.11-0.30.weights.h5"
    key = f"run_next/{name}"
    with open(os.path.join(out, key), "rb") as f:
        data = f.read()
    latest = os.path.join(mnt, "latest")
    c.Equal(os.readlink(latest), "weights.10-0.38.weights.h5", "live: latest before the save")
    target = os.path.join(run_dir, name)
    with open(target, "wb") as f:
        f.write(data[:len(data) * 2 // 3])
        f.flush()
        os.fsync(f.fileno())
        time.sleep(3)  # > inotify's ~1.3 s: a wrong rule would show it by now
        c.Expect(name not in os.listdir(mnt), f"live: {name} listed while being written")
        c.Equal(os.readlink(latest), "weights.10-0.38.weights.h5", "live: latest while saving")
        f.write(data[len(data) * 2 // 3:])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and os.readlink(latest) != name:
        time.sleep(0.2)
    if not c.Equal(os.readlink(latest), name, "live: latest 15 s after the save"):
        return "live: the save did not become latest"
    e = json.load(open(os.path.join(out, "expected.json")))["checkpoints"][key]
    _, meta = ReadCheckpoint(os.path.join(out, key))
    CheckMount(c, "live " + name, os.path.join(mnt, "views", name), e["datasets"], meta,
               {name: os.path.join(out, key)})

    # Epoch 12 written by h5py itself, held open mid-save as ModelCheckpoint's
    # h5py.File(path, "w") is while _save_state runs: what is on disk then is whatever
    # libhdf5 has written so far (its metadata is written at close).
    name12 = "weights.12-0.29.weights.h5"
    target = os.path.join(run_dir, name12)
    with h5py.File(os.path.join(out, key), "r") as src, h5py.File(target, "w") as dst:
        def Copy(path, obj):
            if isinstance(obj, h5py.Group):
                g = dst.require_group(path)
                for k, v in obj.attrs.items():
                    g.attrs[k] = v
            else:
                dst[path] = obj[()] * 2 if obj.dtype.kind == "f" else obj[()]
        src.visititems(Copy)
        time.sleep(3)
        c.Expect(name12 not in os.listdir(mnt), f"live: {name12} listed while open for writing")
        c.Equal(os.readlink(latest), name, "live: latest while h5py writes")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and os.readlink(latest) != name12:
        time.sleep(0.2)
    if c.Equal(os.readlink(latest), name12, "live: latest 15 s after h5py closed the file"):
        datasets, meta = ReadCheckpoint(target)
        CheckMount(c, "live " + name12, os.path.join(mnt, "views", name12), datasets, meta,
                   {name12: target})
    return f"live: {name} and {name12} appeared once complete and became latest"


def main(argv):
    mode = argv[0]
    c = Checker("check_keras")
    if mode == "generated":
        summary = Generated(c, argv[1], argv[2:])
    elif mode == "generated-every-tensor":
        summary = Generated(c, argv[1], argv[2:], every_tensor=True)
    elif mode == "fixture":
        summary = Fixture(c, argv[1], argv[2:])
    elif mode == "run":
        summary = Run(c, argv[1], argv[2], argv[3])
    elif mode == "live":
        summary = Live(c, argv[1], argv[2], argv[3])
    elif mode == "self-check":
        summary = SelfCheck(c, argv[1])
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    return c.Finish(summary)


if __name__ == "__main__":
    RunMain(main, "generated OUT KEY=MNT... | fixture DIR FILE=MNT... | run OUT RUN MNT | "
            "self-check OUT")
