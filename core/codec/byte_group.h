// Byte grouping: the reversible transform `ckptfs pack --byte-group` applies to the tensor
// bytes of each frame before compressing it, and that ZstdSource undoes after decoding.
//
// A region of a frame holds whole elements of `element_size` bytes (2, 4 or 8). Grouped, it
// holds all the elements' byte 0s, then all their byte 1s, and so on: the sign/exponent
// bytes of BF16 weights end up next to each other, apart from the near-random mantissa
// bytes, and zstd finds far more to compress. Everything of a frame outside its regions
// (safetensors headers, one-byte dtypes, the bytes of an element cut by a frame boundary)
// is stored as it is.
//
// The regions of every frame are recorded in the shard itself, in one skippable frame
// (magic kByteGroupMagic) placed just before the seek table and listed in it as an entry
// of 0 decoded bytes, so that the seekable format stays standard and `zstd -d` skips it
// (and outputs the grouped bytes). Its payload, little-endian:
//   u32 version (1), u32 number of grouped frames,
//   per grouped frame, in increasing frame order: u32 frame index, u32 region count,
//     per region, in increasing offset order: u32 offset in the frame, u32 length,
//     u8 element size.
// The seek table's per-frame checksum covers the frame's ORIGINAL bytes (after
// un-grouping: what the mount serves), not what `zstd -d` outputs. So a record that lies
// (a region over bytes that were never grouped, a wrong element size) fails the checksum
// instead of serving wrong bytes, and a reader that ignores the record (an older ckptfs, the
// contrib seekable decoder) reports a checksum mismatch on grouped frames rather than
// handing out grouped bytes as the shard's. The checksums are therefore required: a grouped
// frame in a seek table without them is refused at open.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace ckptfs {

struct FrameIndex;

// A zstd skippable-frame magic (0x184D2A50..5F): 0x..5E is the seek table's.
inline constexpr uint32_t kByteGroupMagic = 0x184D2A5B;
inline constexpr uint32_t kByteGroupVersion = 1;
// Bytes of one region in the record.
inline constexpr uint32_t kByteGroupRegionBytes = 9;

// One grouped region of a frame (decoded coordinates, relative to the frame's start).
struct GroupRegion {
  uint32_t offset = 0;
  uint32_t length = 0;  // a multiple of element_size
  uint8_t element_size = 0;
  bool operator==(const GroupRegion&) const = default;
};

// A run of elements in a file being packed (absolute offsets in the decoded file).
struct ElementRun {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t element_size = 0;
};

// The regions of the decoded frame [frame_begin, frame_end) that `runs` (sorted by offset,
// not overlapping) cover with whole elements, two or more per region; elements are counted
// from each run's start, so an element the frame boundary cuts is left out.
std::vector<GroupRegion> RegionsInFrame(std::span<const ElementRun> runs, uint64_t frame_begin,
                                        uint64_t frame_end);

// Groups (pack) or un-groups (read) `frame` in place, region by region. The regions must be
// valid for the frame (ParseByteGroupRecord checks that). `scratch` is grown as needed to the
// largest region and reused.
void GroupFrame(std::span<uint8_t> frame, std::span<const GroupRegion> regions,
                std::vector<uint8_t>& scratch);
void UngroupFrame(std::span<uint8_t> frame, std::span<const GroupRegion> regions,
                  std::vector<uint8_t>& scratch);

// The whole skippable frame (header and payload) recording `regions[i]` for each frame i
// that has any; empty when no frame is grouped.
std::string BuildByteGroupRecord(std::span<const std::vector<GroupRegion>> regions);

// Parses the payload of a record (after the 8-byte skippable header) of shard `name`,
// checking it against `index`'s data frames, and attaches the regions to them
// (Frame::first_region/region_count, FrameIndex::regions). Corruption naming the shard and,
// where one is to blame, the frame: a frame that does not exist or comes twice or out of
// order, a grouped frame without a checksum, a region past the frame or overlapping the
// previous one, an element size not 2, 4 or 8, a length not a multiple of it or zero, a
// truncated or overlong payload, an unknown version.
Status ParseByteGroupRecord(std::span<const uint8_t> payload, const std::string& name,
                            FrameIndex& index);

}  // namespace ckptfs
