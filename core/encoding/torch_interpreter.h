// TorchInterpreter: the unpickled data.pkl of a torch.save file made into a TorchFile, its
// tensors viewing the zip's stored records and everything else kept as JSON state.
// torch_file.h states what is read, how it is named and what is refused; this is internal
// to core/encoding (torch_file.cc reads the archive and runs it). Its parts, by what they
// read:
//   torch_interpreter.cc  the walk of the tree: containers and values, rebuild calls,
//                         storages and persistent ids, the plain forms of known calls,
//                         opaque objects
//   torch_dtensor.cc      DTensors: their globals, device mesh, placements, shard order
//   torch_numpy.cc        numpy arrays served as tensors (and their latin-1 data),
//                         numpy dtypes and scalars as values
// Every count, offset and length from the pickle is checked before use; each refusal is
// one line naming the file.
//
// Thread safety: none; one per file, Run once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/encoding/metadata_budget.h"
#include "core/encoding/pickle.h"
#include "core/encoding/torch_file.h"
#include "core/encoding/zip.h"

namespace ckptfs {

// The pickle's record in the archive: ARCHIVE/data.pkl.
inline constexpr std::string_view kTorchPickleRecord = "data.pkl";

// The storage classes torch.load knows, each with the dtype it holds.
struct TorchStorageClassEntry {
  std::string_view name;
  Dtype dtype;
};
inline constexpr TorchStorageClassEntry kTorchStorageClasses[] = {
    {"DoubleStorage", Dtype::kF64},       {"FloatStorage", Dtype::kF32},
    {"HalfStorage", Dtype::kF16},         {"BFloat16Storage", Dtype::kBF16},
    {"LongStorage", Dtype::kI64},         {"IntStorage", Dtype::kI32},
    {"ShortStorage", Dtype::kI16},        {"CharStorage", Dtype::kI8},
    {"ByteStorage", Dtype::kU8},          {"BoolStorage", Dtype::kBool},
    {"ComplexFloatStorage", Dtype::kC64}, {"ComplexDoubleStorage", Dtype::kC128},
};

// Whether global `g` is a DTensor class (torch.distributed.tensor's or, before 2.5,
// torch.distributed._tensor's).
bool IsDTensorClass(std::string_view g);

// Whether global `fn` is numpy's array reconstructor (numpy.core or numpy._core).
bool IsNumpyReconstruct(std::string_view fn);

// A numpy scalar's value where JSON has one (little-endian numbers, bool), else
// {"numpy_scalar": dtype}.
nlohmann::ordered_json NumpyScalar(const std::string& dtype, const std::string& bytes);

class TorchInterpreter {
 public:
  // `entries`: the zip's records, named ARCHIVE/... with `prefix` "ARCHIVE/"; the pickle's
  // bytes lie at `pickle_offset` in `source`, `pickle_size` long. `tree` and `entries` must
  // outlive the interpreter.
  TorchInterpreter(const ByteSource& source, const PickleTree& tree,
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

  // The TorchFile the tree holds: tensors in pickle order, the rest as state_json.
  Result<TorchFile> Run();

 private:
  using json = nlohmann::ordered_json;

  // --- Reading values (torch_interpreter.cc) ---
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
  Result<uint64_t> NonNegative(uint32_t v, const std::string& what) const;
  // A tuple or list of non-negative ints, or torch.Size of one.
  Result<std::vector<uint64_t>> Sizes(uint32_t v, const std::string& what) const;
  // The value under string key `key` of dict `d`, or nullopt.
  std::optional<uint32_t> DictItem(const PickleValue& d, std::string_view key) const;
  // The value under `key` in an object's state: a dict, or either dict of a (dict or None,
  // slots dict) pair.
  std::optional<uint32_t> StateItem(uint32_t state, std::string_view key) const;
  // The attribute `key` of `object`, from the state BUILD gave it.
  std::optional<uint32_t> Attribute(uint32_t object, std::string_view key) const;
  // A call of global `cls` (one of `classes`), or nullptr.
  const PickleValue* CallOf(uint32_t v, std::initializer_list<std::string_view> classes) const;
  // A dict key as the text a tensor name joins.
  Result<std::string> KeyText(uint32_t v) const;

  // --- Tensors and storages (torch_interpreter.cc) ---
  // Registers the storage a persistent id names, checking it against its record.
  Result<uint32_t> Storage(uint32_t v, const std::string& tensor);
  // Appends `storage` to the file and notes its key; its index.
  uint32_t AddStorage(TorchStorage storage);
  // Refuses a name with a NUL byte: it would cut the name short in every path and listing,
  // so two tensors could meet.
  Status CheckTensorName(const std::string& name) const;
  // A tensor named `name`, placed under the root key being walked (TorchTensor::top_key_size).
  TorchTensor NewTensor(const std::string& name) const;
  // _rebuild_tensor(_v2)(storage, storage_offset, size, stride, ...).
  Status AddTensor(const PickleValue& args, const std::string& name);
  // Adds the tensor `v` builds, if it is a tensor; *is_tensor says whether it was.
  Status MaybeTensor(uint32_t v, const std::string& name, int depth, bool* is_tensor);

  // --- The walk (torch_interpreter.cc) ---
  // Walks value `v` named `name`: tensors are collected, anything else becomes *state
  // (*has_state false when `v` held only tensors).
  Status Visit(uint32_t v, const std::string& name, int depth, json* state, bool* has_state);
  // The calls whose value JSON has a plain form (docs/formats.md); false for any other,
  // which is then an opaque value. Nothing is imported or run: arguments and BUILD states
  // are read as values.
  Result<bool> KnownCall(uint32_t v, const PickleValue& args, const std::string& name, int depth,
                         json* state);
  // Any other call: {"__object__": "module.name", "args": [...], "kwargs": {...},
  // "state": ..., "items": ...}, each key only when there is something. Tensors inside are
  // named as if the object were what it holds: args by position, kwargs, a dict state (and
  // both dicts of a (dict, slots) state) and dict items by key, list items by position;
  // any other state under "state".
  Status Opaque(const PickleValue& p, const std::string& name, int depth, json* state);

  // --- DTensors (torch_dtensor.cc) ---
  Status BadDTensor(const std::string& name, const std::string& what) const;
  Status UnsupportedDTensor(const std::string& name, const std::string& what) const;
  // Every global reachable from `v` is one a DTensor is made of. Values already checked
  // (a mesh every DTensor shares) are not walked again, so the whole file costs one walk.
  Status CheckDTensorGlobals(uint32_t v, const std::string& name);
  // Sizes, refused as the DTensor's.
  Result<std::vector<uint64_t>> DTensorInts(uint32_t v, const std::string& name,
                                            const std::string& what) const;
  // The mesh's shape and this rank's coordinates on it.
  Status ReadDeviceMesh(uint32_t mesh, const std::string& name, TorchPiece* piece) const;
  // Placements: Shard(d) gives d, Replicate() -1; anything else refused.
  Status ReadPlacements(uint32_t v, const std::string& name, TorchPiece* piece) const;
  // A recorded shard order must be the default one (each tensor dimension's mesh
  // dimensions left to right), the only one compute_local_shape_and_global_offset follows.
  Status CheckShardOrder(uint32_t v, const std::string& name, const TorchPiece& piece) const;
  // _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, wrapper args, state).
  Status AddDTensor(const PickleValue& args, const std::string& name, int depth);

  // --- numpy (torch_numpy.cc) ---
  // The latin-1 text of protocol 2's _codecs.encode(str, 'latin1') call `v`: its str
  // argument (UTF-8), or nullptr when `v` is no such call.
  const std::string* Latin1Text(uint32_t v) const;
  // The bytes a protocol 2 pickle writes as _codecs.encode(str, 'latin1'), or a bytes value.
  std::optional<std::string> BytesOf(uint32_t v) const;
  // A numpy dtype call, numpy.dtype('u4', False, True) with BUILD (3, '<', ...): "<u4".
  std::optional<std::string> NumpyDtype(uint32_t v) const;
  // numpy's _reconstruct(ndarray, (0,), b'b') with BUILD (version, shape, dtype,
  // is_fortran, rawdata): a tensor when its dtype is one ckptfs has. Bytes verbatim in the
  // pickle (protocol >= 3) are served from there; protocol 2's latin-1 text
  // (_codecs.encode(str, 'latin1'), or bytes() when empty) and escaped bytes are decoded
  // once, here, into TorchFile::decoded. Any other array (object dtype, big-endian) stays a
  // value (KnownCall).
  Status MaybeNumpyTensor(const PickleValue& call, const std::string& name, bool* is_tensor);
  // The (offset, size) in TorchFile::decoded of the data of pickle value `raw_value`, an
  // array's rawdata that is not verbatim in the pickle: its `latin1` text decoded, the
  // bytes of an `escaped` string, or nothing (bytes()). Decoded and charged to the budget
  // on the first call for a value.
  Result<std::pair<uint64_t, uint64_t>> DecodeOnce(uint32_t raw_value, const std::string* latin1,
                                                   bool escaped, const std::string& name);

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

}  // namespace ckptfs
