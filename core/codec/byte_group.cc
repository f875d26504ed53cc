#include "core/codec/byte_group.h"

#include <algorithm>
#include <cstring>

#include "core/codec/frame_index.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckptfs {
namespace {

// out[b * n + k] = in[k * E + b]: plane b holds byte b of every element.
template <size_t E>
void Group(const uint8_t* in, uint8_t* out, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    for (size_t b = 0; b < E; ++b) out[b * n + k] = in[k * E + b];
  }
}

// out[k * E + b] = in[b * n + k]. The read path runs this on every grouped frame, so the
// common element sizes interleave 16 elements at a time where SSE2 is there (x86-64 always).
template <size_t E>
void Ungroup(const uint8_t* in, uint8_t* out, size_t n) {
  size_t k = 0;
#if defined(__SSE2__)
  if constexpr (E == 2) {
    for (; k + 16 <= n; k += 16) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + n + k));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * k), _mm_unpacklo_epi8(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * k + 16), _mm_unpackhi_epi8(lo, hi));
    }
  } else if constexpr (E == 4) {
    for (; k + 16 <= n; k += 16) {
      const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k));
      const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + n + k));
      const __m128i b2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * n + k));
      const __m128i b3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * n + k));
      const __m128i p01lo = _mm_unpacklo_epi8(b0, b1), p01hi = _mm_unpackhi_epi8(b0, b1);
      const __m128i p23lo = _mm_unpacklo_epi8(b2, b3), p23hi = _mm_unpackhi_epi8(b2, b3);
      auto* o = reinterpret_cast<__m128i*>(out + 4 * k);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi16(p01lo, p23lo));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(p01lo, p23lo));
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(p01hi, p23hi));
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(p01hi, p23hi));
    }
  }
#endif
  for (; k < n; ++k) {
    for (size_t b = 0; b < E; ++b) out[k * E + b] = in[b * n + k];
  }
}

template <bool kGroup>
void Transform(std::span<uint8_t> frame, std::span<const GroupRegion> regions,
               std::vector<uint8_t>& scratch) {
  for (const GroupRegion& r : regions) {
    if (scratch.size() < r.length) scratch.resize(r.length);
    uint8_t* bytes = frame.data() + r.offset;
    std::memcpy(scratch.data(), bytes, r.length);
    const size_t n = r.length / r.element_size;
    switch (r.element_size) {
      case 2:
        kGroup ? Group<2>(scratch.data(), bytes, n) : Ungroup<2>(scratch.data(), bytes, n);
        break;
      case 4:
        kGroup ? Group<4>(scratch.data(), bytes, n) : Ungroup<4>(scratch.data(), bytes, n);
        break;
      case 8:
        kGroup ? Group<8>(scratch.data(), bytes, n) : Ungroup<8>(scratch.data(), bytes, n);
        break;
      default:
        break;  // ParseByteGroupRecord refuses any other size
    }
  }
}

void AppendLe32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads the payload front to back; every read is bounds-checked.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool Read32(uint32_t& v) {
    if (bytes_.size() - pos_ < 4) return false;
    const uint8_t* p = bytes_.data() + pos_;
    v = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
        static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    pos_ += 4;
    return true;
  }
  bool Read8(uint8_t& v) {
    if (pos_ == bytes_.size()) return false;
    v = bytes_[pos_++];
    return true;
  }
  size_t left() const { return bytes_.size() - pos_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<GroupRegion> RegionsInFrame(std::span<const ElementRun> runs, uint64_t frame_begin,
                                        uint64_t frame_end) {
  std::vector<GroupRegion> out;
  auto it = std::upper_bound(runs.begin(), runs.end(), frame_begin,
                             [](uint64_t at, const ElementRun& r) { return at < r.offset; });
  if (it != runs.begin()) --it;
  for (; it != runs.end() && it->offset < frame_end; ++it) {
    const uint64_t e = it->element_size;
    if (e < 2) continue;
    const uint64_t run_end = it->offset + it->length / e * e;
    const uint64_t lo = std::max(it->offset, frame_begin), hi = std::min(run_end, frame_end);
    if (lo >= hi) continue;
    // Whole elements only, counted from the run's start.
    const uint64_t first = it->offset + (lo - it->offset + e - 1) / e * e;
    const uint64_t last = it->offset + (hi - it->offset) / e * e;
    if (last < first + 2 * e) continue;  // one element grouped is itself
    out.push_back({static_cast<uint32_t>(first - frame_begin), static_cast<uint32_t>(last - first),
                   static_cast<uint8_t>(e)});
  }
  return out;
}

void GroupFrame(std::span<uint8_t> frame, std::span<const GroupRegion> regions,
                std::vector<uint8_t>& scratch) {
  Transform<true>(frame, regions, scratch);
}

void UngroupFrame(std::span<uint8_t> frame, std::span<const GroupRegion> regions,
                  std::vector<uint8_t>& scratch) {
  Transform<false>(frame, regions, scratch);
}

std::string BuildByteGroupRecord(std::span<const std::vector<GroupRegion>> regions) {
  std::string payload;
  uint32_t grouped = 0;
  for (const auto& r : regions) grouped += !r.empty();
  if (grouped == 0) return {};
  AppendLe32(payload, kByteGroupVersion);
  AppendLe32(payload, grouped);
  for (size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].empty()) continue;
    AppendLe32(payload, static_cast<uint32_t>(i));
    AppendLe32(payload, static_cast<uint32_t>(regions[i].size()));
    for (const GroupRegion& r : regions[i]) {
      AppendLe32(payload, r.offset);
      AppendLe32(payload, r.length);
      payload.push_back(static_cast<char>(r.element_size));
    }
  }
  std::string out;
  AppendLe32(out, kByteGroupMagic);
  AppendLe32(out, static_cast<uint32_t>(payload.size()));
  return out + payload;
}

Status ParseByteGroupRecord(std::span<const uint8_t> payload, const std::string& name,
                            FrameIndex& index) {
  const std::string what = name + ": byte-group record: ";
  Cursor in(payload);
  uint32_t version = 0, grouped = 0;
  if (!in.Read32(version) || !in.Read32(grouped)) {
    return Status::Corruption(what + "truncated header");
  }
  if (version != kByteGroupVersion) {
    return Status::Corruption(what + "unknown version " + std::to_string(version));
  }
  // Each grouped frame takes at least 8 + 9 bytes: bounds `grouped` before any allocation.
  if (grouped > index.frames.size() || grouped > in.left() / (8 + kByteGroupRegionBytes)) {
    return Status::Corruption(what + "lists " + std::to_string(grouped) +
                              " grouped frames; the shard has " +
                              std::to_string(index.frames.size()) + " or the record is truncated");
  }
  std::vector<GroupRegion> regions;
  int64_t previous = -1;
  for (uint32_t g = 0; g < grouped; ++g) {
    uint32_t frame = 0, count = 0;
    if (!in.Read32(frame) || !in.Read32(count)) return Status::Corruption(what + "truncated");
    const std::string at = what + "frame " + std::to_string(frame) + ": ";
    if (frame >= index.frames.size()) {
      return Status::Corruption(at + "no such frame (the shard has " +
                                std::to_string(index.frames.size()) + ")");
    }
    if (static_cast<int64_t>(frame) <= previous) {
      return Status::Corruption(at + "listed twice or out of order");
    }
    previous = frame;
    if (count == 0 || count > in.left() / kByteGroupRegionBytes) {
      return Status::Corruption(at + std::to_string(count) +
                                " regions: none, or more than the record holds");
    }
    Frame& f = index.frames[frame];
    // Only the checksum of the original bytes tells a lying record from a sound one (see the
    // header); `pack --byte-group` always writes checksums, so a grouped frame without one
    // is refused rather than un-grouped blind.
    if (!f.checksum) {
      return Status::Corruption(at +
                                "grouped, but the seek table has no checksums to check "
                                "un-grouping against");
    }
    f.first_region = static_cast<uint32_t>(regions.size());
    f.region_count = count;
    uint64_t end = 0;
    for (uint32_t i = 0; i < count; ++i) {
      GroupRegion r;
      if (!in.Read32(r.offset) || !in.Read32(r.length) || !in.Read8(r.element_size)) {
        return Status::Corruption(what + "truncated");
      }
      const std::string region = at + "region " + std::to_string(i) + " (offset " +
                                 std::to_string(r.offset) + ", " + std::to_string(r.length) +
                                 " bytes, element size " + std::to_string(r.element_size) + "): ";
      if (r.element_size != 2 && r.element_size != 4 && r.element_size != 8) {
        return Status::Corruption(region + "element size is not 2, 4 or 8");
      }
      if (r.length == 0 || r.length % r.element_size != 0) {
        return Status::Corruption(region + "length is not a positive multiple of the element size");
      }
      if (r.offset < end) return Status::Corruption(region + "overlaps the region before");
      end = uint64_t{r.offset} + r.length;
      if (end > f.decoded_size) {
        return Status::Corruption(region + "ends past the frame's " +
                                  std::to_string(f.decoded_size) + " bytes");
      }
      regions.push_back(r);
    }
  }
  if (in.left() != 0) {
    return Status::Corruption(what + std::to_string(in.left()) + " bytes after the last frame");
  }
  index.regions = std::move(regions);
  return Status::Ok();
}

}  // namespace ckptfs
