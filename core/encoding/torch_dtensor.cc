// DTensors (torch.distributed.tensor), as FSDP2 trainers torch.save them per rank: the
// part of TorchInterpreter (torch_interpreter.h) that reads one, and the box of its piece.
//
// A DTensor pickles as _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor,
// (DTensor, dtype, size, stride, storage_offset, layout, device, requires_grad), state)
// with state {"_local_tensor": tensor, "_spec": DTensorSpec} (a (None, dict) pair where
// the class has __slots__). Its classes have lived in two places: torch.distributed.tensor
// (2.5+, DeviceMesh in torch.distributed.device_mesh, 2.9+ with a _MeshLayout) and
// torch.distributed._tensor (2.2-2.4, a DeviceMesh holding its `mesh` tensor).
#include <algorithm>
#include <string>

#include "core/checked.h"
#include "core/encoding/shape.h"
#include "core/encoding/torch_interpreter.h"

namespace ckptfs {
namespace {

// The module-qualified names a DTensor's construction may name, and nothing else: its
// classes, the local tensor's rebuild, torch.Size, dtypes, devices, layouts, storages.
bool IsDTensorGlobal(std::string_view g) {
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
  if (g.starts_with("torch.") && g.find('.', 6) == std::string_view::npos && g.size() > 13 &&
      g.substr(g.size() - 7) == "Storage") {
    return true;  // torch.FloatStorage and the like; Storage() checks the class
  }
  return false;
}

// The short name of a placement class PyTorch has and ckptfs does not read.
bool IsOtherPlacement(std::string_view g) {
  const std::string_view short_name = g.substr(g.rfind('.') + 1);
  return (g.starts_with("torch.distributed.tensor.") ||
          g.starts_with("torch.distributed._tensor.")) &&
         (short_name == "Partial" || short_name == "_Partial" || short_name == "_StridedShard" ||
          short_name == "_NormPartial" || short_name == "MaskPartial" ||
          short_name == "_MaskPartial" || short_name == "Placement");
}

// "placements [Shard(0),Replicate()]", for a refusal.
std::string Placements(const TorchPiece& piece) {
  std::string out;
  for (size_t i = 0; i < piece.shard_dims.size(); ++i) {
    out += i ? "," : "";
    out += piece.shard_dims[i] < 0 ? "Replicate()"
                                   : "Shard(" + std::to_string(piece.shard_dims[i]) + ")";
  }
  return "placements [" + out + "]";
}

}  // namespace

bool IsDTensorClass(std::string_view g) {
  return g == "torch.distributed.tensor.DTensor" || g == "torch.distributed.tensor._api.DTensor" ||
         g == "torch.distributed._tensor.api.DTensor";
}

Status TorchInterpreter::BadDTensor(const std::string& name, const std::string& what) const {
  return Status::Corruption(source_.Name() + ": DTensor \"" + name + "\": " + what);
}

Status TorchInterpreter::UnsupportedDTensor(const std::string& name,
                                            const std::string& what) const {
  return Status::Unsupported(source_.Name() + ": DTensor \"" + name + "\": " + what);
}

Status TorchInterpreter::CheckDTensorGlobals(uint32_t v, const std::string& name) {
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

Result<std::vector<uint64_t>> TorchInterpreter::DTensorInts(uint32_t v, const std::string& name,
                                                            const std::string& what) const {
  Result<std::vector<uint64_t>> out = Sizes(v, what);
  if (!out.ok()) return BadDTensor(name, what + " is not a tuple of sizes");
  return out;
}

Status TorchInterpreter::ReadDeviceMesh(uint32_t mesh, const std::string& name,
                                        TorchPiece* piece) const {
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
  CKPTFS_ASSIGN_OR_RETURN(piece->coordinate, DTensorInts(*coordinate, name, "the mesh coordinate"));
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

Status TorchInterpreter::ReadPlacements(uint32_t v, const std::string& name,
                                        TorchPiece* piece) const {
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
      const bool global = q.kind == PickleKind::kCall && At(q.items[0]).kind == PickleKind::kGlobal;
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

Status TorchInterpreter::CheckShardOrder(uint32_t v, const std::string& name,
                                         const TorchPiece& piece) const {
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

Status TorchInterpreter::AddDTensor(const PickleValue& args, const std::string& name, int depth) {
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
  if (!IsGlobal(layout, "torch.strided") && !(layout_args && layout_args->items.size() == 1 &&
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
    if (shape != piece.global_shape || !IsGlobal(meta_args->items[2], At(wrapper.items[1]).text)) {
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

}  // namespace ckptfs
