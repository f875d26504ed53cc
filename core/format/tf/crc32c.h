// CRC32C (Castagnoli), as LevelDB and TensorFlow use it, and TF's masking.
//
// TensorBundle stores each tensor's checksum and every index block trailer's checksum
// masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of bytes holding CRCs
// is not degenerate. Crc32c uses the SSE4.2 crc32 instruction when the CPU has it (checked
// once) and a slicing-by-8 table otherwise; both give the same values. Pure functions,
// thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace ckptfs::tf {

// CRC32C of `data`, continuing from `crc` (the CRC of the bytes before; 0 to start).
uint32_t Crc32cExtend(uint32_t crc, std::string_view data);
inline uint32_t Crc32c(std::string_view data) { return Crc32cExtend(0, data); }

inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

// Which implementation Crc32cExtend uses here: "sse4.2" or "table".
const char* Crc32cImplementation();
// The table implementation alone, for tests comparing the two.
uint32_t Crc32cExtendTable(uint32_t crc, std::string_view data);

}  // namespace ckptfs::tf
