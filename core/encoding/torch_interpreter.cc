// The walk of a torch.save pickle (torch_interpreter.h): values become tensors or JSON state;
// rebuild calls and persistent ids become tensors viewing stored records.
#include "core/encoding/torch_interpreter.h"

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/encoding/ordered_json.h"
#include "core/encoding/pickle_key.h"

namespace ckptfs {
namespace {

constexpr int kMaxNesting = 64;

// A child's name: the parent's, a '.', and the key or index (no dot at the root).
std::string Join(const std::string& name, const std::string& part) {
  return name.empty() ? part : name + "." + part;
}

}  // namespace

Result<TorchFile> TorchInterpreter::Run() {
  bool has_state = false;
  json state;
  CKPTFS_RETURN_IF_ERROR(Visit(tree_.root, "", 0, &state, &has_state));
  if (has_state) out_.state_json = state.dump(-1, ' ', false, json::error_handler_t::replace);
  out_.weights_only = WeightsOnlyVerdictOf(tree_.names);
  return std::move(out_);
}

Result<uint64_t> TorchInterpreter::NonNegative(uint32_t v, const std::string& what) const {
  const PickleValue& p = At(v);
  if (p.kind != PickleKind::kInt || p.int_value < 0) return Bad(what + " is not a size");
  return static_cast<uint64_t>(p.int_value);
}

Result<std::vector<uint64_t>> TorchInterpreter::Sizes(uint32_t v, const std::string& what) const {
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

std::optional<uint32_t> TorchInterpreter::DictItem(const PickleValue& d,
                                                   std::string_view key) const {
  if (d.kind != PickleKind::kDict) return std::nullopt;
  for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
    if (At(d.items[i]).kind == PickleKind::kString && At(d.items[i]).text == key) {
      return d.items[i + 1];
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> TorchInterpreter::StateItem(uint32_t state, std::string_view key) const {
  const PickleValue& st = At(state);
  if (st.kind == PickleKind::kDict) return DictItem(st, key);
  if (st.kind == PickleKind::kTuple && st.items.size() == 2) {
    for (uint32_t half : st.items) {
      if (std::optional<uint32_t> found = DictItem(At(half), key)) return found;
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> TorchInterpreter::Attribute(uint32_t object, std::string_view key) const {
  const PickleValue& p = At(object);
  if (p.state == PickleValue::kNoState) return std::nullopt;
  return StateItem(p.state, key);
}

const PickleValue* TorchInterpreter::CallOf(uint32_t v,
                                            std::initializer_list<std::string_view> classes) const {
  const PickleValue& p = At(v);
  if (p.kind != PickleKind::kCall || At(p.items[0]).kind != PickleKind::kGlobal) return nullptr;
  for (std::string_view c : classes) {
    if (At(p.items[0]).text == c) return &p;
  }
  return nullptr;
}

Result<std::string> TorchInterpreter::KeyText(uint32_t v) const {
  std::optional<std::string> name = PickleKeyName(tree_, v);
  if (!name) return Bad("dict key that is not a string, number or enum member");
  return std::move(*name);
}

Result<uint32_t> TorchInterpreter::Storage(uint32_t v, const std::string& tensor) {
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
  auto known = std::find_if(std::begin(kTorchStorageClasses), std::end(kTorchStorageClasses),
                            [&](const TorchStorageClassEntry& c) { return c.name == short_cls; });
  if (known == std::end(kTorchStorageClasses)) {
    return Status::Unsupported(source_.Name() + ": tensor \"" + tensor + "\": storage type " + cls +
                               " is not supported");
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
  return AddStorage(TorchStorage{key, known->dtype, e.data_offset, e.size, e.crc32});
}

uint32_t TorchInterpreter::AddStorage(TorchStorage storage) {
  out_.storages.push_back(std::move(storage));
  const auto index = static_cast<uint32_t>(out_.storages.size() - 1);
  keys_.emplace(out_.storages.back().key, index);
  return index;
}

Status TorchInterpreter::CheckTensorName(const std::string& name) const {
  if (name.find('\0') != std::string::npos) return Bad("a tensor name contains a NUL byte");
  return Status::Ok();
}

TorchTensor TorchInterpreter::NewTensor(const std::string& name) const {
  TorchTensor t;
  t.name = name;
  if (name.size() > top_key_size_) {  // inside a root value's container, not that value
    t.top_key_size = top_key_size_;
    t.top_is_dict = top_is_dict_;
  }
  return t;
}

Status TorchInterpreter::AddTensor(const PickleValue& args, const std::string& name) {
  if (args.items.size() < 4) return Bad("tensor \"" + name + "\": too few rebuild arguments");
  CKPTFS_RETURN_IF_ERROR(CheckTensorName(name));
  TorchTensor t = NewTensor(name);
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

Status TorchInterpreter::MaybeTensor(uint32_t v, const std::string& name, int depth,
                                     bool* is_tensor) {
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
    CKPTFS_RETURN_IF_ERROR(CheckTensorName(name));
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
  if (fn.starts_with("torch._utils._rebuild_")) {
    return Status::Unsupported(source_.Name() + ": \"" + name + "\": " + fn +
                               " (sparse, quantized or meta tensors) is not supported");
  }
  return Status::Ok();
}

Status TorchInterpreter::Visit(uint32_t v, const std::string& name, int depth, json* state,
                               bool* has_state) {
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
        if (args->items.size() > 1) {
          // Two appends, not ":" + number: GCC 12 at -O3 misreads the temporary's insert as
          // an overlapping memcpy (-Wrestrict), as in hf_hub.cc.
          device += ':';
          device += std::to_string(At(args->items[1]).int_value);
        }
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

Result<bool> TorchInterpreter::KnownCall(uint32_t v, const PickleValue& args,
                                         const std::string& name, int depth, json* state) {
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

Status TorchInterpreter::Opaque(const PickleValue& p, const std::string& name, int depth,
                                json* state) {
  OrderedJsonObject object;
  object.Set("__object__",
             At(p.items[0]).kind == PickleKind::kGlobal ? json(At(p.items[0]).text) : json("call"));
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
    const bool slots =
        st.kind == PickleKind::kTuple && st.items.size() == 2 &&
        (At(st.items[0]).kind == PickleKind::kDict || At(st.items[0]).kind == PickleKind::kNone) &&
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

}  // namespace ckptfs
