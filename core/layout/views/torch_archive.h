// What the two torch.save views (torch_zip.cc, split.cc) write alike: the format version
// record and the CRC-32 of bytes they make.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string_view>

namespace ckptfs {

inline constexpr std::string_view kTorchVersion = "3\n";  // the format version torch 1.13 writes

inline uint32_t Crc32(std::string_view bytes) {
  return static_cast<uint32_t>(crc32(crc32(0, nullptr, 0),
                                     reinterpret_cast<const Bytef*>(bytes.data()),
                                     static_cast<uInt>(bytes.size())));
}

}  // namespace ckptfs
