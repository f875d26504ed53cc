#!/usr/bin/python3
"""Writes Keras checkpoints for ckptfs tests, with h5py and numpy only (no Keras).

    make_keras.py OUT              write every case below into OUT, and OUT/expected.json
    make_keras.py --big SIZE OUT   for scripts/bench.sh: OUT/big.weights.h5, a Keras 3
                                   Sequential of float32 Dense layers of 64 MiB kernels, SIZE
                                   bytes of weights in all (1G, 512M), no optimizer (so the
                                   merged model is the whole file), and OUT/big.keras, the
                                   same zipped as save_model does

Each file is laid out as the Keras function named beside it lays it out, step by step
(Keras 3 keras/src/saving/saving_lib.py, keras/src/legacy/saving/legacy_h5_format.py), so
a reader that handles these handles what Keras writes. They cover what the real fixtures
(/work/shared/fixtures/keras, NOTICE.md) lack:

  bf16/bf16.weights.h5              (a) bfloat16 variables: h5py's opaque 'V2' + attr dtype
  dtypes/dtypes.weights.h5          every other dtype a variable may have (bool as h5py's enum)
  sharded/model.weights.json        (b) ShardedH5IOStore: model_00000/00001.weights.h5, one
                                    vars group spanning both shards
  legacy_fixed/legacy_fixed.h5      (c) tf.keras 2.4 save_weights with h5py 2: fixed-length
                                    string attrs, layer_names0/layer_names1 at the root
  legacy_vlen/legacy_vlen.h5        (c) Keras 3.6 legacy save_model_to_hdf5 with h5py 3:
                                    variable-length string attrs (split ones fixed)
  legacy_keras1/legacy_keras1.h5    Keras 1 save_weights: layer groups at the root, dense_1_W:0
  keras_dir/                        (d) _save_model_to_dir: metadata.json, config.json,
                                    model.weights.h5
  keras_zip/model.keras             (d) _save_model_to_fileobj: the same, ZIP_STORED
  keras_assets/lookup.keras         a .keras with assets/ after the weights
  keras35/keras35.weights.h5        (e) Keras 3.0-3.5: vars groups without a `name`
  edge_names/edge.weights.h5        an empty group's name, a layer named "adam", tf.keras
                                    2.13's _layer_checkpoint_dependencies, a stray dataset
  shared_name/shared.weights.h5     (e) two vars groups named "dense" (nested models)
  run_epochs/                       (f) ModelCheckpoint weights.{epoch:02d}-{val_loss:.2f}
  run_keras/                        (f) model_1.keras .. model_3.keras
  run_legacy/                       tf.keras 2 weights-improvement-{epoch:02d}-{acc}.hdf5
  tuner/                            (f) KerasTuner trial_0000/checkpoint.weights.h5, ...
  run_next/                         epoch 11 of run_epochs, for a live test to save
  run_unpadded/, run_in_progress/   epochs unpadded (9, 10, 100) with mtimes out of order; a
                                    save in progress (cut) that must not be latest
  hostile/                          (g) deflated.keras, no_weights.keras,
                                    truncated.weights.h5, chunked_gzip.weights.h5; big-endian,
                                    soft and external links, npz.keras, sharded maps naming
                                    ../ or holding a dataset twice; a config.json, a
                                    metadata.json and a weight map nested 100,000 deep
  run_deep/                         model_1.keras, and model_2.keras with that deep config

expected.json "hostile": file -> [strings the one-line refusal must hold].
expected.json: for each checkpoint (key = its directory above; "path" = what to mount),
every dataset's HDF5 path, shard file, model name (null for the optimizer's), dtype
(numpy's str, or "bfloat16"), shape, sha256 of its little-endian bytes (bf16: also the
raw 2-byte patterns in hex), and the .ckptfs/metadata.json values the mount must show.
Content is deterministic: seeded numpy, fixed zip times, h5py's default (no) timestamps.
"""
import hashlib
import io
import json
import os
import shutil
import sys
import zipfile

import h5py
import numpy as np

# legacy_h5_format.py: attributes above this size are split (save_attributes_to_hdf5_group).
HDF5_OBJECT_HEADER_LIMIT = 64512
# A fixed time for zip members Keras writes with writestr (its real time is the save's).
ZIP_TIME = (2025, 1, 30, 16, 49, 2)


def Sha(data):
    return hashlib.sha256(data).hexdigest()


class Expected:
    """What one checkpoint holds, collected as it is written."""

    def __init__(self, key, path, kind):
        self.entry = {"path": path, "kind": kind, "datasets": [], "metadata": {}}
        self.key = key

    def Add(self, h5path, shard, model_name, value, bf16=False):
        value = np.asarray(value)
        d = {"path": h5path, "shard": shard, "model_name": model_name,
             "dtype": "bfloat16" if bf16 else value.dtype.str.replace(">", "<").replace("=", "<"),
             "shape": list(value.shape)}
        if value.dtype == np.bool_:
            d["dtype"] = "|b1"
        raw = LittleEndianBytes(value)
        d["sha256"] = Sha(raw)
        if bf16:
            d["raw_hex"] = raw.hex()
        self.entry["datasets"].append(d)


def LittleEndianBytes(value):
    value = np.ascontiguousarray(value)
    if value.dtype.kind in "iuf" and value.dtype.itemsize > 1:
        value = value.astype(value.dtype.newbyteorder("<"))
    return value.tobytes()


def Bf16(rng, shape):
    """bfloat16 bit patterns (uint16) of normal values: the top half of float32's bits,
    as ml_dtypes rounds (round to nearest even)."""
    f = np.asarray(rng.standard_normal(shape), dtype=np.float32).reshape(shape)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return rounded.astype(np.uint16)


# ---------------------------------------------------------------------------
# Keras 3 (saving_lib.py)

class H5Store:
    """saving_lib.H5IOStore in write mode, over one h5py.File.

    make(path, metadata): Keras >= 3.6 (_save_state passes {"name": saveable.name}) creates
    `path/vars` at once with the metadata as attributes; without metadata it defers the
    group to the first __setitem__ (so unused saveables leave no group). names=False is
    Keras 3.0-3.5, whose make() created `path/vars` at once and wrote no attributes.
    """

    def __init__(self, h5, expected, shard, names=True):
        self.h5, self.expected, self.shard, self.names = h5, expected, shard, names
        self.path, self.group = None, None

    def Make(self, path, name):
        self.path = path
        if not self.names:
            self.group = self.h5.create_group(Join(path, "vars"))
        elif name is not None:
            self.group = self.h5.create_group(Join(path, "vars"))
            self.group.attrs["name"] = name
        else:
            self.group = None

    def Set(self, key, value, model_name, bf16=False):
        """H5IOStore.__setitem__: a bfloat16 array goes through create_dataset and gets
        attrs["dtype"] = "bfloat16"; h5py stores ml_dtypes' bfloat16 (numpy kind 'V',
        2 bytes, no fields) as an untagged 2-byte opaque type, as it does numpy's 'V2'."""
        if self.group is None:
            self.group = self.h5.create_group(Join(self.path, "vars"))
        if bf16:
            ds = self.group.create_dataset(key, data=value.view("V2"))
            ds.attrs["dtype"] = "bfloat16"
        else:
            self.group[key] = value
        self.expected.Add(Join(self.path, "vars", key), self.shard, model_name, value, bf16)


def Join(*parts):
    return "/".join(p for p in parts if p)


def SaveState(store, saveables):
    """saving_lib._save_state over a flattened tree: each saveable is (inner_path, name,
    [variables]) in the order _save_state visits them (the model itself, its layers by
    attribute, then the optimizer). A variable is an array, or (array, "bf16") for a
    bfloat16 one given as uint16 bit patterns. Model names follow the naming rule: N/I for
    a named vars group whose name no other model group with variables has, else the path."""
    model_names = {}
    for path, name, variables in saveables:
        if variables and not path.startswith("optimizer") and store.names and name:
            model_names.setdefault(name, []).append(path)
    for path, name, variables in saveables:
        store.Make(path, name)
        for i, v in enumerate(variables):
            bf16 = isinstance(v, tuple)
            value = v[0] if bf16 else v
            if path.startswith("optimizer"):
                model_name = None
            elif store.names and name and len(model_names[name]) == 1:
                model_name = f"{name}/{i}"
            else:
                model_name = Join(path, "vars", str(i))
            store.Set(str(i), value, model_name, bf16)


def Dense(rng, n_in, n_out, dtype=np.float32):
    return [rng.standard_normal((n_in, n_out)).astype(dtype),
            rng.standard_normal((n_out,)).astype(dtype)]


def Adam(rng, variables, iterations=7):
    """Keras 3 Adam's variables in optimizer.variables order: iterations (int64 scalar),
    learning_rate (float32 scalar), then momentum and velocity per trainable variable."""
    out = [np.array(iterations, dtype=np.int64), np.array(0.001, dtype=np.float32)]
    for v in variables:
        out += [rng.standard_normal(v.shape).astype(v.dtype) * 0.01,
                np.abs(rng.standard_normal(v.shape)).astype(v.dtype) * 0.001]
    return out


def SequentialSaveables(rng, sizes=((12, 16), (16, 8), (8, 1)), names=None):
    names = names or ["dense"] + [f"dense_{i}" for i in range(1, len(sizes))]
    layers = [(f"layers/{n}", n, Dense(rng, a, b)) for n, (a, b) in zip(names, sizes)]
    trainable = [v for _, _, vs in layers for v in vs]
    return [("", "sequential", [])] + layers + [("optimizer", "adam", Adam(rng, trainable))]


def WriteWeightsH5(path, expected, saveables, names=True):
    """saving_lib.save_weights_only -> H5IOStore(filepath, mode="w") + _save_state."""
    with h5py.File(path, "w") as h5:
        SaveState(H5Store(h5, expected, os.path.basename(path), names), saveables)


def SequentialConfig(sizes):
    """serialize_keras_object(model) for a Sequential of Dense layers, as config.json."""
    layers = [{"module": "keras.layers", "class_name": "InputLayer",
               "config": {"batch_shape": [None, sizes[0][0]], "dtype": "float32",
                          "sparse": False, "name": "input_layer"}, "registered_name": None}]
    for i, (a, b) in enumerate(sizes):
        layers.append({"module": "keras.layers", "class_name": "Dense",
                       "config": {"name": "dense" if i == 0 else f"dense_{i}", "trainable": True,
                                  "dtype": "float32", "units": b, "activation": "relu",
                                  "use_bias": True},
                       "registered_name": None, "build_config": {"input_shape": [None, a]}})
    return {"module": "keras", "class_name": "Sequential",
            "config": {"name": "sequential", "trainable": True, "dtype": "float32",
                       "layers": layers},
            "registered_name": None, "build_config": {"input_shape": [None, sizes[0][0]]},
            "compile_config": {"optimizer": {"module": "keras.optimizers", "class_name": "Adam",
                                             "config": {"name": "adam", "learning_rate": 0.001},
                                             "registered_name": None},
                               "loss": "mse", "metrics": None}}


def KerasMetadata(version="3.8.0"):
    """saving_lib._serialize_model_as_json's metadata.json (date fixed here)."""
    return {"keras_version": version, "date_saved": "2025-01-30@16:49:02"}


def H5Bytes(expected, saveables, shard="model.weights.h5"):
    """H5IOStore(_VARS_FNAME_H5, archive=zf, mode="w"): the h5 file built in an io.BytesIO."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h5:
        SaveState(H5Store(h5, expected, shard), saveables)
    return buf.getvalue()


def WriteKerasZip(path, expected, saveables, config, metadata, weights_compress=zipfile.ZIP_STORED,
                  with_weights=True):
    """saving_lib._save_model_to_fileobj: zipfile.ZipFile(f, "w") (ZIP_STORED); metadata.json
    and config.json through zf.open(name, "w") (ZipInfo's 1980 date, no permissions), then
    the weights store's close(): archive.writestr("model.weights.h5", bytes) (the save's
    time, mode 0o600). The member order is Keras's: metadata.json, config.json, weights.
    A config or metadata given as text is written as it is (hostile cases)."""
    weights = H5Bytes(expected, saveables) if with_weights else None
    with open(path, "wb") as f, zipfile.ZipFile(f, "w") as zf:
        for member, value in (("metadata.json", metadata), ("config.json", config)):
            with zf.open(member, "w") as m:
                m.write((value if isinstance(value, str) else json.dumps(value)).encode())
        if with_weights:
            info = zipfile.ZipInfo("model.weights.h5", date_time=ZIP_TIME)
            info.compress_type = weights_compress
            info.external_attr = 0o600 << 16
            zf.writestr(info, weights)


def WriteKerasZipWithAssets(path, expected, saveables, config, metadata, assets):
    """_save_model_to_fileobj for a model with assets (a StringLookup's vocabulary): the
    weights store closes first (writestr model.weights.h5), then DiskIOStore.close() adds
    each file of its temporary directory with archive.write(file, "assets/..."): after the
    weights, each with the temporary file's time and mode."""
    weights = H5Bytes(expected, saveables)
    with open(path, "wb") as f, zipfile.ZipFile(f, "w") as zf:
        with zf.open("metadata.json", "w") as m:
            m.write(json.dumps(metadata).encode())
        with zf.open("config.json", "w") as m:
            m.write(json.dumps(config).encode())
        info = zipfile.ZipInfo("model.weights.h5", date_time=ZIP_TIME)
        info.external_attr = 0o600 << 16
        zf.writestr(info, weights)
        for name, data in assets:
            info = zipfile.ZipInfo(f"assets/{name}", date_time=ZIP_TIME)
            info.external_attr = 0o100644 << 16
            zf.writestr(info, data)


def WriteKerasDir(path, expected, saveables, config, metadata):
    """saving_lib._save_model_to_dir (save_model(..., zipped=False))."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metadata.json"), "w") as f:
        f.write(json.dumps(metadata))
    with open(os.path.join(path, "config.json"), "w") as f:
        f.write(json.dumps(config))
    WriteWeightsH5(os.path.join(path, "model.weights.h5"), expected, saveables)


class ShardedStore:
    """saving_lib.ShardedH5IOStore in write mode, for `DIR/model.weights.json` and
    max_shard_size in bytes (Keras takes GB: float(max_shard_size) * 1024**3).

    - The first shard, model_00000.weights.h5 (base name: the json's stem without
      ".weights"), is opened at construction.
    - __setitem__ adds the value's size (elements * bits / 8, a float) to the running
      sizes; past max_shard_size it closes the shard and opens the next, then writes
      through H5IOStore.__setitem__, whose group is created anew in the new shard *without*
      the metadata (_create_h5_group(self._h5_entry_path)): a group spanning two shards has
      its `name` in the first only.
    - weight_map maps the group's HDF5 name ("/layers/dense/vars") to its shard, or to the
      list of its shards when it spans several; groups with no variable are not listed.
    - close() writes {"metadata": {"total_size": ...}, "weight_map": ...} with indent=4.
    """

    names = True  # Keras >= 3.6: SaveState passes each saveable's name

    def __init__(self, directory, expected, max_shard_size):
        self.dir, self.expected, self.max = directory, expected, max_shard_size
        self.index = 0
        self.current_size = 0
        self.total_size = 0
        self.weight_map = {}
        self.h5 = None
        self.NewShard()

    def NewShard(self):
        if self.h5 is not None:
            self.h5.close()
        self.shard = f"model_{self.index:05}.weights.h5"
        self.index += 1
        self.h5 = h5py.File(os.path.join(self.dir, self.shard), "w")
        self.store = H5Store(self.h5, self.expected, self.shard)
        self.store.path = getattr(self, "path", None)

    def Make(self, path, name):
        self.path = path
        self.store.Make(path, name)

    def Set(self, key, value, model_name, bf16=False):
        size = value.size * value.dtype.itemsize * 8 / 8
        self.total_size += size
        self.current_size += size
        if self.current_size > self.max:
            self.NewShard()
            self.store.group = None  # _h5_entry_initialized = False
            self.current_size = size
        self.store.Set(key, value, model_name, bf16)
        group = "/" + Join(self.path, "vars")
        if group not in self.weight_map:
            self.weight_map[group] = self.shard
        else:
            if not isinstance(self.weight_map[group], list):
                self.weight_map[group] = [self.weight_map[group]]
            if self.shard not in self.weight_map[group]:
                self.weight_map[group].append(self.shard)

    def Close(self):
        self.h5.close()
        with open(os.path.join(self.dir, "model.weights.json"), "w") as f:
            f.write(json.dumps({"metadata": {"total_size": self.total_size},
                                "weight_map": self.weight_map}, indent=4))


# ---------------------------------------------------------------------------
# Legacy HDF5 (legacy_h5_format.py; tf.keras 2.x and Keras 1/2 wrote the same layout)

def SaveAttributes(group, name, data, fixed):
    """save_attributes_to_hdf5_group: np.asarray(data) (bytes: a fixed-length 'S' array),
    split with np.array_split into as few chunks as keep each under
    HDF5_OBJECT_HEADER_LIMIT bytes, stored as NAME0, NAME1, ... (the numpy chunks: fixed-
    length strings) when more than one; else `group.attrs[name] = data`, the list itself,
    which h5py 3 stores as variable-length strings and h5py 2 as a fixed-length array
    (fixed=True). The fixtures show both. An empty list becomes a float64 array of length 0
    either way."""
    data_npy = np.asarray(data)
    num_chunks = 1
    chunks = np.array_split(data_npy, num_chunks)
    while any(x.nbytes > HDF5_OBJECT_HEADER_LIMIT for x in chunks):
        num_chunks += 1
        chunks = np.array_split(data_npy, num_chunks)
    if num_chunks > 1:
        for i, c in enumerate(chunks):
            group.attrs["%s%d" % (name, i)] = c
    else:
        group.attrs[name] = data_npy if fixed else data
    return num_chunks


def Attr(value, fixed):
    """A bytes attribute: h5py 2 wrote a fixed-length string, h5py 3 a variable-length one."""
    return np.bytes_(value) if fixed else value


def SaveWeightsToGroup(f, layers, expected, shard, fixed, keras_version, backend, root=""):
    """save_weights_to_hdf5_group: layer_names (in model order), backend and keras_version
    as bytes attrs, then one group per layer in sorted name order, each with weight_names
    and a dataset per weight named by it (a name "dense_1/kernel:0" makes the subgroup
    dense_1). layers: [(layer name, [(weight name, value)])]. Returns the chunk count of
    layer_names. Model names: the weight name, or LAYER/WEIGHT where two layers share it."""
    chunks = SaveAttributes(f, "layer_names", [n.encode("utf8") for n, _ in layers], fixed)
    if backend is not None:
        f.attrs["backend"] = Attr(backend, fixed)
    if keras_version is not None:
        f.attrs["keras_version"] = Attr(keras_version, fixed)
    counts = {}
    for _, weights in layers:
        for w, _ in weights:
            counts[w] = counts.get(w, 0) + 1
    for layer, weights in sorted(layers, key=lambda x: x[0]):
        g = f.create_group(layer)
        SaveAttributes(g, "weight_names", [w.encode("utf8") for w, _ in weights], fixed)
        for w, val in weights:
            WriteDataset(g, w, val)
            model_name = w if counts[w] == 1 else f"{layer}/{w}"
            expected.Add(Join(root, layer, w), shard, model_name, val)
    return chunks


def WriteDataset(group, name, value):
    """create_dataset(name, shape, dtype) then assign, as the legacy writers do (a scalar
    through [()])."""
    d = group.create_dataset(name, value.shape, dtype=value.dtype)
    if not value.shape:
        d[()] = value
    else:
        d[:] = value


def SaveOptimizerWeights(f, weights, expected, shard, fixed):
    """save_optimizer_weights_to_hdf5_group: optimizer_weights/ with weight_names."""
    g = f.create_group("optimizer_weights")
    SaveAttributes(g, "weight_names", [w.encode("utf8") for w, _ in weights], fixed)
    for w, val in weights:
        WriteDataset(g, w, val)
        expected.Add(Join("optimizer_weights", w), shard, None, val)


def LegacyLayers(rng, n, name_of, weight_name, width=2):
    """n Dense layers (every 7th a weightless Dropout: its group has an empty
    weight_names, which np.asarray([]) stores as a float64 array of length 0)."""
    layers = []
    for i in range(n):
        name = name_of(i)
        if i % 7 == 3:
            layers.append((name, []))
            continue
        k, b = Dense(rng, width, width)
        layers.append((name, [(weight_name(name, "kernel"), k), (weight_name(name, "bias"), b)]))
    return layers


def LegacyModelConfig(layers):
    return {"class_name": "Sequential",
            "config": {"name": "sequential",
                       "layers": [{"class_name": "Dropout" if not w else "Dense",
                                   "config": {"name": n, "trainable": True}} for n, w in layers]}}


def WriteLegacy(path, expected, rng, fixed):
    """fixed=False: legacy_h5_format.save_model_to_hdf5 of Keras 3.6 with h5py 3: root
    attrs from saving_utils.model_metadata (keras_version and backend as str, model_config
    and training_config as JSON .encode()d to bytes: variable-length strings), model_weights/
    by save_weights_to_hdf5_group (weight names w.path, "sequential/LAYER/kernel"; the empty
    top_level_model_weights group), optimizer_weights/. Plus one dataset in a layer group
    that its weight_names does not list (named by its full path).

    fixed=True: tf.keras 2.4 model.save_weights("x.h5") with h5py 2: save_weights_to_hdf5_group
    on the file itself (layer groups at the root), every string attribute fixed-length, weight
    names w.name ("LAYER/kernel:0"). Weights only: with h5py 2 a full model this large could
    not be saved (its model_config, a fixed-length string over 64 KiB, does not fit an object
    header, which is why save_attributes_to_hdf5_group splits layer_names).

    Both: long layer names make layer_names exceed HDF5_OBJECT_HEADER_LIMIT, so it is split
    into layer_names0, layer_names1 (fixed-length chunks). Two layers hold a weight of the
    same name (layers of nested models TF named in one scope): LAYER/WEIGHT for those."""
    prefix = "a_descriptively_named_dense_block_of_the_model_" * 4
    shard = os.path.basename(path)
    if fixed:
        layers = LegacyLayers(rng, 360, lambda i: f"{prefix}{i:03d}", lambda n, w: f"{n}/{w}:0")
        version = "2.4.0"
    else:
        layers = LegacyLayers(rng, 360, lambda i: f"{prefix}{i:03d}",
                              lambda n, w: f"sequential/{n}/{w}")
        version = "3.6.0"
    k, b = Dense(rng, 2, 2)
    layers += [("encoder_dense", [("dense/kernel:0", k), ("dense/bias:0", b)]),
               ("decoder_dense", [("dense/kernel:0", k * 2), ("dense/bias:0", b * 2)])]
    if fixed:
        with h5py.File(path, "w") as f:
            chunks = SaveWeightsToGroup(f, layers, expected, shard, fixed, version.encode(),
                                        b"tensorflow")
        expected.entry["metadata"] = {"keras_version": version, "backend": "tensorflow",
                                      "layer_names": [n for n, _ in layers]}
        expected.entry["layer_names_chunks"] = chunks
        assert chunks >= 2, "layer_names should be split"
        return
    model_config = LegacyModelConfig(layers)
    training_config = {"loss": "mse", "metrics": None, "optimizer_config":
                       {"class_name": "Adam", "config": {"name": "Adam", "learning_rate": 0.001}}}
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = version
        f.attrs["backend"] = "tensorflow"
        f.attrs["model_config"] = json.dumps(model_config).encode("utf8")
        f.attrs["training_config"] = json.dumps(training_config).encode("utf8")
        mw = f.create_group("model_weights")
        chunks = SaveWeightsToGroup(mw, layers, expected, shard, fixed, version.encode(),
                                    b"tensorflow", root="model_weights")
        g = mw.create_group("top_level_model_weights")
        SaveAttributes(g, "weight_names", [], fixed)
        extra = np.arange(3, dtype=np.int32)
        mw[layers[0][0]].create_dataset("unlisted", data=extra)
        expected.Add(f"model_weights/{layers[0][0]}/unlisted", shard,
                     f"model_weights/{layers[0][0]}/unlisted", extra)
        opt = [("adam/iteration", np.array(12, dtype=np.int64)),
               ("adam/learning_rate", np.array(0.001, dtype=np.float32))]
        for n, ws in layers[:3]:
            for w, v in ws:
                opt.append((f"adam/{w}_momentum", (v * 0.01).astype(np.float32)))
        SaveOptimizerWeights(f, opt, expected, shard, fixed)
    assert chunks >= 2, "layer_names should be split"
    expected.entry["metadata"] = {
        "keras_version": version, "backend": "tensorflow", "config": model_config,
        "training_config": training_config, "layer_names": [n for n, _ in layers]}
    expected.entry["layer_names_chunks"] = chunks


def WriteLegacyKeras1(path, expected, rng):
    """Keras 1.2 model.save_weights (topology.save_weights_to_hdf5_group of its day): the
    layer groups at the root, layer_names the only root attribute (no keras_version), and
    weight names "dense_1_W:0" directly in the layer group."""
    layers = [("lstm_1", [("lstm_1_W:0", rng.standard_normal((3, 8)).astype(np.float32)),
                          ("lstm_1_U:0", rng.standard_normal((2, 8)).astype(np.float32)),
                          ("lstm_1_b:0", rng.standard_normal((8,)).astype(np.float32))]),
              ("dropout_1", []),
              ("dense_1", [("dense_1_W:0", rng.standard_normal((2, 1)).astype(np.float32)),
                           ("dense_1_b:0", rng.standard_normal((1,)).astype(np.float32))])]
    with h5py.File(path, "w") as f:
        SaveWeightsToGroup(f, layers, expected, os.path.basename(path), True, None, None)
    expected.entry["metadata"] = {"layer_names": [n for n, _ in layers]}


# ---------------------------------------------------------------------------
# The cases

def Main(out):
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    checkpoints, runs, hostile = {}, {}, {}

    def New(key, path, kind):
        e = Expected(key, path, kind)
        checkpoints[key] = e.entry
        return e

    def Dir(*parts):
        d = os.path.join(out, *parts)
        os.makedirs(d, exist_ok=True)
        return d

    # (a) bfloat16: a mixed-precision model's variables in bfloat16 (dtype policy
    # "bfloat16"), its optimizer's in float32, as Keras keeps them.
    rng = np.random.default_rng(1)
    Dir("bf16")
    e = New("bf16", "bf16/bf16.weights.h5", "keras3")
    saveables = [("", "sequential", []),
                 ("layers/dense", "dense", [(Bf16(rng, (6, 4)), "bf16"),
                                            (Bf16(rng, (4,)), "bf16")]),
                 ("layers/dense_1", "dense_1", [(Bf16(rng, (4, 3)), "bf16"),
                                                (Bf16(rng, ()), "bf16")]),
                 ("optimizer", "adam", [np.array(3, dtype=np.int64),
                                        rng.standard_normal((6, 4)).astype(np.float32)])]
    WriteWeightsH5(os.path.join(out, e.entry["path"]), e, saveables)

    # Every other dtype a Keras variable may have (a custom layer's add_weight(dtype=...)).
    rng = np.random.default_rng(2)
    Dir("dtypes")
    e = New("dtypes", "dtypes/dtypes.weights.h5", "keras3")
    values = [rng.standard_normal((3, 2)).astype(np.float16),
              rng.standard_normal((3, 2)).astype(np.float32),
              rng.standard_normal((2, 2)).astype(np.float64)]
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(t)
        values.append(rng.integers(info.min, info.max, size=(5,), dtype=t, endpoint=True))
    values += [rng.integers(0, 2, size=(2, 3)).astype(np.bool_), np.array(True),
               np.array(2.5, dtype=np.float32), np.zeros((0, 4), dtype=np.float32)]
    # Layer names are any string without '/': '%' must be escaped in tensors/, and '.'
    # does not split a path there (HDF5 paths split at '/' only).
    WriteWeightsH5(os.path.join(out, e.entry["path"]), e,
                   [("", "functional", []), ("layers/custom", "custom", values),
                    ("layers/dense", "dense", Dense(rng, 3, 2)),
                    ("layers/50%_dense", "50%_dense", Dense(rng, 2, 2)),
                    ("layers/block.1", "block.1", Dense(rng, 2, 2))])

    # (b) sharded: save_weights("model.weights.json", max_shard_size=...). Sizes chosen so
    # dense_1's kernel fits in shard 0 and its bias does not: dense_1 spans both shards.
    rng = np.random.default_rng(3)
    d = Dir("sharded")
    e = New("sharded", "sharded/model.weights.json", "keras3-sharded")
    saveables = [("", "sequential", []), ("layers/dense", "dense", Dense(rng, 8, 16)),
                 ("layers/dense_1", "dense_1", Dense(rng, 16, 8)),
                 ("layers/dense_2", "dense_2", Dense(rng, 8, 1))]
    store = ShardedStore(d, e, max_shard_size=512 + 64 + 512 + 16)
    SaveState(store, saveables)
    store.Close()
    assert store.index == 2 and isinstance(store.weight_map["/layers/dense_1/vars"], list)
    e.entry["files"] = ["model.weights.json", "model_00000.weights.h5", "model_00001.weights.h5"]

    # (c) legacy files with layer_names split in two.
    rng = np.random.default_rng(4)
    Dir("legacy_fixed")
    e = New("legacy_fixed", "legacy_fixed/legacy_fixed.h5", "legacy-weights")
    WriteLegacy(os.path.join(out, e.entry["path"]), e, rng, fixed=True)
    Dir("legacy_vlen")
    e = New("legacy_vlen", "legacy_vlen/legacy_vlen.h5", "legacy-full")
    WriteLegacy(os.path.join(out, e.entry["path"]), e, rng, fixed=False)
    Dir("legacy_keras1")
    e = New("legacy_keras1", "legacy_keras1/legacy_keras1.h5", "legacy-weights")
    WriteLegacyKeras1(os.path.join(out, e.entry["path"]), e, rng)

    # (d) the same model saved unzipped and zipped.
    sizes = ((12, 16), (16, 8), (8, 1))
    config, metadata = SequentialConfig(sizes), KerasMetadata()
    for key, writer, path in (("keras_dir", WriteKerasDir, "keras_dir"),
                              ("keras_zip", WriteKerasZip, "keras_zip/model.keras")):
        rng = np.random.default_rng(5)
        Dir(key)
        e = New(key, path, "keras3-zip" if key == "keras_zip" else "keras3-dir")
        writer(os.path.join(out, path), e, SequentialSaveables(rng, sizes), config, metadata)
        for ds in e.entry["datasets"]:
            ds["shard"] = "model.weights.h5"
        e.entry["metadata"] = {"keras_version": metadata["keras_version"], "config": config,
                               "metadata": metadata}

    # A .keras with assets/ after the weights (a StringLookup layer's vocabulary).
    rng = np.random.default_rng(10)
    Dir("keras_assets")
    e = New("keras_assets", "keras_assets/lookup.keras", "keras3-zip")
    saveables = [("", "functional", []), ("layers/string_lookup", "string_lookup", []),
                 ("layers/embedding", "embedding",
                  [rng.standard_normal((6, 4)).astype(np.float32)]),
                 ("layers/dense", "dense", Dense(rng, 4, 1))]
    lookup_config = {"module": "keras", "class_name": "Functional",
                     "config": {"name": "functional", "layers": []}, "registered_name": None}
    WriteKerasZipWithAssets(os.path.join(out, e.entry["path"]), e, saveables, lookup_config,
                            KerasMetadata("3.10.0"),
                            [("layers/string_lookup/vocabulary.txt", b"[UNK]\ncat\ndog\nfish\n")])
    for ds in e.entry["datasets"]:
        ds["shard"] = "model.weights.h5"
    e.entry["metadata"] = {"keras_version": "3.10.0", "config": lookup_config,
                           "metadata": KerasMetadata("3.10.0")}

    # (e) Keras 3.0-3.5: no name attributes, every vars group created (empty ones too).
    rng = np.random.default_rng(6)
    Dir("keras35")
    e = New("keras35", "keras35/keras35.weights.h5", "keras3")
    WriteWeightsH5(os.path.join(out, e.entry["path"]), e, SequentialSaveables(rng), names=False)

    # (e) Two nested functional models each with a layer named "dense": their vars groups
    # share the name, so their variables keep the full path; "head" is unique.
    rng = np.random.default_rng(7)
    Dir("shared_name")
    e = New("shared_name", "shared_name/shared.weights.h5", "keras3")
    enc, dec, head = Dense(rng, 4, 4), Dense(rng, 4, 4), Dense(rng, 4, 2)
    saveables = [("", "functional", []), ("layers/encoder", "encoder", []),
                 ("layers/encoder/layers/dense", "dense", enc),
                 ("layers/decoder", "decoder", []),
                 ("layers/decoder/layers/dense", "dense", dec),
                 ("layers/head", "head", head),
                 ("optimizer", "adam", Adam(rng, enc + dec + head))]
    WriteWeightsH5(os.path.join(out, e.entry["path"]), e, saveables)

    # Names at the edges of the rule: a sub-model whose own vars group (empty: it has no
    # variables of its own) carries a layer's name, which clashes with nothing; a layer
    # named like the optimizer ("adam": the optimizer is not the model); tf.keras 2.13's
    # .keras layout (_layer_checkpoint_dependencies/..., no names: H5IOStore.get's "2.13
    # compatibility"); and a dataset outside any vars group (no Keras writes one: the rule
    # gives it its path).
    rng = np.random.default_rng(8)
    Dir("edge_names")
    e = New("edge_names", "edge_names/edge.weights.h5", "keras3")
    path = os.path.join(out, e.entry["path"])
    WriteWeightsH5(path, e, [("", "functional", []), ("layers/dense", "dense", Dense(rng, 2, 3)),
                             ("layers/encoder", "dense", []),
                             ("layers/adam", "adam", Dense(rng, 3, 1)),
                             ("optimizer", "adam", [np.array(1, dtype=np.int64)])])
    with h5py.File(path, "a") as f:
        legacy = H5Store(f, e, os.path.basename(path), names=False)
        SaveState(legacy, [("_layer_checkpoint_dependencies/dense_9", None, Dense(rng, 2, 2))])
        stray = rng.standard_normal((3,)).astype(np.float32)
        f["stray"] = stray
        e.Add("stray", os.path.basename(path), "stray", stray)

    # (f) ModelCheckpoint("weights.{epoch:02d}-{val_loss:.2f}.weights.h5",
    # save_weights_only=True): files written in epoch order (mtimes increase with the
    # epoch); the latest is epoch 10.
    def WeightsRun(run, saves, name_of, seed, latest):
        """One run's ModelCheckpoint files, `saves` (epoch, val_loss) in the order written
        (mtimes an hour apart in that order)."""
        Dir(run)
        entries = []
        for n, (epoch, loss) in enumerate(saves):
            name = name_of(epoch, loss)
            key = f"{run}/{name}"
            e = New(key, key, "keras3")
            WriteWeightsH5(os.path.join(out, key), e,
                           SequentialSaveables(np.random.default_rng(seed + epoch)))
            os.utime(os.path.join(out, key), (1700000000 + 3600 * n, 1700000000 + 3600 * n))
            entries.append(name)
        runs[run] = {"entries": entries, "latest": latest}

    WeightsRun("run_epochs", ((1, "0.52"), (2, "0.41"), (10, "0.38")),
               lambda epoch, loss: f"weights.{epoch:02d}-{loss}.weights.h5", 100,
               "weights.10-0.38.weights.h5")

    # ModelCheckpoint("weights.{epoch}-{val_loss:.2f}.weights.h5"): epochs unpadded, and
    # mtimes as a copy may leave them (epoch 100 oldest): neither text order nor time
    # gives the latest, epoch 100; only the epoch in the name does.
    WeightsRun("run_unpadded", ((100, "0.30"), (9, "0.40"), (10, "0.38")),
               lambda epoch, loss: f"weights.{epoch}-{loss}.weights.h5", 150,
               "weights.100-0.30.weights.h5")

    # The save after run_epochs' last, for a live test to write into a mounted copy of it.
    Dir("run_next")
    key = "run_next/weights.11-0.30.weights.h5"
    e = New(key, key, "keras3")
    WriteWeightsH5(os.path.join(out, key), e, SequentialSaveables(np.random.default_rng(111)))

    # A save in progress: ModelCheckpoint writes in place (h5py.File(path, "w")), so epoch
    # 3 is visible before HDF5 has written all of it (cut here at two thirds, its
    # superblock's end address past the file's end). It is no latest: epoch 2 is.
    Dir("run_in_progress")
    entries = []
    for epoch in (1, 2, 3):
        name = f"weights.{epoch:02d}-0.50.weights.h5"
        key = f"run_in_progress/{name}"
        e = New(key, key, "keras3")
        WriteWeightsH5(os.path.join(out, key), e,
                       SequentialSaveables(np.random.default_rng(170 + epoch)))
        if epoch == 3:
            del checkpoints[key]
            with open(os.path.join(out, key), "r+b") as f:
                f.truncate(os.path.getsize(os.path.join(out, key)) * 2 // 3)
        else:
            entries.append(name)
        os.utime(os.path.join(out, key), (1700000000 + 60 * epoch, 1700000000 + 60 * epoch))
    runs["run_in_progress"] = {"entries": entries, "latest": "weights.02-0.50.weights.h5",
                               "absent": ["weights.03-0.50.weights.h5"]}

    # tf.keras 2.x tutorials' ModelCheckpoint("weights-improvement-{epoch:02d}-
    # {val_accuracy:.2f}.hdf5", save_best_only=True, save_weights_only=True): legacy HDF5
    # weights (save_weights_to_hdf5_group at the root), epochs with gaps; latest epoch 12.
    Dir("run_legacy")
    entries = []
    for n, (epoch, acc) in enumerate(((1, "0.52"), (3, "0.61"), (12, "0.70"))):
        name = f"weights-improvement-{epoch:02d}-{acc}.hdf5"
        key = f"run_legacy/{name}"
        e = New(key, key, "legacy-weights")
        lrng = np.random.default_rng(400 + epoch)
        k0, b0, k1, b1 = (lrng.standard_normal(s).astype(np.float32)
                          for s in ((4, 8), (8,), (8, 1), (1,)))
        layers = [("dense", [("dense/kernel:0", k0), ("dense/bias:0", b0)]),
                  ("dropout", []),
                  ("dense_1", [("dense_1/kernel:0", k1), ("dense_1/bias:0", b1)])]
        with h5py.File(os.path.join(out, key), "w") as f:
            SaveWeightsToGroup(f, layers, e, name, False, b"2.9.0", b"tensorflow")
        e.entry["metadata"] = {"keras_version": "2.9.0", "backend": "tensorflow",
                               "layer_names": ["dense", "dropout", "dense_1"]}
        os.utime(os.path.join(out, key), (1700000000 + 60 * n, 1700000000 + 60 * n))
        entries.append(name)
    runs["run_legacy"] = {"entries": entries, "latest": "weights-improvement-12-0.70.hdf5"}

    # model.save(f"model_{epoch}.keras") each epoch.
    d = Dir("run_keras")
    entries = []
    for epoch in (1, 2, 3):
        name = f"model_{epoch}.keras"
        key = f"run_keras/{name}"
        e = New(key, key, "keras3-zip")
        WriteKerasZip(os.path.join(out, key), e,
                      SequentialSaveables(np.random.default_rng(200 + epoch), sizes), config,
                      metadata)
        for ds in e.entry["datasets"]:
            ds["shard"] = "model.weights.h5"
        os.utime(os.path.join(out, key), (1700000000 + 60 * epoch, 1700000000 + 60 * epoch))
        entries.append(name)
    runs["run_keras"] = {"entries": entries, "latest": "model_3.keras"}

    # KerasTuner: PROJECT/trial_NNNN/checkpoint.weights.h5 (Tuner._get_checkpoint_fname
    # with Keras 3), trial.json and build_config.json beside it, oracle.json and
    # tuner0.json at the top.
    d = Dir("tuner")
    entries = []
    for t in (0, 1):
        trial = f"trial_{t:04d}"
        Dir("tuner", trial)
        key = f"tuner/{trial}"
        e = New(key, key, "keras3")
        WriteWeightsH5(os.path.join(out, key, "checkpoint.weights.h5"), e,
                       SequentialSaveables(np.random.default_rng(300 + t)))
        with open(os.path.join(out, key, "trial.json"), "w") as f:
            json.dump({"trial_id": f"{t:04d}", "status": "COMPLETED",
                       "hyperparameters": {"values": {"units": 16}}, "score": 0.5 - t / 10}, f)
        with open(os.path.join(out, key, "build_config.json"), "w") as f:
            json.dump({"input_shape": [None, 12]}, f)
        entries.append(trial)
    with open(os.path.join(d, "oracle.json"), "w") as f:
        json.dump({"ongoing_trials": {}, "tried_so_far": ["a", "b"]}, f)
    with open(os.path.join(d, "tuner0.json"), "w") as f:
        json.dump({}, f)
    runs["tuner"] = {"entries": entries, "latest": "trial_0001"}

    # (g) hostile files: each must be refused in one line naming it and what is wrong.
    d = Dir("hostile")
    rng = np.random.default_rng(9)
    scratch = Expected("scratch", "", "")
    WriteKerasZip(os.path.join(d, "deflated.keras"), scratch, SequentialSaveables(rng, sizes),
                  config, metadata, weights_compress=zipfile.ZIP_DEFLATED)
    WriteKerasZip(os.path.join(d, "no_weights.keras"), scratch, [], config, metadata,
                  with_weights=False)
    WriteWeightsH5(os.path.join(d, "whole.weights.h5"), scratch, SequentialSaveables(rng))
    with open(os.path.join(d, "whole.weights.h5"), "rb") as f:
        data = f.read()
    with open(os.path.join(d, "truncated.weights.h5"), "wb") as f:
        f.write(data[:len(data) * 2 // 3])
    os.remove(os.path.join(d, "whole.weights.h5"))
    with h5py.File(os.path.join(d, "chunked_gzip.weights.h5"), "w") as f:
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        g.create_dataset("0", data=rng.standard_normal((64, 32)).astype(np.float32),
                         chunks=(16, 32), compression="gzip")
        g["1"] = np.zeros(32, dtype=np.float32)
    # A big-endian dataset (h5py writes what it is given; Keras never gives one).
    with h5py.File(os.path.join(d, "big_endian.weights.h5"), "w") as f:
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        g["0"] = np.arange(6, dtype=">f4").reshape(2, 3)
    # Links: never followed (a soft link to another dataset, an external link to a file).
    with h5py.File(os.path.join(d, "soft_link.weights.h5"), "w") as f:
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        g["0"] = np.ones((2, 2), dtype=np.float32)
        g["1"] = h5py.SoftLink("/layers/dense/vars/0")
    with h5py.File(os.path.join(d, "external_link.weights.h5"), "w") as f:
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        g["0"] = np.ones((2, 2), dtype=np.float32)
        g["1"] = h5py.ExternalLink("/etc/passwd", "/x")
    # saving_lib with weights_format="npz": NpzIOStore writes model.weights.npz instead.
    with zipfile.ZipFile(os.path.join(d, "npz.keras"), "w") as zf:
        with zf.open("metadata.json", "w") as m:
            m.write(json.dumps(metadata).encode())
        with zf.open("config.json", "w") as m:
            m.write(json.dumps(config).encode())
        buf = io.BytesIO()
        np.savez(buf, **{"layers/dense": np.ones(3, dtype=np.float32)})
        zf.writestr(zipfile.ZipInfo("model.weights.npz", date_time=ZIP_TIME), buf.getvalue())
    # Sharded maps: one naming a shard outside the directory, one whose shards both hold
    # the same dataset.
    for case in ("sharded_outside", "sharded_twice"):
        sd = Dir("hostile", case)
        store = ShardedStore(sd, scratch, max_shard_size=600)
        SaveState(store, [("layers/dense", "dense", Dense(rng, 8, 16)),
                          ("layers/dense_1", "dense_1", Dense(rng, 16, 8))])
        store.Close()
        index = os.path.join(sd, "model.weights.json")
        with open(index) as f:
            m = json.load(f)
        if case == "sharded_outside":
            m["weight_map"]["/layers/dense_1/vars"] = "../model_00001.weights.h5"
            shutil.copy(os.path.join(sd, "model_00001.weights.h5"), d)
        else:
            with h5py.File(os.path.join(sd, "model_00001.weights.h5"), "a") as f:
                f["layers/dense/vars/0"] = np.zeros((8, 16), dtype=np.float32)
            m["weight_map"]["/layers/dense/vars"] = ["model_00000.weights.h5",
                                                     "model_00001.weights.h5"]
        with open(index, "w") as f:
            f.write(json.dumps(m, indent=4))
    # JSON nested 100,000 deep (200 KB): once a stack overflow wherever the parsed value was
    # copied; now refused before a tree is built. A config, a metadata.json, a weight map.
    deep = 100000
    deep_json = '{"a":' * deep + "1" + "}" * deep
    WriteKerasZip(os.path.join(d, "deep_config.keras"), scratch, SequentialSaveables(rng, sizes),
                  deep_json, metadata)
    WriteKerasZip(os.path.join(d, "deep_metadata.keras"), scratch,
                  SequentialSaveables(rng, sizes), config, deep_json)
    sd = Dir("hostile", "sharded_deep")
    store = ShardedStore(sd, scratch, max_shard_size=600)
    SaveState(store, [("layers/dense", "dense", Dense(rng, 8, 16))])
    store.Close()
    with open(os.path.join(sd, "model.weights.json"), "w") as f:
        f.write('{"weight_map": {"/layers/dense/vars": ' + "[" * deep +
                '"model_00000.weights.h5"' + "]" * deep + "}}")
    # A run whose second save's config is that deep: the entry shows ERROR, the run lives.
    rd = Dir("run_deep")
    WriteKerasZip(os.path.join(rd, "model_1.keras"), scratch, SequentialSaveables(rng, sizes),
                  config, metadata)
    WriteKerasZip(os.path.join(rd, "model_2.keras"), scratch, SequentialSaveables(rng, sizes),
                  deep_json, metadata)
    too_deep = "JSON nested deeper than 100 levels"
    hostile = {"hostile/big_endian.weights.h5": ["big_endian.weights.h5", "layers/dense/vars/0"],
               "hostile/deep_config.keras": ["deep_config.keras:config.json", too_deep],
               "hostile/deep_metadata.keras": ["deep_metadata.keras:metadata.json", too_deep],
               "hostile/sharded_deep/model.weights.json": ["model.weights.json", too_deep],
               "hostile/soft_link.weights.h5": ["soft_link.weights.h5", "layers/dense/vars/1"],
               "hostile/external_link.weights.h5": ["external_link.weights.h5",
                                                    "layers/dense/vars/1"],
               "hostile/npz.keras": ["npz.keras", "model.weights"],
               "hostile/sharded_outside/model.weights.json": ["model.weights.json",
                                                              "../model_00001.weights.h5"],
               "hostile/sharded_twice/model.weights.json": ["sharded_twice",
                                                            "layers/dense/vars/0"],
               "hostile/deflated.keras": ["deflated.keras", "model.weights.h5"],
               "hostile/no_weights.keras": ["no_weights.keras", "model.weights.h5"],
               "hostile/truncated.weights.h5": ["truncated.weights.h5"],
               "hostile/chunked_gzip.weights.h5": ["chunked_gzip.weights.h5",
                                                   "layers/dense/vars/0"]}

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"checkpoints": checkpoints, "runs": runs, "hostile": hostile}, f, indent=1)


def Big(size_text, out):
    """The bench's checkpoint: model weights of about `size_text` bytes, laid out as
    H5IOStore writes them; no optimizer, so model.safetensors holds every byte of the file's
    data and its read compares with `cat` of the file byte for byte."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    size = int(size_text[:-1]) * units[size_text[-1]] if size_text[-1] in units else int(size_text)
    side = 4096  # a 4096x4096 float32 kernel: 64 MiB
    layers = max(1, size // (side * side * 4))
    rng = np.random.default_rng(7)
    sizes = [(side, side)] * layers
    names = [f"dense_{i}" if i else "dense" for i in range(layers)]
    saveables = [("", "sequential", [])]
    for n in names:
        # Random bytes, not values: the bench measures bytes moved, and this is fast.
        kernel = np.frombuffer(rng.bytes(side * side * 4), dtype=np.float32).reshape(side, side)
        saveables.append((f"layers/{n}", n, [kernel, np.zeros(side, np.float32)]))
    os.makedirs(out, exist_ok=True)
    expected = Expected("big", "big.weights.h5", "keras3")
    WriteWeightsH5(os.path.join(out, "big.weights.h5"), expected, saveables)
    WriteKerasZip(os.path.join(out, "big.keras"), expected, saveables,
                  SequentialConfig(sizes), KerasMetadata())


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--big":
        Big(sys.argv[2], sys.argv[3])
        sys.exit(0)
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    Main(sys.argv[1])
