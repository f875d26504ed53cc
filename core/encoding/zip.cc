#include "core/encoding/zip.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"

namespace ckptfs {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kLocator64Sig = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kPaddingExtraId = 0x4246;  // "FB", the id torch's writer pads with
constexpr uint64_t kLocalSize = 30;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kEnd64Size = 56;
constexpr uint64_t kLocator64Size = 20;
constexpr uint64_t kMaxComment = 0xFFFF;
constexpr uint64_t kMaxDirectory = 512ull << 20;
constexpr uint32_t kMax32 = 0xFFFFFFFF;

uint64_t Le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

Status Bad(const ByteSource& source, const std::string& what) {
  return Status::Corruption(source.Name() + ": not a valid zip archive: " + what);
}

Result<std::string> ReadRange(const ByteSource& source, uint64_t offset, uint64_t length) {
  std::string bytes(length, '\0');
  CKPTFS_RETURN_IF_ERROR(
      source.ReadAt(offset, {reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()}));
  return bytes;
}

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Finds the end record (searching back over a possible comment), and the zip64 one it
// points to when present.
Result<Directory> ReadEnd(const ByteSource& source) {
  const uint64_t size = source.Size();
  if (size < kEndSize) return Bad(source, "shorter than an end record");
  const uint64_t tail_len = std::min(size, kEndSize + kMaxComment + kLocator64Size);
  CKPTFS_ASSIGN_OR_RETURN(std::string tail, ReadRange(source, size - tail_len, tail_len));
  const auto* t = reinterpret_cast<const uint8_t*>(tail.data());
  for (uint64_t at = tail_len - kEndSize + 1; at-- > 0;) {
    if (Le(t + at, 4) != kEndSig || at + kEndSize + Le(t + at + 20, 2) != tail_len) continue;
    const uint8_t* end = t + at;
    if (Le(end + 4, 2) != 0 || Le(end + 6, 2) != 0 || Le(end + 8, 2) != Le(end + 10, 2)) {
      return Bad(source, "multi-disk archives are not supported");
    }
    Directory dir{Le(end + 10, 2), Le(end + 16, 4), Le(end + 12, 4)};
    if (at >= kLocator64Size && Le(end - kLocator64Size, 4) == kLocator64Sig) {
      const uint64_t end64_at = Le(end - kLocator64Size + 8, 8);
      // The zip64 end record lies wholly before its locator.
      if (!RangeWithin(end64_at, kEnd64Size, size - tail_len + at - kLocator64Size)) {
        return Bad(source, "zip64 end record out of place");
      }
      CKPTFS_ASSIGN_OR_RETURN(std::string rec, ReadRange(source, end64_at, kEnd64Size));
      const auto* r = reinterpret_cast<const uint8_t*>(rec.data());
      if (Le(r, 4) != kEnd64Sig) return Bad(source, "bad zip64 end record signature");
      dir = Directory{Le(r + 32, 8), Le(r + 48, 8), Le(r + 40, 8)};
    }
    if (!RangeWithin(dir.offset, dir.size, size)) {
      return Bad(source, "central directory outside the file");
    }
    if (dir.size > kMaxDirectory) return Bad(source, "central directory larger than 512 MiB");
    if (dir.entries > dir.size / kCentralSize) return Bad(source, "entry count exceeds directory");
    return dir;
  }
  return Bad(source, "no end of central directory record (truncated?)");
}

// Applies the zip64 extra field to the 32-bit fields that overflowed.
Status ApplyZip64(const ByteSource& source, std::string_view extra, ZipEntry& e,
                  uint64_t& header_offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(extra.data());
  for (size_t at = 0; at + 4 <= extra.size();) {
    const uint64_t id = Le(p + at, 2), len = Le(p + at + 2, 2);
    if (!RangeWithin(at + 4, len, extra.size()))
      return Bad(source, e.name + ": extra field overruns");
    if (id == kZip64ExtraId) {
      uint64_t* fields[] = {&e.uncompressed_size, &e.size, &header_offset};
      size_t used = 0;
      for (uint64_t* f : fields) {
        if (*f != kMax32) continue;
        if (used + 8 > len) return Bad(source, e.name + ": short zip64 field");
        *f = Le(p + at + 4 + used, 8);
        used += 8;
      }
    }
    at += 4 + len;
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<ZipEntry>> ReadZipDirectory(const ByteSource& source) {
  CKPTFS_ASSIGN_OR_RETURN(Directory dir, ReadEnd(source));
  CKPTFS_ASSIGN_OR_RETURN(std::string cd, ReadRange(source, dir.offset, dir.size));
  const auto* p = reinterpret_cast<const uint8_t*>(cd.data());
  std::vector<ZipEntry> entries;
  entries.reserve(dir.entries);
  uint64_t at = 0;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    if (!RangeWithin(at, kCentralSize, cd.size()) || Le(p + at, 4) != kCentralSig) {
      return Bad(source, "central directory entry " + std::to_string(i) + " is damaged");
    }
    const uint8_t* c = p + at;
    const uint64_t name_len = Le(c + 28, 2), extra_len = Le(c + 30, 2), comment_len = Le(c + 32, 2);
    if (!RangeWithin(at + kCentralSize, name_len + extra_len + comment_len, cd.size())) {
      return Bad(source, "central directory entry " + std::to_string(i) + " overruns");
    }
    ZipEntry e;
    e.name.assign(cd, at + kCentralSize, name_len);
    if ((Le(c + 8, 2) & 0x1) != 0) return Bad(source, e.name + ": encrypted");
    e.method = static_cast<uint16_t>(Le(c + 10, 2));
    e.crc32 = static_cast<uint32_t>(Le(c + 16, 4));
    e.size = Le(c + 20, 4);
    e.uncompressed_size = Le(c + 24, 4);
    uint64_t header = Le(c + 42, 4);
    CKPTFS_RETURN_IF_ERROR(ApplyZip64(
        source, std::string_view(cd).substr(at + kCentralSize + name_len, extra_len), e, header));
    at += kCentralSize + name_len + extra_len + comment_len;

    // The data starts after the local header, whose extra field may differ from the
    // central one (torch pads it to align the data).
    if (!RangeWithin(header, kLocalSize + name_len, source.Size())) {
      return Bad(source, e.name + ": local header outside the file");
    }
    CKPTFS_ASSIGN_OR_RETURN(std::string local, ReadRange(source, header, kLocalSize + name_len));
    const auto* l = reinterpret_cast<const uint8_t*>(local.data());
    if (Le(l, 4) != kLocalSig || Le(l + 26, 2) != name_len ||
        local.compare(kLocalSize, name_len, e.name) != 0) {
      return Bad(source, e.name + ": local header does not match the central directory");
    }
    e.data_offset = header + kLocalSize + name_len + Le(l + 28, 2);
    if (!RangeWithin(e.data_offset, e.size, source.Size())) {
      return Bad(source, e.name + ": data runs past the end of the file (truncated?)");
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

std::string ZipLocalHeader(const ZipRecord& record, uint64_t offset) {
  const bool zip64 = record.size >= kMax32;
  std::string h;
  PutLe(h, kLocalSig, 4);
  PutLe(h, zip64 ? 45 : 20, 2);  // version needed
  PutLe(h, 0, 2);                // flags
  PutLe(h, 0, 2);                // stored
  PutLe(h, 0, 2);                // time
  PutLe(h, 0x21, 2);             // 1980-01-01
  PutLe(h, record.crc32, 4);
  PutLe(h, zip64 ? kMax32 : record.size, 4);
  PutLe(h, zip64 ? kMax32 : record.size, 4);
  const uint64_t zip64_len = zip64 ? 20 : 0;
  // The padding field needs 4 bytes of its own; with fewer to fill, pad a whole block more.
  const uint64_t unpadded = offset + kLocalSize + record.name.size() + zip64_len + 4;
  const uint64_t pad = (kZipAlignment - unpadded % kZipAlignment) % kZipAlignment;
  PutLe(h, record.name.size(), 2);
  PutLe(h, zip64_len + 4 + pad, 2);
  h += record.name;
  if (zip64) {
    PutLe(h, kZip64ExtraId, 2);
    PutLe(h, 16, 2);
    PutLe(h, record.size, 8);
    PutLe(h, record.size, 8);
  }
  PutLe(h, kPaddingExtraId, 2);
  PutLe(h, pad, 2);
  h.append(pad, 'Z');
  return h;
}

void AppendZipCentralEntry(std::string& cd, const ZipRecord& r, uint64_t header_offset) {
  const bool big_size = r.size >= kMax32;
  const bool big_offset = header_offset >= kMax32;
  const uint64_t zip64_len = (big_size ? 16 : 0) + (big_offset ? 8 : 0);
  PutLe(cd, kCentralSig, 4);
  PutLe(cd, zip64_len ? 45 : 20, 2);  // made by
  PutLe(cd, zip64_len ? 45 : 20, 2);  // needed
  PutLe(cd, 0, 2);
  PutLe(cd, 0, 2);
  PutLe(cd, 0, 2);
  PutLe(cd, 0x21, 2);
  PutLe(cd, r.crc32, 4);
  PutLe(cd, big_size ? kMax32 : r.size, 4);
  PutLe(cd, big_size ? kMax32 : r.size, 4);
  PutLe(cd, r.name.size(), 2);
  PutLe(cd, zip64_len ? zip64_len + 4 : 0, 2);
  PutLe(cd, 0, 2);  // comment
  PutLe(cd, 0, 2);  // disk
  PutLe(cd, 0, 2);  // internal attributes
  PutLe(cd, 0, 4);  // external attributes
  PutLe(cd, big_offset ? kMax32 : header_offset, 4);
  cd += r.name;
  if (zip64_len) {
    PutLe(cd, kZip64ExtraId, 2);
    PutLe(cd, zip64_len, 2);
    if (big_size) {
      PutLe(cd, r.size, 8);
      PutLe(cd, r.size, 8);
    }
    if (big_offset) PutLe(cd, header_offset, 8);
  }
}

std::string ZipEndRecords(uint64_t record_count, uint64_t directory_offset, uint64_t cd_size) {
  std::string cd;
  const bool zip64 = record_count >= 0xFFFF || cd_size >= kMax32 || directory_offset >= kMax32;
  if (zip64) {
    const uint64_t end64_at = directory_offset + cd_size;
    PutLe(cd, kEnd64Sig, 4);
    PutLe(cd, kEnd64Size - 12, 8);
    PutLe(cd, 45, 2);
    PutLe(cd, 45, 2);
    PutLe(cd, 0, 4);
    PutLe(cd, 0, 4);
    PutLe(cd, record_count, 8);
    PutLe(cd, record_count, 8);
    PutLe(cd, cd_size, 8);
    PutLe(cd, directory_offset, 8);
    PutLe(cd, kLocator64Sig, 4);
    PutLe(cd, 0, 4);
    PutLe(cd, end64_at, 8);
    PutLe(cd, 1, 4);
  }
  PutLe(cd, kEndSig, 4);
  PutLe(cd, 0, 2);
  PutLe(cd, 0, 2);
  PutLe(cd, zip64 ? 0xFFFF : record_count, 2);
  PutLe(cd, zip64 ? 0xFFFF : record_count, 2);
  PutLe(cd, zip64 ? kMax32 : cd_size, 4);
  PutLe(cd, zip64 ? kMax32 : directory_offset, 4);
  PutLe(cd, 0, 2);
  return cd;
}

std::string ZipCentralDirectory(std::span<const ZipRecord> records,
                                std::span<const uint64_t> header_offsets,
                                uint64_t directory_offset) {
  std::string cd;
  for (size_t i = 0; i < records.size(); ++i)
    AppendZipCentralEntry(cd, records[i], header_offsets[i]);
  return cd + ZipEndRecords(records.size(), directory_offset, cd.size());
}

}  // namespace ckptfs
