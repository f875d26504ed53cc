// torch_file: checkpoints written by torch.save (PyTorch >= 1.6 zip format), read into
// storages and tensor views without running any of their code; and the pickle of a
// merged checkpoint that torch.load reads back.
//
// A torch.save file is a zip of stored records: ARCHIVE/data.pkl (the pickled object),
// ARCHIVE/data/KEY (the raw bytes of each storage), ARCHIVE/version. The pickle is parsed
// by the restricted unpickler (pickle.h); tensors are the calls torch's weights_only
// loader would make (_rebuild_tensor_v2, _rebuild_parameter, Parameter, ...). Nested
// containers name their tensors by joining keys with '.': {"model": {"fc.weight": t}}
// gives "model.fc.weight", list items are numbered. Everything that is not a tensor is
// kept as JSON (`state_json`) mirroring the containers, tensors left out.
//
// Any Python value. A call of a global ckptfs has no plain form for (argparse.Namespace,
// pathlib.PosixPath, a user's class, an OrderedDict with arguments) is an opaque value,
// shown as {"__object__": "module.name", "args": [...], "kwargs": {...}, "state": ...,
// "items": ...} (each key only when present; "state" is what BUILD set, a (dict, slots)
// pair as a two-item list; "items" what SETITEMS/APPENDS added to a dict or list
// subclass). Tensors inside it are served, named as if the object were what it holds:
// args by position, kwargs, a dict state (both dicts of a slots pair) and dict items by
// key, list items by position, any other state under "state"; so an object with state
// {"w": tensor} under key "extra" gives tensor "extra.w". Plain forms: a set or frozenset
// is a list, bytes (and protocol 2's _codecs.encode(str, 'latin1')) a string (invalid
// UTF-8 replaced), a numpy scalar its value (little-endian numbers and bool; else
// {"numpy_scalar": dtype}), a numpy dtype its descriptor ("<f8"), ZeroStageEnum and
// DeepSpeed's getattr(ZeroStageEnum, 'name') the stage number.
//
// numpy arrays (numpy.core / numpy._core .multiarray._reconstruct with BUILD state
// (version, shape, dtype, is_fortran, rawdata)) are tensors when their dtype is one ckptfs
// has (little-endian or byte-sized bool, ints, uints, floats) and rawdata lies verbatim in
// the pickle (BINBYTES and friends, protocol >= 3): the storage is that byte range of
// data.pkl inside the zip, nothing copied; a Fortran-order array gets column-major
// strides. Protocol 2 (torch.save's default) has no bytes type and writes rawdata as
// _codecs.encode(str, 'latin1'): those bytes are decoded once, here, strictly (every code
// point below 256, else the file is refused naming the array), end to end into
// TorchFile::decoded, and the storage is a range of that (TorchStorage::decoded); its size
// is at most the pickle's (capped by kMaxTorchPickle) and is charged to the pickle's
// MetadataBudget. Others (object or string dtypes, big-endian) stay
// values: {"__object__": "numpy.ndarray", "dtype": "<u4", "shape": [624]}. With
// PickleGlobals::kDeepSpeed every array stays such a value (a rank file's tensors are its
// model's). Byte counts that disagree with shape and dtype refuse the file.
//
// DTensors (torch.distributed.tensor; FSDP2 trainers torch.save them per rank):
// _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, (DTensor, dtype, size, ...),
// {"_local_tensor": t, "_spec": DTensorSpec}) is one tensor, named as the DTensor lies,
// viewing the local tensor's storage, with its place in the whole in TorchTensor::piece
// (TorchPiece below). PyTorch 2.5+ (torch.distributed.tensor, DeviceMesh with a _MeshLayout
// from 2.9) and 2.2-2.4 (torch.distributed._tensor, a DeviceMesh holding its `mesh` tensor)
// are read. Inside a DTensor only the globals it is made of are accepted (its classes,
// DeviceMesh, _MeshLayout, Shard, Replicate, ShardOrderEntry, TensorMeta, torch.Size,
// dtypes, devices, layouts, storages): any other refuses the file naming it.
//
// Untrusted input: every storage a tensor uses must be a stored record of exactly the
// size its pickle claims, and every tensor's shape, strides and offset must stay inside
// its storage (checked arithmetic). Errors name the file and the reason; the pre-1.6
// formats (tar, raw pickle) are refused by name.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/encoding/dtype.h"
#include "core/encoding/pickle.h"
#include "core/encoding/weights_only.h"
#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs {

inline constexpr uint64_t kMaxTorchPickle = 64ull << 20;

struct TorchStorage {
  std::string key;  // the record is ARCHIVE/data/KEY; "data.pkl@N:DTYPE" for a numpy array's data
  Dtype dtype;
  uint64_t data_offset = 0;  // in the file
  uint64_t size = 0;         // bytes
  uint32_t crc32 = 0;        // as the zip directory records it
  bool has_crc32 = true;     // false for bytes inside data.pkl (no record of their own)
  // data_offset is in TorchFile::decoded, not in the file: a protocol 2 numpy array's data.
  bool decoded = false;
};

// Where a tensor that is one rank's piece of a distributed tensor (a DTensor of
// torch.distributed.tensor, as FSDP2 trainers torch.save per rank) lies in the whole. The
// TorchTensor holding it is the local tensor (its storage, view and shape); this is the
// rest of what the DTensor recorded, reduced to a box:
//   - global_shape: the whole tensor's shape (the DTensor's size, equal to its
//     tensor_meta.shape);
//   - offset, size: the box, per dimension of global_shape. `size` equals the TorchTensor's
//     shape. Worked out from the placements, the mesh shape and this rank's coordinates as
//     torch's compute_local_shape_and_global_offset does: mesh dimensions in order, a
//     Shard(d) splits what is left of dimension d as torch.chunk does (ceil(n / m) per
//     piece, the last ones shorter or empty), nested within earlier splits of d; a
//     Replicate() leaves the box as it is. A piece empty along a dimension has offset
//     global_shape[d] there (torch's convention since 2.9; its elements are none anyway);
//   - mesh_shape, coordinate: the device mesh's size per mesh dimension and this rank's
//     index on each; shard_dims: per mesh dimension, the tensor dimension it shards, or
//     -1 for Replicate() (the same box is then held by every rank along that mesh
//     dimension); rank: the global rank the mesh recorded, where it recorded one (2.9+).
// Only Shard and Replicate are read; Partial, _StridedShard, a shard order other than the
// default, a mesh this rank is not in, or a local shape other than the box refuse the
// file (Unsupported / Corruption, one line naming the file and tensor).
struct TorchPiece {
  std::vector<uint64_t> global_shape;
  std::vector<uint64_t> offset;
  std::vector<uint64_t> size;
  std::vector<uint64_t> mesh_shape;
  std::vector<uint64_t> coordinate;
  std::vector<int32_t> shard_dims;
  std::optional<uint64_t> rank;
};

struct TorchTensor {
  std::string name;
  uint32_t storage = 0;         // index into TorchFile::storages
  uint64_t storage_offset = 0;  // elements
  std::vector<uint64_t> shape;
  std::vector<uint64_t> stride;  // elements, one per dimension
  // When the pickled root is a dict and this tensor lies inside a container that is one
  // of its values: the length of that root key (`name` starts with it and a '.'), and
  // whether the container is a dict. 0 for a tensor that is a root value itself, so a
  // flat state dict's "model.encoder.weight" has none: decided on structure, not dots.
  uint32_t top_key_size = 0;
  bool top_is_dict = false;
  // Set for the local tensor of a DTensor: its place in the whole (TorchPiece above). The
  // tensor is named by where the DTensor lies (its dict key); nothing of the DTensor's
  // mesh or spec becomes a tensor or state.
  std::optional<TorchPiece> piece;
};

struct TorchFile {
  std::vector<TorchStorage> storages;
  std::vector<TorchTensor> tensors;  // in pickle order
  std::string state_json;            // non-tensor values as a JSON value; empty if none
  // The data of protocol 2 numpy arrays, decoded from latin-1 text, end to end (storages
  // with `decoded` set name ranges of it); empty if none.
  std::string decoded;
  // The pickled root itself is a tensor (torch.save(tensor), or of a Parameter): then
  // `tensors` holds that one tensor, named "tensor".
  bool root_is_tensor = false;
  // Whether torch.load(FILE, weights_only=True) would accept data.pkl's globals and
  // opcodes (pickle_globals.h says what it covers).
  WeightsOnlyVerdict weights_only;
};

// Reads the directory and pickle of the torch.save file in `source`. With
// PickleGlobals::kDeepSpeed numpy arrays stay values (above) and a non-zip file is refused
// as DeepSpeed's legacy serialization.
Result<TorchFile> ReadTorchFile(const ByteSource& source,
                                PickleGlobals globals = PickleGlobals::kTorch);

// The strings of a torch.save file whose pickled root is a list of str (a per-key split
// checkpoint's map.pt), in order. Corruption naming the file if the root is anything else
// or an item is not a str; the zip and pickle checks of ReadTorchFile apply.
Result<std::vector<std::string>> ReadTorchStringList(const ByteSource& source);

// Sets piece.offset and piece.size, the box of TorchPiece, from its global_shape,
// mesh_shape, coordinate and shard_dims: what ReadTorchFile records, and what a reader of
// one rank's file can work out for any other coordinate. Requires what ReadTorchFile checks:
// one coordinate and one shard dim per mesh dimension, each coordinate below its mesh
// dimension's size, each shard dim -1 or a dimension of global_shape.
void ComputeTorchPieceBox(TorchPiece& piece);

// Whether a tensor with this shape and these strides covers one dense row-major range.
bool IsRowMajor(std::span<const uint64_t> shape, std::span<const uint64_t> stride);

// Row-major strides of `shape`.
std::vector<uint64_t> RowMajorStrides(std::span<const uint64_t> shape);

// The storage class torch.load knows for `dtype` ("FloatStorage"), or nullopt where
// PyTorch 1.13 has none (U16, U32, U64, F8 variants).
std::optional<std::string_view> TorchStorageClass(Dtype dtype);

// One entry of a merged checkpoint's pickle: a tensor viewing storage record `key`.
struct TorchPickleEntry {
  std::string_view name;
  Dtype dtype;
  uint64_t key;             // record ARCHIVE/data/<key>
  uint64_t storage_numel;   // elements of the storage
  uint64_t storage_offset;  // elements
  std::span<const uint64_t> shape;
  std::span<const uint64_t> stride;
};

// data.pkl for an OrderedDict of `entries` in order, using only what torch.save writes
// (protocol 2) so torch.load reads it with and without weights_only. Every entry's dtype
// must have a TorchStorageClass.
std::string BuildTorchPickle(std::span<const TorchPickleEntry> entries);

// data.pkl of torch.save(tensor): `entry` (its name unused) as the pickled root, what
// torch.load returns as a bare tensor, with and without weights_only. The dtype must have
// a TorchStorageClass. TorchTensorPickleSize is its size, counted without making it.
std::string BuildTorchTensorPickle(const TorchPickleEntry& entry);
uint64_t TorchTensorPickleSize(const TorchPickleEntry& entry);

// data.pkl of torch.save(list of str): `items` in order.
std::string BuildTorchStringListPickle(std::span<const std::string_view> items);

// BuildTorchPickle one entry at a time, so a caller need not hold every entry (and its
// strides) at once. With `count_only`, only the size is kept: what a mount needs to lay
// out pytorch_model.bin before anyone reads it. Not thread-safe.
class TorchPickleBuilder {
 public:
  explicit TorchPickleBuilder(bool count_only = false);
  ~TorchPickleBuilder();
  TorchPickleBuilder(const TorchPickleBuilder&) = delete;
  TorchPickleBuilder& operator=(const TorchPickleBuilder&) = delete;

  void Add(const TorchPickleEntry& entry);
  // Ends the pickle; returns its size in bytes. Call once, after the last Add.
  uint64_t Finish();
  // The bytes, after Finish (empty when counting only).
  std::string Take();

 private:
  enum Slot : uint32_t { kOrderedDict, kRebuild, kStorage, kCpu, kFirstClass };
  class Writer;
  std::unique_ptr<Writer> writer_;
  std::unordered_map<std::string_view, uint32_t> class_slots_;
  uint64_t count_ = 0;
};

}  // namespace ckptfs
