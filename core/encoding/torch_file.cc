// Reading a torch.save file (torch_file.h): the zip archive around the pickle (its magic,
// the ARCHIVE/ prefix, data.pkl), handed to TorchInterpreter (torch_interpreter.h) to
// become tensors; and the small shape and storage-class helpers the readers and writers share.
#include "core/encoding/torch_file.h"

#include <algorithm>
#include <cstring>

#include "core/encoding/pickle.h"
#include "core/encoding/torch_interpreter.h"
#include "core/encoding/zip.h"

namespace ckptfs {
namespace {

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
    if (slash != std::string::npos && e.name.substr(slash + 1) == kTorchPickleRecord) {
      if (pickle) return Status::Corruption(source.Name() + ": two data.pkl records");
      pickle = &e;
    }
  }
  if (!pickle) return Status::Corruption(source.Name() + ": no data.pkl record in the zip");
  out.prefix = pickle->name.substr(0, pickle->name.size() - kTorchPickleRecord.size());
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
  for (const TorchStorageClassEntry& c : kTorchStorageClasses) {
    if (c.dtype == dtype) return c.name;
  }
  return std::nullopt;
}

Result<TorchFile> ReadTorchFile(const ByteSource& source, PickleGlobals globals) {
  CKPTFS_ASSIGN_OR_RETURN(TorchArchive archive, ReadTorchArchive(source, globals));
  return TorchInterpreter(source, archive.tree, archive.entries, archive.prefix,
                          archive.pickle_offset, archive.pickle_size, globals)
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

}  // namespace ckptfs
