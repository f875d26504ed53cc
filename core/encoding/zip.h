// zip: the subset of the zip format torch.save uses, read strictly and written by layout.
//
// Reading: the end of central directory record (zip64 when present), then every central
// directory entry, then each entry's local header to find where its data starts. Only
// what a torch checkpoint can hold is accepted: no encryption, no multi-disk archives,
// sizes and offsets inside the file (checked arithmetic), the local header's name equal
// to the central one. Compressed records are reported, not refused: the caller decides
// (torch only ever stores).
//
// Writing: headers for records laid end to end, each record's data starting on a
// 64-byte boundary (as torch's writer does, so loaders may map storages in place), with
// zip64 fields only where a size or offset needs them. Records are always stored; the
// data itself is not part of the output, so the caller can place it as extents.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs {

inline constexpr uint64_t kZipAlignment = 64;

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // first byte of the record's data in the archive
  uint64_t size = 0;         // compressed (stored) size
  uint64_t uncompressed_size = 0;
  uint32_t crc32 = 0;
  uint16_t method = 0;  // 0 stored, 8 deflate, ...
};

// Reads the directory of the zip archive in `source`, entries in central-directory order.
// Corruption (naming source.Name()) for anything malformed or pointing outside the file.
Result<std::vector<ZipEntry>> ReadZipDirectory(const ByteSource& source);

struct ZipRecord {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32 = 0;  // 0 when unknown: torch ignores it, zip testers will complain
};

// The local header of `record` when it starts at archive offset `offset`, padded with an
// extra field so the data that follows starts at a multiple of kZipAlignment.
std::string ZipLocalHeader(const ZipRecord& record, uint64_t offset);

// The central directory and end records for `records`, whose local headers start at
// `header_offsets`, when the directory itself starts at `directory_offset`.
std::string ZipCentralDirectory(std::span<const ZipRecord> records,
                                std::span<const uint64_t> header_offsets,
                                uint64_t directory_offset);

// The same in pieces, for a writer that makes the directory a part at a time: the entry
// of one record, appended to `cd`, and the end records after `cd_size` bytes of entries.
// ZipCentralDirectory is the entries in order followed by ZipEndRecords.
void AppendZipCentralEntry(std::string& cd, const ZipRecord& record, uint64_t header_offset);
std::string ZipEndRecords(uint64_t record_count, uint64_t directory_offset, uint64_t cd_size);

}  // namespace ckptfs
