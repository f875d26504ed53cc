// FrameIndex: where each zstd frame of a compressed shard lies, compressed and decoded.
//
// Read from the zstd seekable format's seek table when the file ends with one (a
// skippable frame with the 0x8F92EAB1 footer), else by walking frame and block headers
// from the start (plain multi-frame or single-frame zstd, as `zstd` writes by default).
// A frame whose header lacks its content size is decoded once, here, to learn it, within
// StreamDecodeLimit (below): a bomb of such frames is refused once it passes that bound.
// Both paths treat the file as untrusted: every size is checked against the file, frames
// must tile the file exactly, and sizes are bounded. A seekable shard packed with
// --byte-group ends its frames with a byte-group record (core/codec/byte_group.h), the
// seek table's last entry: it is parsed and checked here and taken out of `frames`; a
// record anywhere without a seek table is refused. Errors name the file. Pure
// functions over a ByteSource; thread-safe as the source is.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/checked.h"
#include "core/codec/byte_group.h"
#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs {

struct Frame {
  uint64_t compressed_offset = 0;
  uint64_t compressed_size = 0;
  uint64_t decoded_offset = 0;
  uint64_t decoded_size = 0;
  // seekable: low 32 bits of XXH64 of the decoded bytes (of a grouped frame: after
  // un-grouping, see core/codec/byte_group.h)
  std::optional<uint32_t> checksum;
  // Byte grouping: FrameIndex::regions[first_region, first_region + region_count).
  uint32_t first_region = 0;
  uint32_t region_count = 0;
};

struct FrameIndex {
  std::vector<Frame> frames;  // data frames in file order (skippable frames excluded)
  uint64_t decoded_size = 0;
  bool seekable = false;             // came from a seek table
  std::vector<GroupRegion> regions;  // of grouped frames (Frame::first_region)
  uint64_t record_size = 0;          // compressed bytes of the byte-group record (0: none)

  bool grouped() const { return !regions.empty(); }
  std::span<const GroupRegion> RegionsOf(const Frame& f) const {
    return std::span<const GroupRegion>(regions).subspan(f.first_region, f.region_count);
  }

  // Index of the frame holding decoded byte `offset` (offset < decoded_size).
  size_t FrameAt(uint64_t offset) const;
};

// What a decode without a seek table may produce: learning the sizes of the frames whose
// headers lack them (ReadFrameIndex, all such frames of a file together) and decoding a shard
// whole (ZstdSource's spill file). At most kMaxStreamDecodeRatio times the .zst file's size,
// and kMinStreamDecodeLimit whatever its size. Real checkpoints compress far less than
// 128-fold (bf16 weights ~1.2, a half-zero optimizer state a few-fold); a file that does is
// nearly all one byte value, while zstd's RLE blocks reach 32768-fold: an 8 MiB file could
// decode to 256 GiB at mount before anything could be said of it. With the bound such a
// file is refused after at most 1 GiB of decoding (128 times its 8 MiB).
inline constexpr uint64_t kMaxStreamDecodeRatio = 128;
inline constexpr uint64_t kMinStreamDecodeLimit = 256ull << 20;
inline constexpr uint64_t StreamDecodeLimit(uint64_t compressed_size) {
  return compressed_size > kMinStreamDecodeLimit / kMaxStreamDecodeRatio
             ? CheckedMul(compressed_size, kMaxStreamDecodeRatio).value_or(UINT64_MAX)
             : kMinStreamDecodeLimit;
}

inline constexpr uint32_t kSeekableMagic = 0x8F92EAB1;
inline constexpr uint32_t kSeekTableSkippableMagic = 0x184D2A5E;

Result<FrameIndex> ReadFrameIndex(const ByteSource& compressed);

// The trailing skippable frame (header, entries, footer) that makes `frames` seekable.
std::string BuildSeekTable(std::span<const Frame> frames, bool with_checksums);

// Low 32 bits of XXH64(seed 0), as the seekable format stores frame checksums.
uint32_t SeekableChecksum(std::span<const uint8_t> decoded);

}  // namespace ckptfs
