#include "core/encoding/torch_file.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/checked.h"
#include "core/encoding/metadata_budget.h"
#include "core/encoding/ordered_json.h"
#include "core/encoding/pickle.h"
#include "core/encoding/pickle_key.h"
#include "core/encoding/shape.h"
#include "core/encoding/zip.h"

namespace ckptfs {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxNesting = 64;
constexpr std::string_view kPickleRecord = "data.pkl";

struct StorageClass {
  std::string_view name;
  Dtype dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"DoubleStorage", Dtype::kF64},       {"FloatStorage", Dtype::kF32},
    {"HalfStorage", Dtype::kF16},         {"BFloat16Storage", Dtype::kBF16},
    {"LongStorage", Dtype::kI64},         {"IntStorage", Dtype::kI32},
    {"ShortStorage", Dtype::kI16},        {"CharStorage", Dtype::kI8},
    {"ByteStorage", Dtype::kU8},          {"BoolStorage", Dtype::kBool},
    {"ComplexFloatStorage", Dtype::kC64}, {"ComplexDoubleStorage", Dtype::kC128},
};

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The legacy formats have no zip signature; name them so the user knows what to do.
Status CheckZipMagic(const ByteSource& source, PickleGlobals globals) {
  uint8_t head[512] = {};
  const uint64_t n = std::min<uint64_t>(sizeof(head), source.Size());
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(0, {head, n}));
  if (n >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return Status::Ok();
  if (globals == PickleGlobals::kDeepSpeed) {
    return Status::Unsupported(source.Name() +
                               ": a legacy (non-zip) torch file; DeepSpeed writes these with "
                               "checkpoint_serialization: false");
  }
  const std::string resave = "; load and re-save it with torch.save from PyTorch >= 1.6";
  if (n >= 262 && std::memcmp(head + 257, "ustar", 5) == 0) {
    return Status::Unsupported(source.Name() +
                               ": legacy tar checkpoint (torch.save before PyTorch 1.6)" + resave);
  }
  if (n >= 2 && head[0] == 0x80 && head[1] <= 5) {
    return Status::Unsupported(source.Name() +
                               ": legacy pickle checkpoint (_use_new_zipfile_serialization=False)" +
                               resave);
  }
  return Status::Corruption(source.Name() + ": neither a torch.save zip nor a safetensors file");
}

// Turns the unpickled tree into tensors and JSON state.
class Interpreter {
 public:
  Interpreter(const ByteSource& source, const PickleTree& tree,
              const std::vector<ZipEntry>& entries, std::string prefix, uint64_t pickle_offset,
              uint64_t pickle_size, PickleGlobals globals)
      : source_(source),
        tree_(tree),
        prefix_(std::move(prefix)),
        pickle_offset_(pickle_offset),
        globals_(globals),
        budget_(source.Name() + ": data.pkl", pickle_size) {
    for (const ZipEntry& e : entries) records_.emplace(e.name, &e);
  }

  Result<TorchFile> Run() {
    bool has_state = false;
    json state;
    CKPTFS_RETURN_IF_ERROR(Visit(tree_.root, "", 0, &state, &has_state));
    if (has_state) out_.state_json = state.dump(-1, ' ', false, json::error_handler_t::replace);
    out_.weights_only = WeightsOnlyVerdictOf(tree_.names);
    return std::move(out_);
  }

 private:
  const PickleValue& At(uint32_t i) const { return tree_.at(i); }

  Status Bad(const std::string& what) const {
    return Status::Corruption(source_.Name() + ": " + what);
  }

  bool IsGlobal(uint32_t v, std::string_view name) const {
    return At(v).kind == PickleKind::kGlobal && At(v).text == name;
  }

  // The args tuple of call `v`, or nullptr.
  const PickleValue* Args(const PickleValue& v) const {
    if (v.items.size() != 2 || At(v.items[1]).kind != PickleKind::kTuple) return nullptr;
    return &At(v.items[1]);
  }

  Result<uint64_t> NonNegative(uint32_t v, const std::string& what) const {
    const PickleValue& p = At(v);
    if (p.kind != PickleKind::kInt || p.int_value < 0) return Bad(what + " is not a size");
    return static_cast<uint64_t>(p.int_value);
  }

  Result<std::vector<uint64_t>> Sizes(uint32_t v, const std::string& what) const {
    const PickleValue* p = &At(v);
    if (p->kind == PickleKind::kCall && IsGlobal(p->items[0], "torch.Size") && Args(*p) &&
        Args(*p)->items.size() == 1) {
      p = &At(Args(*p)->items[0]);  // torch.Size((2, 3))
    }
    if (p->kind != PickleKind::kTuple && p->kind != PickleKind::kList) {
      return Bad(what + " is not a tuple");
    }
    std::vector<uint64_t> out;
    for (uint32_t item : p->items) {
      CKPTFS_ASSIGN_OR_RETURN(uint64_t n, NonNegative(item, what));
      out.push_back(n);
    }
    return out;
  }

  // Registers the storage a persistent id names, checking it against its record.
  Result<uint32_t> Storage(uint32_t v, const std::string& tensor) {
    const PickleValue& pid = At(v);
    const PickleValue* t =
        pid.kind == PickleKind::kPersistent && pid.items.size() == 1 ? &At(pid.items[0]) : nullptr;
    if (!t || t->kind != PickleKind::kTuple || t->items.size() != 5 ||
        At(t->items[0]).text != "storage" || At(t->items[1]).kind != PickleKind::kGlobal ||
        At(t->items[2]).kind != PickleKind::kString) {
      return Bad("tensor \"" + tensor + "\": storage reference is malformed");
    }
    const std::string& cls = At(t->items[1]).text;
    const std::string& key = At(t->items[2]).text;
    std::string_view short_cls = std::string_view(cls).substr(cls.rfind('.') + 1);
    auto known = std::find_if(std::begin(kStorageClasses), std::end(kStorageClasses),
                              [&](const StorageClass& c) { return c.name == short_cls; });
    if (known == std::end(kStorageClasses)) {
      return Status::Unsupported(source_.Name() + ": tensor \"" + tensor + "\": storage type " +
                                 cls + " is not supported");
    }
    CKPTFS_ASSIGN_OR_RETURN(uint64_t numel, NonNegative(t->items[4], "storage size"));
    auto seen = keys_.find(key);
    if (seen != keys_.end()) {
      const TorchStorage& s = out_.storages[seen->second];
      if (s.dtype != known->dtype || s.size / DtypeSize(s.dtype) != numel) {
        return Status::Unsupported(source_.Name() + ": storage " + key +
                                   " is used with two types or sizes");
      }
      return seen->second;
    }
    auto record = records_.find(prefix_ + "data/" + key);
    if (record == records_.end()) {
      return Bad("tensor \"" + tensor + "\": storage record " + prefix_ + "data/" + key +
                 " is missing from the zip");
    }
    const ZipEntry& e = *record->second;
    if (e.method != 0) {
      return Status::Unsupported(source_.Name() + ": record " + e.name +
                                 " is compressed; torch.save stores records uncompressed");
    }
    const uint64_t element = DtypeSize(known->dtype);
    const std::optional<uint64_t> bytes = CheckedMul(numel, element);
    if (!bytes || *bytes != e.size) {
      return Bad("record " + e.name + " holds " + std::to_string(e.size) + " bytes but its " + cls +
                 " claims " + std::to_string(numel) + " elements");
    }
    out_.storages.push_back(TorchStorage{key, known->dtype, e.data_offset, e.size, e.crc32});
    keys_.emplace(key, out_.storages.size() - 1);
    return static_cast<uint32_t>(out_.storages.size() - 1);
  }

  // _rebuild_tensor(_v2)(storage, storage_offset, size, stride, ...).
  Status AddTensor(const PickleValue& args, const std::string& name) {
    if (args.items.size() < 4) return Bad("tensor \"" + name + "\": too few rebuild arguments");
    // A NUL would cut the name short in every path and listing, so two tensors could meet.
    if (name.find('\0') != std::string::npos) return Bad("a tensor name contains a NUL byte");
    TorchTensor t;
    t.name = name;
    if (name.size() > top_key_size_) {  // inside a root value's container, not that value
      t.top_key_size = top_key_size_;
      t.top_is_dict = top_is_dict_;
    }
    CKPTFS_ASSIGN_OR_RETURN(t.storage, Storage(args.items[0], name));
    CKPTFS_ASSIGN_OR_RETURN(t.storage_offset, NonNegative(args.items[1], "storage offset"));
    CKPTFS_ASSIGN_OR_RETURN(t.shape, Sizes(args.items[2], "tensor \"" + name + "\" shape"));
    CKPTFS_ASSIGN_OR_RETURN(t.stride, Sizes(args.items[3], "tensor \"" + name + "\" stride"));
    if (t.stride.size() != t.shape.size()) {
      return Bad("tensor \"" + name + "\": shape and stride differ in length");
    }
    // The last element the view touches must lie inside the storage.
    const TorchStorage& s = out_.storages[t.storage];
    const uint64_t storage_numel = s.size / DtypeSize(s.dtype);
    bool empty = false, overflow = false;
    uint64_t last = t.storage_offset;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (t.shape[i] == 0) empty = true;
      if (t.shape[i] > 0) {
        const std::optional<uint64_t> reach = CheckedMul(t.shape[i] - 1, t.stride[i]);
        const std::optional<uint64_t> next = reach ? CheckedAdd(last, *reach) : std::nullopt;
        overflow |= !next;
        last = next.value_or(last);
      }
    }
    if (!empty && (overflow || last >= storage_numel)) {
      return Bad("tensor \"" + name + "\": shape and strides reach past its storage of " +
                 std::to_string(storage_numel) + " elements");
    }
    out_.tensors.push_back(std::move(t));
    return Status::Ok();
  }

  // Adds the tensor `v` builds, if it is a tensor; *is_tensor says whether it was.
  Status MaybeTensor(uint32_t v, const std::string& name, int depth, bool* is_tensor) {
    *is_tensor = false;
    const PickleValue& call = At(v);
    if (call.kind != PickleKind::kCall || call.items.size() != 2) return Status::Ok();
    const PickleValue* args = Args(call);
    if (At(call.items[0]).kind != PickleKind::kGlobal || !args) return Status::Ok();
    const std::string& fn = At(call.items[0]).text;
    if (fn == "torch._utils._rebuild_tensor_v2" || fn == "torch._utils._rebuild_tensor") {
      *is_tensor = true;
      return AddTensor(*args, name);
    }
    if (depth > kMaxNesting) return Bad("tensor \"" + name + "\": nested too deeply");
    if ((fn == "torch._utils._rebuild_parameter" ||
         fn == "torch._utils._rebuild_parameter_with_state" ||
         fn == "torch.nn.parameter.Parameter") &&
        !args->items.empty()) {
      CKPTFS_RETURN_IF_ERROR(MaybeTensor(args->items[0], name, depth + 1, is_tensor));
      if (!*is_tensor) return Bad("parameter \"" + name + "\" does not hold a tensor");
      return Status::Ok();
    }
    if (fn == "torch._tensor._rebuild_from_type_v2" && args->items.size() == 4 &&
        IsGlobal(args->items[0], "torch._utils._rebuild_wrapper_subclass") &&
        At(args->items[1]).kind == PickleKind::kGlobal && IsDTensorClass(At(args->items[1]).text)) {
      *is_tensor = true;
      if (name.find('\0') != std::string::npos) return Bad("a tensor name contains a NUL byte");
      return AddDTensor(*args, name, depth);
    }
    if (fn == "torch._tensor._rebuild_from_type_v2" && args->items.size() >= 3 &&
        IsGlobal(args->items[0], "torch._utils._rebuild_tensor_v2") &&
        At(args->items[2]).kind == PickleKind::kTuple) {
      *is_tensor = true;
      return AddTensor(At(args->items[2]), name);
    }
    if (IsNumpyReconstruct(fn) && globals_ == PickleGlobals::kTorch) {
      return MaybeNumpyTensor(call, name, is_tensor);
    }
    if (StartsWith(fn, "torch._utils._rebuild_")) {
      return Status::Unsupported(source_.Name() + ": \"" + name + "\": " + fn +
                                 " (sparse, quantized or meta tensors) is not supported");
    }
    return Status::Ok();
  }

  // --- DTensors (torch.distributed.tensor), as FSDP2 trainers torch.save them per rank ---
  //
  // A DTensor pickles as _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor,
  // (DTensor, dtype, size, stride, storage_offset, layout, device, requires_grad), state)
  // with state {"_local_tensor": tensor, "_spec": DTensorSpec} (a (None, dict) pair where
  // the class has __slots__). Its classes have lived in two places: torch.distributed.tensor
  // (2.5+, DeviceMesh in torch.distributed.device_mesh, 2.9+ with a _MeshLayout) and
  // torch.distributed._tensor (2.2-2.4, a DeviceMesh holding its `mesh` tensor).

  static bool IsDTensorClass(std::string_view g) {
    return g == "torch.distributed.tensor.DTensor" ||
           g == "torch.distributed.tensor._api.DTensor" ||
           g == "torch.distributed._tensor.api.DTensor";
  }

  // The module-qualified names a DTensor's construction may name, and nothing else: its
  // classes, the local tensor's rebuild, torch.Size, dtypes, devices, layouts, storages.
  static bool IsDTensorGlobal(std::string_view g) {
    static constexpr std::string_view kExact[] = {
        "torch._tensor._rebuild_from_type_v2",
        "torch._utils._rebuild_wrapper_subclass",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        "torch.nn.parameter.Parameter",
        "collections.OrderedDict",
        "torch.Size",
        "torch.device",
        "torch.serialization._get_layout",
        "torch.strided",
        "torch.distributed.tensor._dtensor_spec.DTensorSpec",
        "torch.distributed.tensor._dtensor_spec.TensorMeta",
        "torch.distributed.tensor._dtensor_spec.ShardOrderEntry",
        "torch.distributed._tensor._dtensor_spec.DTensorSpec",
        "torch.distributed._tensor._dtensor_spec.TensorMeta",
        "torch.distributed._tensor.placement_types.DTensorSpec",
        "torch.distributed._tensor.placement_types.TensorMeta",
        "torch.distributed.tensor.placement_types.Shard",
        "torch.distributed.tensor.placement_types.Replicate",
        "torch.distributed._tensor.placement_types.Shard",
        "torch.distributed._tensor.placement_types.Replicate",
        "torch.distributed.device_mesh.DeviceMesh",
        "torch.distributed._tensor.device_mesh.DeviceMesh",
        "torch.distributed._mesh_layout._MeshLayout",
    };
    if (IsDTensorClass(g)) return true;
    for (std::string_view e : kExact) {
      if (g == e) return true;
    }
    if (TorchDtypeGlobal(g)) return true;
    if (StartsWith(g, "torch.") && g.find('.', 6) == std::string_view::npos && g.size() > 13 &&
        g.substr(g.size() - 7) == "Storage") {
      return true;  // torch.FloatStorage and the like; Storage() checks the class
    }
    return false;
  }

  // The short name of a placement class PyTorch has and ckptfs does not read.
  static bool IsOtherPlacement(std::string_view g) {
    const std::string_view short_name = g.substr(g.rfind('.') + 1);
    return (StartsWith(g, "torch.distributed.tensor.") ||
            StartsWith(g, "torch.distributed._tensor.")) &&
           (short_name == "Partial" || short_name == "_Partial" || short_name == "_StridedShard" ||
            short_name == "_NormPartial" || short_name == "MaskPartial" ||
            short_name == "_MaskPartial" || short_name == "Placement");
  }

  Status BadDTensor(const std::string& name, const std::string& what) const {
    return Status::Corruption(source_.Name() + ": DTensor \"" + name + "\": " + what);
  }
  Status UnsupportedDTensor(const std::string& name, const std::string& what) const {
    return Status::Unsupported(source_.Name() + ": DTensor \"" + name + "\": " + what);
  }

  // Every global reachable from `v` is one IsDTensorGlobal admits. Values already checked
  // (a mesh every DTensor shares) are not walked again, so the whole file costs one walk.
  Status CheckDTensorGlobals(uint32_t v, const std::string& name) {
    std::vector<uint32_t> stack{v};
    while (!stack.empty()) {
      const uint32_t at = stack.back();
      stack.pop_back();
      if (!dtensor_checked_.insert(at).second) continue;
      const PickleValue& p = At(at);
      if (p.kind == PickleKind::kGlobal && !IsDTensorGlobal(p.text)) {
        if (IsOtherPlacement(p.text)) {
          return UnsupportedDTensor(
              name, "placement " + p.text + " is not supported (only Shard and Replicate)");
        }
        return UnsupportedDTensor(name, "global " + p.text + " is not one a DTensor is made of");
      }
      for (uint32_t item : p.items) stack.push_back(item);
      if (p.state != PickleValue::kNoState) stack.push_back(p.state);
      if (p.contents != PickleValue::kNoState) stack.push_back(p.contents);
    }
    return Status::Ok();
  }

  // The value under string key `key` of dict `d`, or nullopt.
  std::optional<uint32_t> DictItem(const PickleValue& d, std::string_view key) const {
    if (d.kind != PickleKind::kDict) return std::nullopt;
    for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
      if (At(d.items[i]).kind == PickleKind::kString && At(d.items[i]).text == key) {
        return d.items[i + 1];
      }
    }
    return std::nullopt;
  }

  // The value under `key` in an object's state: a dict, or either dict of a (dict or None,
  // slots dict) pair.
  std::optional<uint32_t> StateItem(uint32_t state, std::string_view key) const {
    const PickleValue& st = At(state);
    if (st.kind == PickleKind::kDict) return DictItem(st, key);
    if (st.kind == PickleKind::kTuple && st.items.size() == 2) {
      for (uint32_t half : st.items) {
        if (std::optional<uint32_t> found = DictItem(At(half), key)) return found;
      }
    }
    return std::nullopt;
  }

  // The attribute `key` of `object`, from the state BUILD gave it.
  std::optional<uint32_t> Attribute(uint32_t object, std::string_view key) const {
    const PickleValue& p = At(object);
    if (p.state == PickleValue::kNoState) return std::nullopt;
    return StateItem(p.state, key);
  }

  // A call of global `cls` (one of `classes`), or nullptr.
  const PickleValue* CallOf(uint32_t v, std::initializer_list<std::string_view> classes) const {
    const PickleValue& p = At(v);
    if (p.kind != PickleKind::kCall || At(p.items[0]).kind != PickleKind::kGlobal) return nullptr;
    for (std::string_view c : classes) {
      if (At(p.items[0]).text == c) return &p;
    }
    return nullptr;
  }

  // A tuple or list of non-negative ints.
  Result<std::vector<uint64_t>> DTensorInts(uint32_t v, const std::string& name,
                                            const std::string& what) const {
    Result<std::vector<uint64_t>> out = Sizes(v, what);
    if (!out.ok()) return BadDTensor(name, what + " is not a tuple of sizes");
    return out;
  }

  // The mesh's shape and this rank's coordinates on it.
  Status ReadDeviceMesh(uint32_t mesh, const std::string& name, TorchPiece* piece) const {
    if (!CallOf(mesh, {"torch.distributed.device_mesh.DeviceMesh",
                       "torch.distributed._tensor.device_mesh.DeviceMesh"})) {
      return BadDTensor(name, "its spec's mesh is not a DeviceMesh");
    }
    if (std::optional<uint32_t> layout = Attribute(mesh, "_layout")) {  // 2.9+
      if (!CallOf(*layout, {"torch.distributed._mesh_layout._MeshLayout"})) {
        return BadDTensor(name, "the mesh's _layout is not a _MeshLayout");
      }
      std::optional<uint32_t> shape = Attribute(*layout, "shape");
      if (!shape) return BadDTensor(name, "the mesh's _MeshLayout has no shape");
      Result<std::vector<uint64_t>> sizes = Sizes(*shape, "mesh shape");
      if (!sizes.ok()) {
        return UnsupportedDTensor(name,
                                  "a mesh whose layout is not a flat tuple of sizes "
                                  "(a flattened or sliced mesh) is not supported");
      }
      piece->mesh_shape = std::move(*sizes);
    } else if (std::optional<uint32_t> tensor = Attribute(mesh, "mesh")) {  // 2.2-2.8
      const PickleValue* call = CallOf(*tensor, {"torch._utils._rebuild_tensor_v2"});
      const PickleValue* args = call ? Args(*call) : nullptr;
      if (!args || args->items.size() < 3) {
        return BadDTensor(name, "the mesh's `mesh` is not a tensor");
      }
      CKPTFS_ASSIGN_OR_RETURN(piece->mesh_shape, DTensorInts(args->items[2], name, "mesh shape"));
    } else {
      return UnsupportedDTensor(name, "its DeviceMesh records neither a _layout nor a mesh");
    }
    std::optional<uint32_t> coordinate = Attribute(mesh, "_coordinate_on_dim");
    if (!coordinate || At(*coordinate).kind == PickleKind::kNone) {
      return UnsupportedDTensor(name, "the rank that saved it is not in its device mesh");
    }
    CKPTFS_ASSIGN_OR_RETURN(piece->coordinate,
                            DTensorInts(*coordinate, name, "the mesh coordinate"));
    if (piece->mesh_shape.empty() || piece->coordinate.size() != piece->mesh_shape.size()) {
      return BadDTensor(name, "its mesh coordinate and mesh shape differ in length");
    }
    for (size_t i = 0; i < piece->mesh_shape.size(); ++i) {
      if (piece->coordinate[i] >= piece->mesh_shape[i]) {
        return BadDTensor(name, "mesh coordinate " + std::to_string(piece->coordinate[i]) +
                                    " lies outside mesh dimension " + std::to_string(i) +
                                    " of size " + std::to_string(piece->mesh_shape[i]));
      }
    }
    if (std::optional<uint32_t> rank = Attribute(mesh, "_rank")) {
      if (At(*rank).kind == PickleKind::kInt && At(*rank).int_value >= 0) {
        piece->rank = static_cast<uint64_t>(At(*rank).int_value);
      }
    }
    return Status::Ok();
  }

  // Placements: Shard(d) gives d, Replicate() -1; anything else refused.
  Status ReadPlacements(uint32_t v, const std::string& name, TorchPiece* piece) const {
    const PickleValue& p = At(v);
    if (p.kind != PickleKind::kTuple && p.kind != PickleKind::kList) {
      return BadDTensor(name, "its placements are not a tuple");
    }
    for (uint32_t item : p.items) {
      if (CallOf(item, {"torch.distributed.tensor.placement_types.Replicate",
                        "torch.distributed._tensor.placement_types.Replicate"})) {
        piece->shard_dims.push_back(-1);
        continue;
      }
      const PickleValue* shard = CallOf(item, {"torch.distributed.tensor.placement_types.Shard",
                                               "torch.distributed._tensor.placement_types.Shard"});
      if (!shard) {
        const PickleValue& q = At(item);
        const bool global =
            q.kind == PickleKind::kCall && At(q.items[0]).kind == PickleKind::kGlobal;
        return UnsupportedDTensor(
            name, "placement " + (global ? At(q.items[0]).text : std::string("of no class")) +
                      " is not supported (only Shard and Replicate)");
      }
      // A dataclass: Shard() with BUILD {"dim": d}; Shard(d) as a call where pickled so.
      std::optional<uint32_t> dim = Attribute(item, "dim");
      const PickleValue* args = Args(*shard);
      if (!dim && args && args->items.size() == 1) dim = args->items[0];
      if (!dim || At(*dim).kind != PickleKind::kInt || At(*dim).int_value < 0 ||
          At(*dim).int_value >= static_cast<int64_t>(piece->global_shape.size())) {
        return BadDTensor(name, "a Shard placement whose dim is not a dimension of its " +
                                    std::to_string(piece->global_shape.size()) + "-d shape");
      }
      piece->shard_dims.push_back(static_cast<int32_t>(At(*dim).int_value));
    }
    if (piece->shard_dims.size() != piece->mesh_shape.size()) {
      return BadDTensor(name, std::to_string(piece->shard_dims.size()) + " placements for a " +
                                  std::to_string(piece->mesh_shape.size()) + "-d mesh");
    }
    return Status::Ok();
  }

  // A recorded shard order must be the default one (each tensor dimension's mesh
  // dimensions left to right), the only one compute_local_shape_and_global_offset follows.
  Status CheckShardOrder(uint32_t v, const std::string& name, const TorchPiece& piece) const {
    const PickleValue& p = At(v);
    if (p.kind == PickleKind::kNone) return Status::Ok();
    std::vector<std::pair<uint64_t, std::vector<uint64_t>>> expected;
    for (size_t tensor_dim = 0; tensor_dim < piece.global_shape.size(); ++tensor_dim) {
      std::vector<uint64_t> mesh_dims;
      for (size_t m = 0; m < piece.shard_dims.size(); ++m) {
        if (piece.shard_dims[m] == static_cast<int32_t>(tensor_dim)) mesh_dims.push_back(m);
      }
      if (!mesh_dims.empty()) expected.emplace_back(tensor_dim, std::move(mesh_dims));
    }
    bool same = p.kind == PickleKind::kTuple && p.items.size() == expected.size();
    for (size_t i = 0; same && i < p.items.size(); ++i) {
      const PickleValue* entry =
          CallOf(p.items[i], {"torch.distributed.tensor._dtensor_spec.ShardOrderEntry"});
      const PickleValue* args = entry ? Args(*entry) : nullptr;
      same = args && args->items.size() == 2 && At(args->items[0]).kind == PickleKind::kInt &&
             At(args->items[0]).int_value == static_cast<int64_t>(expected[i].first);
      if (same) {
        Result<std::vector<uint64_t>> mesh_dims = Sizes(args->items[1], "shard order");
        same = mesh_dims.ok() && *mesh_dims == expected[i].second;
      }
    }
    if (!same) {
      return UnsupportedDTensor(name,
                                "a shard order other than its placements' left-to-right "
                                "one is not supported");
    }
    return Status::Ok();
  }

  // _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, wrapper args, state).
  Status AddDTensor(const PickleValue& args, const std::string& name, int depth) {
    CKPTFS_RETURN_IF_ERROR(CheckDTensorGlobals(args.items[2], name));
    CKPTFS_RETURN_IF_ERROR(CheckDTensorGlobals(args.items[3], name));
    const PickleValue& wrapper = At(args.items[2]);
    if (wrapper.kind != PickleKind::kTuple || wrapper.items.size() != 8 ||
        !IsDTensorClass(At(wrapper.items[0]).text) ||
        At(wrapper.items[1]).kind != PickleKind::kGlobal) {
      return BadDTensor(name,
                        "its wrapper arguments are not (DTensor, dtype, size, stride, "
                        "storage_offset, layout, device, requires_grad)");
    }
    // The layout: torch.strided, pickled as _get_layout("torch.strided") (or the global).
    const uint32_t layout = wrapper.items[5];
    const PickleValue* get_layout = CallOf(layout, {"torch.serialization._get_layout"});
    const PickleValue* layout_args = get_layout ? Args(*get_layout) : nullptr;
    if (!IsGlobal(layout, "torch.strided") &&
        !(layout_args && layout_args->items.size() == 1 &&
          At(layout_args->items[0]).text == "torch.strided")) {
      return UnsupportedDTensor(name, "a layout other than torch.strided is not supported");
    }
    const std::optional<Dtype> dtype = TorchDtypeGlobal(At(wrapper.items[1]).text);
    if (!dtype) {
      return UnsupportedDTensor(name, "dtype " + At(wrapper.items[1]).text + " is not supported");
    }
    TorchPiece piece;
    CKPTFS_ASSIGN_OR_RETURN(piece.global_shape, DTensorInts(wrapper.items[2], name, "its size"));
    if (!CheckedProduct(piece.global_shape, DtypeSize(*dtype))) {
      return BadDTensor(name, "its size overflows");
    }
    // The state: {"_local_tensor", "_spec"}, or a (None, slots) pair of it.
    const std::optional<uint32_t> local = StateItem(args.items[3], "_local_tensor");
    const std::optional<uint32_t> spec = StateItem(args.items[3], "_spec");
    if (!local || !spec) return BadDTensor(name, "its state lacks _local_tensor or _spec");
    if (!CallOf(*spec, {"torch.distributed.tensor._dtensor_spec.DTensorSpec",
                        "torch.distributed._tensor._dtensor_spec.DTensorSpec",
                        "torch.distributed._tensor.placement_types.DTensorSpec"})) {
      return BadDTensor(name, "its _spec is not a DTensorSpec");
    }
    const std::optional<uint32_t> mesh = Attribute(*spec, "mesh");
    const std::optional<uint32_t> placements = Attribute(*spec, "placements");
    if (!mesh || !placements) return BadDTensor(name, "its spec lacks a mesh or placements");
    if (std::optional<uint32_t> meta = Attribute(*spec, "tensor_meta");
        meta && At(*meta).kind != PickleKind::kNone) {
      const PickleValue* call =
          CallOf(*meta, {"torch.distributed.tensor._dtensor_spec.TensorMeta",
                         "torch.distributed._tensor._dtensor_spec.TensorMeta",
                         "torch.distributed._tensor.placement_types.TensorMeta"});
      const PickleValue* meta_args = call ? Args(*call) : nullptr;
      if (!meta_args || meta_args->items.size() != 3) {
        return BadDTensor(name, "its tensor_meta is not a TensorMeta(shape, stride, dtype)");
      }
      CKPTFS_ASSIGN_OR_RETURN(std::vector<uint64_t> shape,
                              DTensorInts(meta_args->items[0], name, "its tensor_meta shape"));
      if (shape != piece.global_shape ||
          !IsGlobal(meta_args->items[2], At(wrapper.items[1]).text)) {
        return BadDTensor(name, "its tensor_meta and its size or dtype disagree");
      }
    }
    CKPTFS_RETURN_IF_ERROR(ReadDeviceMesh(*mesh, name, &piece));
    CKPTFS_RETURN_IF_ERROR(ReadPlacements(*placements, name, &piece));
    if (std::optional<uint32_t> order = Attribute(*spec, "shard_order")) {
      CKPTFS_RETURN_IF_ERROR(CheckShardOrder(*order, name, piece));
    }
    ComputeTorchPieceBox(piece);
    // The local tensor, named as the DTensor; it must be a plain tensor, not another DTensor.
    const size_t before = out_.tensors.size();
    bool is_tensor = false;
    const PickleValue& l = At(*local);
    if (l.kind == PickleKind::kCall && At(l.items[0]).kind == PickleKind::kGlobal &&
        At(l.items[0]).text == "torch._tensor._rebuild_from_type_v2") {
      return BadDTensor(name, "its _local_tensor is not a plain tensor");
    }
    CKPTFS_RETURN_IF_ERROR(MaybeTensor(*local, name, depth + 1, &is_tensor));
    if (!is_tensor || out_.tensors.size() != before + 1) {
      return BadDTensor(name, "its _local_tensor is not a tensor");
    }
    TorchTensor& t = out_.tensors.back();
    if (out_.storages[t.storage].dtype != *dtype) {
      return BadDTensor(name, "its local tensor is " +
                                  std::string(DtypeName(out_.storages[t.storage].dtype)) +
                                  " but the DTensor " + std::string(DtypeName(*dtype)));
    }
    if (t.shape != piece.size) {
      return BadDTensor(name, "its local tensor has shape " + ShapeText(t.shape) + " but its " +
                                  Placements(piece) + " on mesh " + ShapeText(piece.mesh_shape) +
                                  " at coordinate " + ShapeText(piece.coordinate) + " give " +
                                  ShapeText(piece.size));
    }
    t.piece = std::move(piece);
    return Status::Ok();
  }

  static std::string Placements(const TorchPiece& piece) {
    std::string out;
    for (size_t i = 0; i < piece.shard_dims.size(); ++i) {
      out += i ? "," : "";
      out += piece.shard_dims[i] < 0 ? "Replicate()"
                                     : "Shard(" + std::to_string(piece.shard_dims[i]) + ")";
    }
    return "placements [" + out + "]";
  }

  Result<std::string> KeyText(uint32_t v) const {
    std::optional<std::string> name = PickleKeyName(tree_, v);
    if (!name) return Bad("dict key that is not a string, number or enum member");
    return std::move(*name);
  }

  static std::string Join(const std::string& name, const std::string& part) {
    return name.empty() ? part : name + "." + part;
  }

  // Walks value `v` named `name`: tensors are collected, anything else becomes *state
  // (*has_state false when `v` held only tensors).
  Status Visit(uint32_t v, const std::string& name, int depth, json* state, bool* has_state) {
    if (depth > kMaxNesting) return Bad("\"" + name + "\": containers nested too deeply");
    // A value reached twice (tied weights) is walked twice, but a pickle cannot add a
    // reference without adding a value (its key), so a legitimate walk stays within a
    // few visits per value; containers shared at every level would double per level.
    if (++visits_ > 4 * tree_.values.size() + 1024) {
      return Bad("containers shared too many times over (" + std::to_string(visits_) + " paths)");
    }
    bool is_tensor = false;
    CKPTFS_RETURN_IF_ERROR(MaybeTensor(v, name.empty() ? "tensor" : name, depth, &is_tensor));
    *has_state = !is_tensor;
    if (depth == 0) out_.root_is_tensor = is_tensor;
    if (is_tensor) return Status::Ok();
    const PickleValue& p = At(v);
    switch (p.kind) {
      case PickleKind::kNone:
        *state = nullptr;
        return Status::Ok();
      case PickleKind::kBool:
        *state = p.int_value != 0;
        return Status::Ok();
      case PickleKind::kInt:
        *state = p.int_value;
        return Status::Ok();
      case PickleKind::kFloat:
        *state = p.float_value;
        return Status::Ok();
      case PickleKind::kString:
      case PickleKind::kBytes:
      case PickleKind::kGlobal:  // torch.float32 and the like
        *state = p.text;
        return Status::Ok();
      case PickleKind::kDict: {
        OrderedJsonObject object;  // json's operator[] would be quadratic in the keys
        bool any_tensor = false;
        for (size_t i = 0; i + 1 < p.items.size(); i += 2) {
          CKPTFS_ASSIGN_OR_RETURN(std::string key, KeyText(p.items[i]));
          json child;
          bool child_state = false;
          const size_t before = out_.tensors.size();
          if (depth == 0) {  // a root value: the sub-tree the model rule may pick
            top_key_size_ = static_cast<uint32_t>(key.size());
            top_is_dict_ = At(p.items[i + 1]).kind == PickleKind::kDict;
          }
          CKPTFS_RETURN_IF_ERROR(
              Visit(p.items[i + 1], Join(name, key), depth + 1, &child, &child_state));
          any_tensor |= out_.tensors.size() != before;
          if (child_state) object.Set(std::move(key), std::move(child));
        }
        *has_state = !object.empty() || !any_tensor;
        *state = object.Take();
        return Status::Ok();
      }
      case PickleKind::kTuple:
      case PickleKind::kList:
      case PickleKind::kSet: {
        *state = json::array();
        bool any_tensor = false;
        for (size_t i = 0; i < p.items.size(); ++i) {
          json child;
          bool child_state = false;
          const size_t before = out_.tensors.size();
          CKPTFS_RETURN_IF_ERROR(
              Visit(p.items[i], Join(name, std::to_string(i)), depth + 1, &child, &child_state));
          any_tensor |= out_.tensors.size() != before;
          if (child_state) state->push_back(std::move(child));
        }
        *has_state = !state->empty() || !any_tensor;
        return Status::Ok();
      }
      case PickleKind::kCall: {
        const PickleValue* args = Args(p);
        if (args && IsGlobal(p.items[0], "torch.Size") && args->items.size() == 1) {
          return Visit(args->items[0], name, depth + 1, state, has_state);
        }
        if (args && IsGlobal(p.items[0], "torch.device") && !args->items.empty()) {
          std::string device = At(args->items[0]).text;  // device("cuda", 0) -> "cuda:0"
          if (args->items.size() > 1) device += ":" + std::to_string(At(args->items[1]).int_value);
          *state = device;
          return Status::Ok();
        }
        if (args) {
          CKPTFS_ASSIGN_OR_RETURN(const bool done, KnownCall(v, *args, name, depth, state));
          if (done) return Status::Ok();
        }
        return Opaque(p, name, depth, state);
      }
      case PickleKind::kPersistent:
        return Bad("\"" + name + "\": storage outside a tensor");
    }
    return Status::Ok();
  }

  // The latin-1 text of protocol 2's _codecs.encode(str, 'latin1') call `v`: its str
  // argument (UTF-8), or nullptr when `v` is no such call.
  const std::string* Latin1Text(uint32_t v) const {
    const PickleValue& p = At(v);
    const PickleValue* args = p.kind == PickleKind::kCall ? Args(p) : nullptr;
    if (!args || !IsGlobal(p.items[0], "_codecs.encode") || args->items.size() != 2 ||
        At(args->items[0]).kind != PickleKind::kString || At(args->items[1]).text != "latin1") {
      return nullptr;
    }
    return &At(args->items[0]).text;
  }

  // The bytes latin-1 text stands for: UTF-8 of code points below 256, each back to its
  // byte. nullopt, with the offending byte of `text` in *bad, where a code point is 256
  // or more or the UTF-8 is malformed.
  static std::optional<std::string> Latin1Bytes(const std::string& text, size_t* bad) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<uint8_t>(text[i]);
      if (c < 0x80) {
        out += static_cast<char>(c);
        continue;
      }
      const auto next = i + 1 < text.size() ? static_cast<uint8_t>(text[i + 1]) : 0;
      if ((c & 0xfe) != 0xc2 || (next & 0xc0) != 0x80) {
        *bad = i;
        return std::nullopt;
      }
      out += static_cast<char>(((c & 0x03) << 6) | (next & 0x3f));
      ++i;
    }
    return out;
  }

  // The bytes a protocol 2 pickle writes as _codecs.encode(str, 'latin1'), or a bytes value.
  std::optional<std::string> BytesOf(uint32_t v) const {
    const PickleValue& p = At(v);
    if (p.kind == PickleKind::kBytes) return p.text;
    const std::string* text = Latin1Text(v);
    size_t bad = 0;
    return text ? Latin1Bytes(*text, &bad) : std::nullopt;
  }

  // A numpy dtype call, numpy.dtype('u4', False, True) with BUILD (3, '<', ...): "<u4".
  std::optional<std::string> NumpyDtype(uint32_t v) const {
    const PickleValue& p = At(v);
    const PickleValue* args = p.kind == PickleKind::kCall ? Args(p) : nullptr;
    if (!args || !IsGlobal(p.items[0], "numpy.dtype") || args->items.empty() ||
        At(args->items[0]).kind != PickleKind::kString) {
      return std::nullopt;
    }
    std::string order = "|";
    if (p.state != PickleValue::kNoState && At(p.state).kind == PickleKind::kTuple &&
        At(p.state).items.size() > 1 && At(At(p.state).items[1]).kind == PickleKind::kString) {
      order = At(At(p.state).items[1]).text;
    }
    return order + At(args->items[0]).text;
  }

  static bool IsNumpyReconstruct(std::string_view fn) {
    return fn == "numpy.core.multiarray._reconstruct" ||
           fn == "numpy._core.multiarray._reconstruct";
  }

  // The calls whose value JSON has a plain form (docs/formats.md); false for any other,
  // which is then an opaque value. Nothing is imported or run: arguments and BUILD states
  // are read as values.
  Result<bool> KnownCall(uint32_t v, const PickleValue& args, const std::string& name, int depth,
                         json* state) {
    const PickleValue& p = At(v);
    const std::string& fn = At(p.items[0]).text;
    const std::vector<uint32_t>& a = args.items;
    if (fn == "builtins.set" || fn == "__builtin__.set" || fn == "builtins.frozenset" ||
        fn == "__builtin__.frozenset") {  // set([items]): a list
      if (a.empty()) {
        *state = json::array();
        return true;
      }
      bool has_state = false;
      CKPTFS_RETURN_IF_ERROR(Visit(a[0], name, depth + 1, state, &has_state));
      if (!has_state) *state = json::array();
      return true;
    }
    if (fn == "deepspeed.runtime.zero.config.ZeroStageEnum" && a.size() == 1 &&
        At(a[0]).kind == PickleKind::kInt) {
      *state = At(a[0]).int_value;  // DeepSpeed's reader reads zero_stage as a number
      return true;
    }
    if (fn == "builtins.getattr" || fn == "__builtin__.getattr") {  // the unpickler checked a[0]
      static constexpr std::pair<std::string_view, int> kStages[] = {{"disabled", 0},
                                                                     {"optimizer_states", 1},
                                                                     {"gradients", 2},
                                                                     {"weights", 3},
                                                                     {"max_stage", 3}};
      for (auto [member, stage] : kStages) {
        if (At(a[1]).text == member) {
          *state = stage;
          return true;
        }
      }
      return Bad("\"" + name + "\": ZeroStageEnum has no member " + At(a[1]).text);
    }
    if (fn == "_codecs.encode") {
      const std::optional<std::string> bytes = BytesOf(v);
      if (!bytes) return false;
      *state = *bytes;
      return true;
    }
    if (fn == "numpy.dtype") {
      const std::optional<std::string> dtype = NumpyDtype(v);
      if (!dtype) return false;
      *state = *dtype;
      return true;
    }
    if (IsNumpyReconstruct(fn)) {
      // An array not served as a tensor: kept as its dtype and shape (data left out).
      const PickleValue* st = p.state == PickleValue::kNoState ? nullptr : &At(p.state);
      if (!st || st->kind != PickleKind::kTuple || st->items.size() != 5) return false;
      const std::optional<std::string> dtype = NumpyDtype(st->items[2]);
      Result<std::vector<uint64_t>> shape = Sizes(st->items[1], "numpy array shape");
      if (!dtype || !shape.ok()) return false;
      *state = json{{"__object__", "numpy.ndarray"}, {"dtype", *dtype}, {"shape", *shape}};
      return true;
    }
    if (fn == "numpy.core.multiarray.scalar" || fn == "numpy._core.multiarray.scalar") {
      const std::optional<std::string> dtype = a.size() == 2 ? NumpyDtype(a[0]) : std::nullopt;
      const std::optional<std::string> bytes = a.size() == 2 ? BytesOf(a[1]) : std::nullopt;
      if (!dtype || !bytes) return false;
      *state = NumpyScalar(*dtype, *bytes);
      return true;
    }
    return false;
  }

  // Any other call: {"__object__": "module.name", "args": [...], "kwargs": {...},
  // "state": ..., "items": ...}, each key only when there is something. Tensors inside are
  // named as if the object were what it holds: args by position, kwargs, a dict state (and
  // both dicts of a (dict, slots) state) and dict items by key, list items by position;
  // any other state under "state".
  Status Opaque(const PickleValue& p, const std::string& name, int depth, json* state) {
    OrderedJsonObject object;
    object.Set("__object__", At(p.items[0]).kind == PickleKind::kGlobal ? json(At(p.items[0]).text)
                                                                        : json("call"));
    auto add = [&](std::string_view key, uint32_t value, const std::string& at) -> Status {
      json child;
      bool child_state = false;
      CKPTFS_RETURN_IF_ERROR(Visit(value, at, depth + 1, &child, &child_state));
      if (child_state &&
          !(child.is_array() && child.empty() && At(value).kind == PickleKind::kTuple)) {
        object.Set(std::string(key), std::move(child));
      }
      return Status::Ok();
    };
    if (p.items.size() > 1) CKPTFS_RETURN_IF_ERROR(add("args", p.items[1], name));
    if (p.items.size() > 2 && !At(p.items[2]).items.empty()) {
      CKPTFS_RETURN_IF_ERROR(add("kwargs", p.items[2], name));
    }
    if (p.state != PickleValue::kNoState) {
      const PickleValue& st = At(p.state);
      const bool slots = st.kind == PickleKind::kTuple && st.items.size() == 2 &&
                         (At(st.items[0]).kind == PickleKind::kDict ||
                          At(st.items[0]).kind == PickleKind::kNone) &&
                         At(st.items[1]).kind == PickleKind::kDict;
      if (slots) {  // (__dict__ or None, slots): both by key, shown as the pair
        json pair = json::array();
        for (uint32_t half : st.items) {
          json child;
          bool child_state = false;
          CKPTFS_RETURN_IF_ERROR(Visit(half, name, depth + 1, &child, &child_state));
          pair.push_back(child_state ? std::move(child) : json::object());
        }
        object.Set("state", std::move(pair));
      } else {
        CKPTFS_RETURN_IF_ERROR(
            add("state", p.state, st.kind == PickleKind::kDict ? name : Join(name, "state")));
      }
    }
    if (p.contents != PickleValue::kNoState) {
      CKPTFS_RETURN_IF_ERROR(add("items", p.contents, name));
    }
    *state = object.Take();
    return Status::Ok();
  }

  // numpy's _reconstruct(ndarray, (0,), b'b') with BUILD (version, shape, dtype,
  // is_fortran, rawdata): a tensor when its dtype is one ckptfs has. Bytes verbatim in the
  // pickle (protocol >= 3) are served from there; protocol 2's latin-1 text
  // (_codecs.encode(str, 'latin1'), or bytes() when empty) and escaped bytes are decoded
  // once, here, into TorchFile::decoded. Any other array (object dtype, big-endian) stays a value
  // (KnownCall).
  Status MaybeNumpyTensor(const PickleValue& call, const std::string& name, bool* is_tensor) {
    const PickleValue* st = call.state == PickleValue::kNoState ? nullptr : &At(call.state);
    if (!st || st->kind != PickleKind::kTuple || st->items.size() != 5) return Status::Ok();
    const std::optional<std::string> descr = NumpyDtype(st->items[2]);
    if (!descr) return Status::Ok();
    // A plain Dtype, not an optional: GCC sees the optional's flag as maybe-uninitialized.
    const std::optional<Dtype> known = DtypeOfNumpy(*descr);
    if (!known) return Status::Ok();
    const Dtype dtype = *known;
    const uint32_t raw_value = st->items[4];
    const PickleValue& raw = At(raw_value);
    const std::string* latin1 = Latin1Text(raw_value);
    const bool verbatim = raw.kind == PickleKind::kBytes && raw.int_value > 0;
    const bool empty_bytes =
        raw.kind == PickleKind::kCall && Args(raw) && Args(raw)->items.empty() &&
        (IsGlobal(raw.items[0], "__builtin__.bytes") || IsGlobal(raw.items[0], "builtins.bytes"));
    const bool escaped = raw.kind == PickleKind::kBytes && !verbatim;  // protocol 0's STRING
    if (!(verbatim || latin1 || empty_bytes || escaped)) return Status::Ok();
    if (At(st->items[3]).kind != PickleKind::kBool) return Status::Ok();
    const bool fortran = At(st->items[3]).int_value != 0;
    CKPTFS_ASSIGN_OR_RETURN(std::vector<uint64_t> shape,
                            Sizes(st->items[1], "numpy array \"" + name + "\" shape"));
    if (name.find('\0') != std::string::npos) return Bad("a tensor name contains a NUL byte");
    // Decoded once per pickle value: arrays may share one through the memo, and decoding
    // it again for each would let a small pickle spend a long time.
    uint64_t data_size = raw.text.size();
    uint64_t decoded_offset = 0;
    if (!verbatim) {
      auto done = decoded_at_.find(raw_value);
      if (done == decoded_at_.end()) {
        std::string data;
        if (latin1) {
          size_t bad = 0;
          std::optional<std::string> text = Latin1Bytes(*latin1, &bad);
          if (!text) {
            return Bad("numpy array \"" + name + "\": its data is not latin-1 text (byte " +
                       std::to_string(bad) + " of the string starts a code point of 256 or more)");
          }
          data = std::move(*text);
        } else if (escaped) {
          data = raw.text;  // the unpickler already undid the escapes
        }
        // At most the pickle's own size in all (each byte took at least one byte of text),
        // and the pickle is capped (kMaxTorchPickle); charged to its budget all the same.
        CKPTFS_RETURN_IF_ERROR(budget_.ChargeOrRefuse(data.size()));
        done = decoded_at_.emplace(raw_value, std::pair{out_.decoded.size(), data.size()}).first;
        out_.decoded += data;
      }
      decoded_offset = done->second.first;
      data_size = done->second.second;
    }
    const std::optional<uint64_t> bytes = TensorBytes(dtype, shape);
    if (!bytes || *bytes != data_size) {
      return Bad("numpy array \"" + name + "\": " + std::to_string(data_size) +
                 " bytes of data for shape and dtype " + *descr);
    }
    *is_tensor = true;
    // Keyed by dtype too: two arrays over one bytes object (a memo reference) may read it
    // as different types, and a tensor takes its storage's. Decoded data is keyed by the
    // value it came from, so a memo reference decodes it once.
    const std::string key =
        (!verbatim ? std::string("decoded@") + std::to_string(raw_value)
                   : std::string(kPickleRecord) + "@" + std::to_string(raw.int_value - 1)) +
        ":" + std::string(DtypeName(dtype));
    uint32_t storage = 0;
    if (auto seen = keys_.find(key); seen != keys_.end()) {
      storage = seen->second;  // the same bytes object twice: one storage
    } else if (!verbatim) {
      TorchStorage s{key, dtype, decoded_offset, data_size, 0, false};
      s.decoded = true;
      out_.storages.push_back(std::move(s));
      storage = static_cast<uint32_t>(out_.storages.size() - 1);
      keys_.emplace(key, storage);
    } else {
      const uint64_t offset = static_cast<uint64_t>(raw.int_value - 1);
      out_.storages.push_back(
          TorchStorage{key, dtype, pickle_offset_ + offset, raw.text.size(), 0, false});
      storage = static_cast<uint32_t>(out_.storages.size() - 1);
      keys_.emplace(key, storage);
    }
    TorchTensor t;
    t.name = name;
    if (name.size() > top_key_size_) {
      t.top_key_size = top_key_size_;
      t.top_is_dict = top_is_dict_;
    }
    t.storage = storage;
    t.stride = RowMajorStrides(shape);
    if (fortran) {  // column-major: the first dimension is the densest
      uint64_t step = 1;
      for (size_t i = 0; i < shape.size(); ++i) {
        t.stride[i] = step;
        step *= std::max<uint64_t>(shape[i], 1);
      }
    }
    t.shape = std::move(shape);
    out_.tensors.push_back(std::move(t));
    return Status::Ok();
  }

  // The Dtype of a numpy descriptor ("<f4", "|u1"), little-endian or byte-sized only.
  static std::optional<Dtype> DtypeOfNumpy(std::string_view descr) {
    static constexpr std::pair<std::string_view, Dtype> kDescrs[] = {
        {"<f8", Dtype::kF64}, {"<f4", Dtype::kF32},  {"<f2", Dtype::kF16}, {"<i8", Dtype::kI64},
        {"<i4", Dtype::kI32}, {"<i2", Dtype::kI16},  {"|i1", Dtype::kI8},  {"<u8", Dtype::kU64},
        {"<u4", Dtype::kU32}, {"<u2", Dtype::kU16},  {"|u1", Dtype::kU8},  {"|b1", Dtype::kBool},
        {"<c8", Dtype::kC64}, {"<c16", Dtype::kC128}};
    for (auto [d, dtype] : kDescrs) {
      if (d == descr) return dtype;
    }
    return std::nullopt;
  }

  // Bytes of a dense tensor, nullopt on overflow.
  static std::optional<uint64_t> TensorBytes(Dtype dtype, std::span<const uint64_t> shape) {
    return CheckedProduct(shape, DtypeSize(dtype));
  }

  // A numpy scalar's value where JSON has one (little-endian numbers, bool), else its dtype.
  static json NumpyScalar(const std::string& dtype, const std::string& bytes) {
    auto load = [&](auto zero) -> json {
      decltype(zero) v{};
      if (bytes.size() != sizeof(v)) return json{{"numpy_scalar", dtype}};
      std::memcpy(&v, bytes.data(), sizeof(v));
      return v;
    };
    if (dtype == "<f8") return load(double{});
    if (dtype == "<f4") return load(float{});
    if (dtype == "<i8") return load(int64_t{});
    if (dtype == "<i4") return load(int32_t{});
    if (dtype == "<u8") return load(uint64_t{});
    if (dtype == "<u4") return load(uint32_t{});
    if (dtype == "|b1" && bytes.size() == 1) return bytes[0] != 0;
    return json{{"numpy_scalar", dtype}};
  }

  const ByteSource& source_;
  const PickleTree& tree_;
  std::string prefix_;
  uint64_t pickle_offset_;
  PickleGlobals globals_;
  MetadataBudget budget_;  // charged with the numpy data decoded into TorchFile::decoded
  // Pickle value -> (offset, size) of its bytes in TorchFile::decoded.
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> decoded_at_;
  std::unordered_map<std::string, const ZipEntry*> records_;
  std::unordered_map<std::string, uint32_t> keys_;
  uint64_t visits_ = 0;
  // Values whose globals CheckDTensorGlobals has already admitted.
  std::unordered_set<uint32_t> dtensor_checked_;
  // The root key being walked (TorchTensor::top_key_size); 0 outside the root dict.
  uint32_t top_key_size_ = 0;
  bool top_is_dict_ = false;
  TorchFile out_;
};

// --- Writing -------------------------------------------------------------------------

class PickleWriter {
 public:
  // `count_only`: keep the size, not the bytes (a mount needs data.pkl's size, not it).
  explicit PickleWriter(bool count_only = false) : count_only_(count_only) {}

  void Op(char op) {
    if (count_only_) {
      ++size_;
    } else {
      out_.push_back(op);
    }
  }
  void Raw(std::string_view bytes) {
    if (count_only_) {
      size_ += bytes.size();
    } else {
      out_ += bytes;
    }
  }
  void Le(uint64_t v, int bytes) {
    if (count_only_) {
      size_ += static_cast<uint64_t>(bytes);
      return;
    }
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  void Int(uint64_t v) {
    if (v < 0x100) {
      Op('K');
      Le(v, 1);
    } else if (v < 0x10000) {
      Op('M');
      Le(v, 2);
    } else if (v < 0x80000000) {
      Op('J');
      Le(v, 4);
    } else {
      // LONG1: little-endian two's complement, with a zero byte if the top bit is set.
      int n = 0;
      for (uint64_t x = v; x; x >>= 8) ++n;
      const bool pad = (v >> (8 * n - 1)) & 1;
      Op('\x8a');
      Le(n + pad, 1);
      Le(v, n);
      if (pad) Le(0, 1);
    }
  }
  void Unicode(std::string_view s) {
    Op('X');
    Le(s.size(), 4);
    Raw(s);
  }
  void Global(std::string_view module, std::string_view name) {
    Op('c');
    Raw(module);
    Op('\n');
    Raw(name);
    Op('\n');
  }
  // Memo slots: each shared value is written once, then fetched.
  void Put(uint32_t slot) {
    Op('r');  // LONG_BINPUT
    Le(slot, 4);
  }
  void Get(uint32_t slot) {
    Op('j');  // LONG_BINGET
    Le(slot, 4);
  }
  void Tuple(std::span<const uint64_t> values) {
    static constexpr char kSmall[] = {')', '\x85', '\x86', '\x87'};  // EMPTY_TUPLE, TUPLE1..3
    if (values.size() > 3) Op('(');
    for (uint64_t v : values) Int(v);
    Op(values.size() <= 3 ? kSmall[values.size()] : 't');
  }
  std::string Take() { return std::move(out_); }
  uint64_t size() const { return count_only_ ? size_ : out_.size(); }

 private:
  bool count_only_;
  uint64_t size_ = 0;
  std::string out_;
};

// A storage record's key, as the string torch names its zip record by.
void WriteStorageKey(PickleWriter& w, uint64_t key) {
  char text[24];
  const auto end = std::to_chars(text, text + sizeof(text), key).ptr;
  w.Unicode(std::string_view(text, static_cast<size_t>(end - text)));
}

// From the persistent id's element count to requires_grad: the part of
// _rebuild_tensor_v2's arguments that says which view of the storage the tensor is.
void WriteViewArgs(PickleWriter& w, const TorchPickleEntry& e) {
  w.Int(e.storage_numel);
  w.Op('t');  // TUPLE: the persistent id
  w.Op('Q');  // BINPERSID
  w.Int(e.storage_offset);
  w.Tuple(e.shape);
  w.Tuple(e.stride);
  w.Op('\x89');  // NEWFALSE: requires_grad
}

}  // namespace

// torch.chunk of each sharded dimension over its mesh dimension, nested in placement order
// (torch's _compute_local_shape_and_global_offset, Shard and Replicate only).
void ComputeTorchPieceBox(TorchPiece& piece) {
  const size_t n = piece.global_shape.size();
  piece.size = piece.global_shape;
  piece.offset.assign(n, 0);
  std::vector<bool> empty(n, false);
  for (size_t m = 0; m < piece.shard_dims.size(); ++m) {
    if (piece.shard_dims[m] < 0) continue;
    const auto d = static_cast<size_t>(piece.shard_dims[m]);
    const uint64_t left = piece.size[d];
    const uint64_t parts = piece.mesh_shape[m];  // > 0: the coordinate is below it
    const uint64_t chunk = left / parts + (left % parts != 0);
    // Past `left` (even past 2^64) the piece is empty.
    const uint64_t start = CheckedMul(chunk, piece.coordinate[m]).value_or(UINT64_MAX);
    const uint64_t size = start >= left ? 0 : std::min(chunk, left - start);
    piece.size[d] = size;
    if (size == 0) empty[d] = true;
    piece.offset[d] += size == 0 ? 0 : start;
  }
  for (size_t d = 0; d < n; ++d) {
    if (empty[d]) piece.offset[d] = piece.global_shape[d];
  }
}

bool IsRowMajor(std::span<const uint64_t> shape, std::span<const uint64_t> stride) {
  // An empty tensor has no bytes to lay out.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return true;
  uint64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    // A dimension of one is never stepped along, so its stride does not matter.
    if (shape[i] != 1 && stride[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::vector<uint64_t> RowMajorStrides(std::span<const uint64_t> shape) {
  std::vector<uint64_t> stride(shape.size());
  uint64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = step;
    step *= std::max<uint64_t>(shape[i], 1);
  }
  return stride;
}

std::optional<std::string_view> TorchStorageClass(Dtype dtype) {
  for (const StorageClass& c : kStorageClasses) {
    if (c.dtype == dtype) return c.name;
  }
  return std::nullopt;
}

namespace {

// A torch.save file's records and its unpickled data.pkl.
struct TorchArchive {
  std::vector<ZipEntry> entries;
  std::string prefix;          // "ARCHIVE/"
  uint64_t pickle_offset = 0;  // where data.pkl's bytes start in the file
  uint64_t pickle_size = 0;
  PickleTree tree;
};

Result<TorchArchive> ReadTorchArchive(const ByteSource& source, PickleGlobals globals) {
  CKPTFS_RETURN_IF_ERROR(CheckZipMagic(source, globals));
  TorchArchive out;
  CKPTFS_ASSIGN_OR_RETURN(out.entries, ReadZipDirectory(source));
  // torch names every record ARCHIVE/...; its reader takes ARCHIVE from the records.
  const ZipEntry* pickle = nullptr;
  for (const ZipEntry& e : out.entries) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == kPickleRecord) {
      if (pickle) return Status::Corruption(source.Name() + ": two data.pkl records");
      pickle = &e;
    }
  }
  if (!pickle) return Status::Corruption(source.Name() + ": no data.pkl record in the zip");
  out.prefix = pickle->name.substr(0, pickle->name.size() - kPickleRecord.size());
  for (const ZipEntry& e : out.entries) {
    if (e.name == out.prefix + "byteorder" && e.size != 6) {
      return Status::Unsupported(source.Name() + ": big-endian checkpoint");
    }
  }
  if (pickle->method != 0) {
    return Status::Unsupported(source.Name() + ": data.pkl is compressed");
  }
  if (pickle->size > kMaxTorchPickle) {
    return Status::Corruption(source.Name() + ": data.pkl larger than 64 MiB");
  }
  out.pickle_offset = pickle->data_offset;
  out.pickle_size = pickle->size;
  std::string data(pickle->size, '\0');
  CKPTFS_RETURN_IF_ERROR(
      source.ReadAt(pickle->data_offset, {reinterpret_cast<uint8_t*>(data.data()), data.size()}));
  CKPTFS_ASSIGN_OR_RETURN(out.tree, Unpickle(data, source.Name(), globals));
  return out;
}

}  // namespace

Result<TorchFile> ReadTorchFile(const ByteSource& source, PickleGlobals globals) {
  CKPTFS_ASSIGN_OR_RETURN(TorchArchive archive, ReadTorchArchive(source, globals));
  return Interpreter(source, archive.tree, archive.entries, archive.prefix, archive.pickle_offset,
                     archive.pickle_size, globals)
      .Run();
}

Result<std::vector<std::string>> ReadTorchStringList(const ByteSource& source) {
  CKPTFS_ASSIGN_OR_RETURN(TorchArchive archive, ReadTorchArchive(source, PickleGlobals::kTorch));
  const PickleTree& tree = archive.tree;
  const PickleValue& root = tree.at(tree.root);
  if (root.kind != PickleKind::kList) {
    return Status::Corruption(source.Name() + ": not a list of key names (torch.save of a list)");
  }
  std::vector<std::string> out;
  out.reserve(root.items.size());
  for (uint32_t item : root.items) {
    const PickleValue& v = tree.at(item);
    if (v.kind != PickleKind::kString) {
      return Status::Corruption(source.Name() + ": item " + std::to_string(out.size()) +
                                " of the list is not a str");
    }
    out.push_back(v.text);
  }
  return out;
}

class TorchPickleBuilder::Writer : public PickleWriter {
  using PickleWriter::PickleWriter;
};

TorchPickleBuilder::TorchPickleBuilder(bool count_only)
    : writer_(std::make_unique<Writer>(count_only)) {
  PickleWriter& w = *writer_;
  w.Op('\x80');  // PROTO 2
  w.Le(2, 1);
  w.Global("collections", "OrderedDict");
  w.Put(kOrderedDict);
  w.Op(')');  // EMPTY_TUPLE
  w.Op('R');  // REDUCE
}

TorchPickleBuilder::~TorchPickleBuilder() = default;

void TorchPickleBuilder::Add(const TorchPickleEntry& e) {
  PickleWriter& w = *writer_;
  const uint64_t i = count_++;
  if (i % 1000 == 0) w.Op('(');  // MARK: SETITEMS in batches, as pickle does
  w.Unicode(e.name);
  if (i == 0) {
    w.Global("torch._utils", "_rebuild_tensor_v2");
    w.Put(kRebuild);
  } else {
    w.Get(kRebuild);
  }
  w.Op('(');  // args
  w.Op('(');  // the persistent id ('storage', class, key, 'cpu', numel)
  if (i == 0) {
    w.Unicode("storage");
    w.Put(kStorage);
  } else {
    w.Get(kStorage);
  }
  const std::string_view cls = *TorchStorageClass(e.dtype);
  auto [slot, added] =
      class_slots_.emplace(cls, kFirstClass + static_cast<uint32_t>(class_slots_.size()));
  if (added) {
    w.Global("torch", cls);
    w.Put(slot->second);
  } else {
    w.Get(slot->second);
  }
  WriteStorageKey(w, e.key);
  if (i == 0) {
    w.Unicode("cpu");
    w.Put(kCpu);
  } else {
    w.Get(kCpu);
  }
  WriteViewArgs(w, e);
  w.Get(kOrderedDict);
  w.Op(')');
  w.Op('R');  // backward hooks: OrderedDict()
  w.Op('t');
  w.Op('R');
  if (i % 1000 == 999) w.Op('u');  // SETITEMS
}

uint64_t TorchPickleBuilder::Finish() {
  if (count_ % 1000 != 0) writer_->Op('u');  // SETITEMS of the last, partial batch
  writer_->Op('.');                          // STOP
  return writer_->size();
}

std::string TorchPickleBuilder::Take() { return writer_->Take(); }

namespace {

// torch.save(tensor)'s pickle: _rebuild_tensor_v2 called on storage record `key`, as the
// root; the writer may only count.
void WriteTensorPickle(PickleWriter& w, const TorchPickleEntry& e) {
  w.Op('\x80');  // PROTO 2
  w.Le(2, 1);
  w.Global("torch._utils", "_rebuild_tensor_v2");
  w.Op('(');  // args
  w.Op('(');  // the persistent id ('storage', class, key, 'cpu', numel)
  w.Unicode("storage");
  w.Global("torch", *TorchStorageClass(e.dtype));
  WriteStorageKey(w, e.key);
  w.Unicode("cpu");
  WriteViewArgs(w, e);
  w.Global("collections", "OrderedDict");
  w.Op(')');
  w.Op('R');  // backward hooks: OrderedDict()
  w.Op('t');
  w.Op('R');
  w.Op('.');  // STOP
}

}  // namespace

std::string BuildTorchTensorPickle(const TorchPickleEntry& entry) {
  PickleWriter w;
  WriteTensorPickle(w, entry);
  return w.Take();
}

uint64_t TorchTensorPickleSize(const TorchPickleEntry& entry) {
  PickleWriter w(/*count_only=*/true);
  WriteTensorPickle(w, entry);
  return w.size();
}

std::string BuildTorchStringListPickle(std::span<const std::string_view> items) {
  PickleWriter w;
  w.Op('\x80');  // PROTO 2
  w.Le(2, 1);
  w.Op(']');  // EMPTY_LIST
  // APPENDS in batches of 1000, as pickle does.
  for (size_t i = 0; i < items.size(); ++i) {
    if (i % 1000 == 0) w.Op('(');
    w.Unicode(items[i]);
    if (i % 1000 == 999 || i + 1 == items.size()) w.Op('e');
  }
  w.Op('.');
  return w.Take();
}

std::string BuildTorchPickle(std::span<const TorchPickleEntry> entries) {
  TorchPickleBuilder builder;
  for (const TorchPickleEntry& e : entries) builder.Add(e);
  builder.Finish();
  return builder.Take();
}

}  // namespace ckptfs
