// Fuzz target: any bytes as a torch.save file must be read or refused, never crash, and
// every accepted tensor must lie inside a storage record inside the file. The same bytes
// as a split checkpoint's map.pt (ReadTorchStringList) are read or refused too, and a
// root tensor is the file's one tensor.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/encoding/torch_file.h"
#include "core/source/byte_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckptfs::MemorySource source("fuzz.bin", std::string(reinterpret_cast<const char*>(data), size));
  auto keys = ckptfs::ReadTorchStringList(source);
  if (keys.ok() && keys->size() > size) std::abort();  // each str costs bytes of the pickle
  auto file = ckptfs::ReadTorchFile(source);
  if (!file.ok()) return 0;
  if (file->root_is_tensor && file->tensors.size() != 1) std::abort();
  for (const ckptfs::TorchStorage& s : file->storages) {
    if (s.data_offset > size || s.size > size - s.data_offset) std::abort();
    if (s.size % ckptfs::DtypeSize(s.dtype) != 0) std::abort();
  }
  for (const ckptfs::TorchTensor& t : file->tensors) {
    if (t.storage >= file->storages.size() || t.shape.size() != t.stride.size()) std::abort();
  }
  return 0;
}
