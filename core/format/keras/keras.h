// keras: what a Keras checkpoint's HDF5 tree means (h5::File, core/format/keras/h5/h5_file.h),
// by Keras's own rules, as tensors with names, without reading a byte of their data.
//
// Two layouts, told apart by the tree:
//   - Keras 3 (saving_lib.py, H5IOStore): groups follow the object graph,
//     `layers/<group>/vars/<i>` (nested layers nest further: `layers/lstm/cell/vars/0`),
//     the model's own `vars/<i>`, the optimizer's `optimizer/vars/<i>` (0 = iterations,
//     1 = learning rate, then the slots). Since Keras 3.6 each `vars` group has a `name`
//     attribute, the layer's name (_save_state: `metadata = {"name": saveable.name}`). A
//     bfloat16 variable is an opaque 2-byte dataset with attribute dtype="bfloat16"
//     (H5IOStore.__setitem__).
//   - Legacy tf.keras (legacy_h5_format.py, save_weights_to_hdf5_group): a full model has
//     `model_weights/<layer>/...` and `optimizer_weights/...`, a weights-only file has the
//     layer groups at the root; the layer list is the attribute `layer_names` of that
//     group and each layer's weights are its attribute `weight_names`, each an array of
//     strings, split into `NAME0`, `NAME1`, ... when long
//     (save_attributes_to_hdf5_group, HDF5_OBJECT_HEADER_LIMIT). A weight's dataset is
//     `<layer group>/<weight name>`.
//
// Every dataset is a tensor (the optimizer's too); its key is its HDF5 path, which
// tensors/ mirrors. The model, what the merged views hold, is every dataset but the
// optimizer's (`optimizer/...`, `optimizer_weights/...`), named (docs/formats.md, Keras):
//   - Keras 3: `<name>/<i>` for dataset `<P>/vars/<i>`, where <name> is the `name`
//     attribute of `<P>/vars`; the HDF5 path itself where the group has none (Keras 3.5)
//     or where two of the model's `vars` groups share it (nested models may reuse a
//     layer name), and for any dataset not under a `vars` group.
//   - Legacy: the weight's entry in its layer's `weight_names` (`dense_1/kernel:0`);
//     `<layer>/<weight name>` where two layers list the same weight name; the HDF5 path
//     for a dataset no `weight_names` lists.
// A name two tensors would share after that is Corruption naming both paths.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/dtype.h"
#include "core/encoding/metadata_budget.h"
#include "core/format/keras/h5/h5_file.h"
#include "core/status.h"

namespace ckptfs::keras {

enum class Layout : uint8_t { kKeras3, kLegacy };

struct KerasTensor {
  std::string key;   // the HDF5 path: "layers/dense/vars/0"
  std::string name;  // the model name (above), or the key for the optimizer's
  bool in_model = true;
  Dtype dtype = Dtype::kF32;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // in the HDF5 file (h5::Dataset::offset)
  uint64_t size = 0;
  uint32_t part = 0;  // which of the files given to Interpret holds it
};

struct KerasModel {
  Layout layout = Layout::kKeras3;
  std::vector<KerasTensor> tensors;  // part by part, each in HDF5's order
  // What .ckptfs/metadata.json shows of the tree: the root's attributes that are Keras's
  // (keras_version, backend; model_config and training_config parsed from their JSON
  // text), Keras 3's `name` of each group that has one ({"layers/dense/vars": "dense"}),
  // legacy `layer_names`.
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
};

// The tensors and metadata of one Keras checkpoint stored as `parts` (one HDF5 file, or
// the shards of a sharded .weights.h5 whose groups are merged: a group may span shards,
// a dataset may not lie in two); `shown[i]` names part i in messages. Refused (one line
// naming the file and the dataset): a dataset h5::Dataset::problem says is no extent
// (chunked, compressed, not allocated...: ckptfs serves Keras's contiguous datasets as
// they lie, and decodes none), a type ckptfs has no dtype for, an opaque dataset not
// marked bfloat16, a dataset in two parts, two tensors of one name.
Result<KerasModel> Interpret(const std::vector<h5::File>& parts,
                             const std::vector<std::string>& shown);

// JSON text (config.json, model_config) as a value for metadata.json: parsed, or kept as
// a string when it is not JSON, so metadata.json shows what the file holds either way.
// Text nested deeper than kMaxJsonDepth, or whose tree would pass `budget`, is refused
// (ParseJson, core/encoding/ordered_json.h), naming `shown`.
Result<nlohmann::ordered_json> ParseJsonText(std::string_view text, const std::string& shown,
                                             MetadataBudget* budget = nullptr);

// The dtype of `d` (BF16 for Keras's marked opaque pairs), or why none ("type: string").
Result<Dtype> DatasetDtype(const h5::Dataset& d);

// A legacy string-list attribute `name` of `attributes`, joined from its split parts
// (`name`, else `name0`, `name1`, ... as load_attributes_from_hdf5_group reads them);
// nullopt if absent; Corruption (naming `shown`) if not strings.
Result<std::optional<std::vector<std::string>>> StringListAttribute(
    const std::vector<h5::Attribute>& attributes, std::string_view name, const std::string& shown);

// The shard files a sharded Keras 3 weights map (`NAME.weights.json`, ShardedH5IOStore:
// {"metadata": {"total_size": N}, "weight_map": {"/layers/dense/vars": FILE or [FILE...]}})
// names, each once, in first-named order; each must be a plain file name. Corruption
// naming `shown` for anything else.
Result<std::vector<std::string>> ShardFiles(std::string_view json_text, const std::string& shown);

// The epoch or step a ModelCheckpoint file name carries, as Keras's `{epoch:02d}` and
// `{batch}` fill it: the name's one integer once metric values (`0.42`, `1e-3`) and the
// Keras suffix are set aside (`weights.10-0.38.weights.h5` -> 10, `model_3.keras` -> 3);
// nullopt when there is no such one integer.
std::optional<uint64_t> EpochInName(std::string_view name);

// HDF5's superblock (version 0 or 1: h5py's default, libver="earliest") records the end
// of file address, which the library writes on close: a file whose size differs is still
// being written (ModelCheckpoint writes in place, no rename) or cut. `head` is the file's
// first bytes (at least 64); returns why it is not whole, "" if it is or the superblock is
// of a version without that promise.
std::string SuperblockProblem(std::span<const uint8_t> head, uint64_t file_size);

}  // namespace ckptfs::keras
