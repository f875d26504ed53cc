#include "core/format/dcp/metadata.h"

#include <algorithm>
#include <map>

#include "core/checked.h"
#include "core/encoding/metadata_budget.h"
#include "core/encoding/pickle.h"
#include "core/encoding/shape.h"

namespace ckptfs::dcp {
namespace {

constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata.";
constexpr std::string_view kStorageInfoClass =
    "torch.distributed.checkpoint.filesystem._StorageInfo";

// Every global a .metadata of PyTorch 2.x names, besides the dtypes above.
constexpr std::string_view kAllowedGlobals[] = {
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    kStorageInfoClass,
    "torch.Size",
    "torch.serialization._get_layout",
    "pathlib.PosixPath",
    "pathlib.PurePosixPath",
    "collections.OrderedDict",
    // Python 3.11.0-3.11.6 pickle memory_format (an enum member) as
    // getattr(_MEM_FORMAT_ENCODING, 'NAME'): the unpickler lets getattr reach that enum only.
    "builtins.getattr",
};

// Tensors of more dimensions than this are refused: torch itself caps most kernels at 25,
// and the bound keeps a hostile torch.Size shared through the memo from multiplying.
constexpr size_t kMaxRank = 64;
// A dataclass has a handful of fields; more means a hostile state dict that every field
// lookup would scan.
constexpr size_t kMaxFields = 32;
// relative_path is one file name (NAME_MAX).
constexpr size_t kMaxFileName = 255;

bool AllowedGlobal(std::string_view name) {
  return TorchDtypeGlobal(name) || std::find(std::begin(kAllowedGlobals), std::end(kAllowedGlobals),
                                             name) != std::end(kAllowedGlobals);
}

class Reader {
 public:
  Reader(const PickleTree& tree, const std::string& file_name, uint64_t stored)
      : tree_(tree), file_(file_name), budget_(file_name, stored) {}

  Result<Metadata> Run() {
    CKPTFS_RETURN_IF_ERROR(CheckGlobals());
    CKPTFS_ASSIGN_OR_RETURN(const PickleValue* root, Object(tree_.root, "Metadata", "the root"));
    CKPTFS_ASSIGN_OR_RETURN(const PickleValue* items,
                            DictField(root, "state_dict_metadata", "Metadata", true));
    for (size_t i = 0; i + 1 < items->items.size(); i += 2) {
      CKPTFS_RETURN_IF_ERROR(Item(items->items[i], items->items[i + 1]));
    }
    CKPTFS_ASSIGN_OR_RETURN(const PickleValue* storage,
                            DictField(root, "storage_data", "Metadata", false));
    if (storage) {
      for (size_t i = 0; i + 1 < storage->items.size(); i += 2) {
        CKPTFS_RETURN_IF_ERROR(Storage(storage->items[i], storage->items[i + 1]));
      }
    }
    CKPTFS_RETURN_IF_ERROR(EveryItemStored());
    CKPTFS_ASSIGN_OR_RETURN(const PickleValue* paths,
                            DictField(root, "planner_data", "Metadata", false));
    if (paths) {
      for (size_t i = 0; i + 1 < paths->items.size(); i += 2) {
        CKPTFS_RETURN_IF_ERROR(Path(paths->items[i], paths->items[i + 1]));
      }
    }
    const uint32_t version = Field(root, "version");
    if (version != kAbsent && At(version).kind != PickleKind::kNone) {
      if (At(version).kind != PickleKind::kString) return Bad("Metadata.version is not a str");
      CKPTFS_RETURN_IF_ERROR(Charge(HeapBytes(At(version).text)));
      out_.version = At(version).text;
    }
    return std::move(out_);
  }

 private:
  static constexpr uint32_t kAbsent = PickleValue::kNoState;

  const PickleValue& At(uint32_t i) const { return tree_.at(i); }

  Status Bad(const std::string& what) const { return Status::Corruption(file_ + ": " + what); }

  Status Charge(uint64_t bytes) { return budget_.ChargeOrRefuse(bytes); }

  // The exact list of globals (metadata.h), before anything is interpreted: a global the
  // writer never names means the file is not what it claims, whatever uses it.
  Status CheckGlobals() const {
    for (const PickleValue& v : tree_.values) {
      if (v.kind != PickleKind::kGlobal || AllowedGlobal(v.text)) continue;
      const std::string_view name = v.text;
      if (name.starts_with("torch.") && name.find('.', 6) == std::string_view::npos) {
        return Status::Unsupported(file_ + ": global " + v.text +
                                   " is not allowed (not a dtype ckptfs has)");
      }
      return Status::Unsupported(file_ + ": global " + v.text +
                                 " is not allowed in a DCP .metadata");
    }
    return Status::Ok();
  }

  bool IsCallOf(const PickleValue& v, std::string_view callable) const {
    return v.kind == PickleKind::kCall && !v.items.empty() &&
           At(v.items[0]).kind == PickleKind::kGlobal && At(v.items[0]).text == callable;
  }

  // An instance of DCP's dataclass `cls` (NEWOBJ(cls, ()) + BUILD(state)); its state (a
  // dict, or the dict of a (dict, slots) pair; a tuple for TensorProperties), or nullptr
  // when it has none (a dataclass without fields: BytesStorageMetadata).
  Result<const PickleValue*> Object(uint32_t v, std::string_view cls, const std::string& what,
                                    std::string_view module = kMetadataModule) const {
    const PickleValue& p = At(v);
    const std::string name = std::string(module) + std::string(cls);
    if (!IsCallOf(p, name)) {
      return Bad(what + " is not a " + std::string(cls));
    }
    if (p.state == PickleValue::kNoState) return nullptr;
    const PickleValue* state = &At(p.state);
    if (state->kind == PickleKind::kTuple && state->items.size() == 2 &&
        At(state->items[0]).kind == PickleKind::kDict) {
      state = &At(state->items[0]);
    }
    if (state->kind == PickleKind::kDict && state->items.size() / 2 > kMaxFields) {
      return Bad(what + " (" + std::string(cls) + ") has more than " + std::to_string(kMaxFields) +
                 " fields");
    }
    return state;
  }

  // The value of field `name` in a dataclass state dict, or kAbsent.
  uint32_t Field(const PickleValue* state, std::string_view name) const {
    if (!state || state->kind != PickleKind::kDict) return kAbsent;
    for (size_t i = 0; i + 1 < state->items.size(); i += 2) {
      const PickleValue& key = At(state->items[i]);
      if (key.kind == PickleKind::kString && key.text == name) return state->items[i + 1];
    }
    return kAbsent;
  }

  Result<uint32_t> Required(const PickleValue* state, std::string_view name,
                            const std::string& what) const {
    const uint32_t v = Field(state, name);
    if (v == kAbsent) return Bad(what + " has no " + std::string(name));
    return v;
  }

  // A dict field; nullptr where an optional one is absent or None.
  Result<const PickleValue*> DictField(const PickleValue* state, std::string_view name,
                                       const std::string& what, bool required) const {
    const uint32_t v = Field(state, name);
    if (v == kAbsent || At(v).kind == PickleKind::kNone) {
      if (required) return Bad(what + " has no " + std::string(name));
      return nullptr;
    }
    if (At(v).kind != PickleKind::kDict)
      return Bad(what + "." + std::string(name) + " is not a dict");
    return &At(v);
  }

  Result<uint64_t> Count(uint32_t v, const std::string& what) const {
    const PickleValue& p = At(v);
    if (p.kind != PickleKind::kInt) return Bad(what + " is not an int");
    if (p.int_value < 0) return Bad(what + " is negative (" + std::to_string(p.int_value) + ")");
    return static_cast<uint64_t>(p.int_value);
  }

  Result<std::string> Str(uint32_t v, const std::string& what) {
    if (At(v).kind != PickleKind::kString) return Bad(what + " is not a str");
    CKPTFS_RETURN_IF_ERROR(Charge(HeapBytes(At(v).text)));
    return At(v).text;
  }

  // torch.Size((d0, d1, ...)): REDUCE(torch.Size, (tuple,)).
  Result<std::vector<uint64_t>> Size(uint32_t v, const std::string& what) {
    const PickleValue& p = At(v);
    const PickleValue* args =
        IsCallOf(p, "torch.Size") && p.items.size() == 2 ? &At(p.items[1]) : nullptr;
    if (!args || args->kind != PickleKind::kTuple || args->items.size() != 1 ||
        (At(args->items[0]).kind != PickleKind::kTuple &&
         At(args->items[0]).kind != PickleKind::kList)) {
      return Bad(what + " is not a torch.Size");
    }
    const std::vector<uint32_t>& dims = At(args->items[0]).items;
    if (dims.size() > kMaxRank) {
      return Bad(what + " has " + std::to_string(dims.size()) + " dimensions (at most " +
                 std::to_string(kMaxRank) + ")");
    }
    CKPTFS_RETURN_IF_ERROR(Charge(dims.size() * sizeof(uint64_t)));
    std::vector<uint64_t> out;
    out.reserve(dims.size());
    for (uint32_t d : dims) {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t n, Count(d, what));
      out.push_back(n);
    }
    return out;
  }

  // One entry of state_dict_metadata.
  Status Item(uint32_t key, uint32_t value) {
    if (At(key).kind != PickleKind::kString)
      return Bad("state_dict_metadata has a key that is not a str");
    const std::string& fqn = At(key).text;
    const std::string what = "item \"" + fqn + "\"";
    if (IsCallOf(At(value), std::string(kMetadataModule) + "BytesStorageMetadata")) {
      CKPTFS_RETURN_IF_ERROR(Charge(2 * sizeof(BytesItem) + 2 * HeapBytes(fqn) + 64));
      if (tensor_index_.contains(fqn) || bytes_index_.contains(fqn)) {
        return Bad("state_dict_metadata names " + what + " twice");
      }
      bytes_index_.emplace(fqn, out_.bytes.size());
      out_.bytes.push_back(BytesItem{.fqn = fqn, .storage = {}});
      bytes_stored_.push_back(false);
      return Status::Ok();
    }
    CKPTFS_ASSIGN_OR_RETURN(const PickleValue* state, Object(value, "TensorStorageMetadata", what));
    TensorItem tensor;
    CKPTFS_RETURN_IF_ERROR(Charge(2 * sizeof(TensorItem) + 2 * HeapBytes(fqn) + 64));
    tensor.fqn = fqn;
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t properties, Required(state, "properties", what));
    CKPTFS_ASSIGN_OR_RETURN(tensor.dtype, DtypeOf(properties, what));
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t size, Required(state, "size", what));
    CKPTFS_ASSIGN_OR_RETURN(tensor.size, Size(size, what + " size"));
    if (!CheckedProduct(tensor.size, DtypeSize(tensor.dtype))) {
      return Bad(what + " size " + ShapeText(tensor.size) + " overflows 64 bits of bytes");
    }
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t chunks, Required(state, "chunks", what));
    if (At(chunks).kind != PickleKind::kList && At(chunks).kind != PickleKind::kTuple) {
      return Bad(what + " chunks is not a list");
    }
    std::map<std::vector<uint64_t>, size_t> by_offsets;
    for (uint32_t c : At(chunks).items) {
      const std::string chunk_what = what + " chunk " + std::to_string(tensor.chunks.size());
      CKPTFS_ASSIGN_OR_RETURN(const PickleValue* box,
                              Object(c, "ChunkStorageMetadata", chunk_what));
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t offsets, Required(box, "offsets", chunk_what));
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t sizes, Required(box, "sizes", chunk_what));
      Chunk chunk;
      CKPTFS_ASSIGN_OR_RETURN(chunk.offsets, Size(offsets, chunk_what + " offsets"));
      CKPTFS_ASSIGN_OR_RETURN(chunk.sizes, Size(sizes, chunk_what + " sizes"));
      if (chunk.offsets.size() != tensor.size.size() || chunk.sizes.size() != tensor.size.size()) {
        return Bad(chunk_what + " has rank " + std::to_string(chunk.offsets.size()) + "/" +
                   std::to_string(chunk.sizes.size()) + ", the tensor " +
                   std::to_string(tensor.size.size()));
      }
      for (size_t d = 0; d < tensor.size.size(); ++d) {
        const std::optional<uint64_t> end = CheckedAdd(chunk.offsets[d], chunk.sizes[d]);
        if (!end || *end > tensor.size[d]) {
          return Bad(chunk_what + " (offsets " + ShapeText(chunk.offsets) + ", sizes " +
                     ShapeText(chunk.sizes) + ") lies past the tensor's size " +
                     ShapeText(tensor.size));
        }
      }
      // The chunk and its storage key (by_offsets); charged before either grows.
      CKPTFS_RETURN_IF_ERROR(Charge(2 * sizeof(Chunk) + 96 + 8 * chunk.offsets.size()));
      if (!by_offsets.emplace(chunk.offsets, tensor.chunks.size()).second) {
        return Bad(what + " has two chunks at offsets " + ShapeText(chunk.offsets));
      }
      tensor.chunks.push_back(std::move(chunk));
    }
    if (tensor_index_.contains(fqn) || bytes_index_.contains(fqn)) {
      return Bad("state_dict_metadata names " + what + " twice");
    }
    tensor_index_.emplace(fqn, out_.tensors.size());
    chunk_index_.push_back(std::move(by_offsets));
    chunk_stored_.emplace_back(tensor.chunks.size(), false);
    out_.tensors.push_back(std::move(tensor));
    return Status::Ok();
  }

  // TensorProperties: its __getstate__ tuple (dtype, layout, requires_grad, memory_format,
  // pin_memory), or the plain dataclass dict older writers left. Only the dtype matters.
  Result<Dtype> DtypeOf(uint32_t properties, const std::string& what) const {
    CKPTFS_ASSIGN_OR_RETURN(const PickleValue* state,
                            Object(properties, "TensorProperties", what + " properties"));
    uint32_t dtype = kAbsent;
    if (state && state->kind == PickleKind::kTuple && !state->items.empty()) {
      dtype = state->items[0];
    } else {
      dtype = Field(state, "dtype");
    }
    if (dtype == kAbsent) return Bad(what + " has no dtype");
    if (At(dtype).kind != PickleKind::kGlobal) return Bad(what + " dtype is not a torch dtype");
    const std::optional<Dtype> out = TorchDtypeGlobal(At(dtype).text);
    if (!out) {
      return Status::Unsupported(file_ + ": " + what + " has dtype " + At(dtype).text +
                                 ", which ckptfs does not have");
    }
    return *out;
  }

  // One storage_data entry: MetadataIndex(fqn, offset, index) -> _StorageInfo.
  Status Storage(uint32_t key, uint32_t value) {
    CKPTFS_ASSIGN_OR_RETURN(const PickleValue* index,
                            Object(key, "MetadataIndex", "a storage_data key"));
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t fqn_value, Required(index, "fqn", "a storage_data key"));
    if (At(fqn_value).kind != PickleKind::kString)
      return Bad("a storage_data key's fqn is not a str");
    const std::string& fqn = At(fqn_value).text;
    const std::string what = "storage_data entry for \"" + fqn + "\"";
    CKPTFS_ASSIGN_OR_RETURN(StorageInfo info, Info(value, what));
    // MetadataIndex.__init__ leaves `offset` unset for a bytes item: absent is None.
    const uint32_t offset = Field(index, "offset");
    const bool has_offset = offset != kAbsent && At(offset).kind != PickleKind::kNone;
    if (auto t = tensor_index_.find(fqn); t != tensor_index_.end()) {
      if (!has_offset) return Bad(what + " has no chunk offset");
      CKPTFS_ASSIGN_OR_RETURN(const std::vector<uint64_t> at, Size(offset, what + " offset"));
      const auto c = chunk_index_[t->second].find(at);
      if (c == chunk_index_[t->second].end()) {
        return Bad(what + " names no chunk of it (offsets " + ShapeText(at) + ")");
      }
      if (chunk_stored_[t->second][c->second]) {
        return Bad(what + " at offsets " + ShapeText(at) + " is given twice");
      }
      chunk_stored_[t->second][c->second] = true;
      out_.tensors[t->second].chunks[c->second].storage = std::move(info);
      return Status::Ok();
    }
    if (auto b = bytes_index_.find(fqn); b != bytes_index_.end()) {
      if (has_offset) return Bad(what + " has a chunk offset, but the item is not a tensor");
      if (bytes_stored_[b->second]) return Bad(what + " is given twice");
      bytes_stored_[b->second] = true;
      out_.bytes[b->second].storage = std::move(info);
      return Status::Ok();
    }
    return Bad(what + " names no item of state_dict_metadata");
  }

  Result<StorageInfo> Info(uint32_t value, const std::string& what) {
    CKPTFS_ASSIGN_OR_RETURN(
        const PickleValue* state,
        Object(value, "_StorageInfo", what, "torch.distributed.checkpoint.filesystem."));
    StorageInfo info;
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t path, Required(state, "relative_path", what));
    CKPTFS_ASSIGN_OR_RETURN(info.relative_path, Str(path, what + " relative_path"));
    const std::string& name = info.relative_path;
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos || name.size() > kMaxFileName) {
      return Bad(what + " relative_path \"" + name.substr(0, kMaxFileName) +
                 "\" is not a plain file name");
    }
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t offset, Required(state, "offset", what));
    CKPTFS_ASSIGN_OR_RETURN(info.offset, Count(offset, what + " offset"));
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t length, Required(state, "length", what));
    CKPTFS_ASSIGN_OR_RETURN(info.length, Count(length, what + " length"));
    if (!CheckedAdd(info.offset, info.length)) return Bad(what + " range overflows 64 bits");
    // _StorageInfo.__getstate__ drops None fields: absent and None are alike.
    const uint32_t transforms = Field(state, "transform_descriptors");
    if (transforms != kAbsent && At(transforms).kind != PickleKind::kNone) {
      const PickleValue& list = At(transforms);
      if (list.kind != PickleKind::kList && list.kind != PickleKind::kTuple) {
        return Bad(what + " transform_descriptors is not a list");
      }
      CKPTFS_RETURN_IF_ERROR(Charge(list.items.size() * sizeof(std::string)));
      for (uint32_t t : list.items) {
        CKPTFS_ASSIGN_OR_RETURN(std::string descriptor, Str(t, what + " transform descriptor"));
        info.transforms.push_back(std::move(descriptor));
      }
    }
    return info;
  }

  Status EveryItemStored() const {
    for (size_t t = 0; t < out_.tensors.size(); ++t) {
      for (size_t c = 0; c < out_.tensors[t].chunks.size(); ++c) {
        if (!chunk_stored_[t][c]) {
          return Bad("tensor \"" + out_.tensors[t].fqn + "\" chunk at offsets " +
                     ShapeText(out_.tensors[t].chunks[c].offsets) + " has no storage_data entry");
        }
      }
    }
    for (size_t b = 0; b < out_.bytes.size(); ++b) {
      if (!bytes_stored_[b]) {
        return Bad("item \"" + out_.bytes[b].fqn + "\" has no storage_data entry");
      }
    }
    return Status::Ok();
  }

  // One planner_data entry: fqn -> the tuple of keys DefaultSavePlanner flattened.
  Status Path(uint32_t key, uint32_t value) {
    if (At(key).kind != PickleKind::kString) return Bad("planner_data has a key that is not a str");
    const std::string what = "planner_data of \"" + At(key).text + "\"";
    const PickleValue& keys = At(value);
    if (keys.kind != PickleKind::kTuple && keys.kind != PickleKind::kList) {
      return Bad(what + " is not a tuple");
    }
    CKPTFS_RETURN_IF_ERROR(Charge(2 * sizeof(out_.paths[0]) + HeapBytes(At(key).text) +
                                  keys.items.size() * sizeof(PathKey)));
    std::vector<PathKey> path;
    path.reserve(keys.items.size());
    for (uint32_t k : keys.items) {
      const PickleValue& p = At(k);
      if (p.kind == PickleKind::kString) {
        CKPTFS_RETURN_IF_ERROR(Charge(HeapBytes(p.text)));
        path.push_back(PathKey{.key = p.text, .index = false});
      } else if (p.kind == PickleKind::kInt) {
        path.push_back(PathKey{.key = std::to_string(p.int_value), .index = true});
      } else {
        return Bad(what + " holds a key that is neither a str nor an int");
      }
    }
    out_.paths.emplace_back(At(key).text, std::move(path));
    return Status::Ok();
  }

  const PickleTree& tree_;
  const std::string& file_;
  MetadataBudget budget_;
  Metadata out_;
  // Ordered maps, not hashes: crafted names cannot make lookups quadratic.
  std::map<std::string, size_t> tensor_index_;
  std::map<std::string, size_t> bytes_index_;
  std::vector<std::map<std::vector<uint64_t>, size_t>> chunk_index_;  // by tensor
  std::vector<std::vector<bool>> chunk_stored_;                       // by tensor, chunk
  std::vector<bool> bytes_stored_;
};

}  // namespace

Result<Metadata> ParseMetadata(std::string_view data, const std::string& file_name) {
  // The file is the pickle itself: no record name in messages.
  CKPTFS_ASSIGN_OR_RETURN(const PickleTree tree,
                          Unpickle(data, file_name, PickleGlobals::kTorch, ""));
  return Reader(tree, file_name, data.size()).Run();
}

}  // namespace ckptfs::dcp
