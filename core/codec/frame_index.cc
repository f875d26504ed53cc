#include "core/codec/frame_index.h"

#define ZSTD_STATIC_LINKING_ONLY
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <memory>

namespace ckptfs {
namespace {

constexpr uint32_t kFooterSize = 9;
constexpr uint32_t kSkippableHeaderSize = 8;
// A seek table larger than this describes more than a petabyte of 4 MiB frames.
constexpr uint64_t kMaxSeekTableBytes = 256ull << 20;

uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void AppendLe32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string At(const ByteSource& src, uint64_t offset) {
  return src.Name() + ": at compressed offset " + std::to_string(offset) + ": ";
}

// Parses the seek table into `index` if the file ends with the seekable footer; sets
// `found` to whether it does.
Status ParseSeekTable(const ByteSource& src, FrameIndex& index, bool& found) {
  found = false;
  const uint64_t size = src.Size();
  if (size < kFooterSize + kSkippableHeaderSize) return Status::Ok();
  std::array<uint8_t, kFooterSize> footer;
  CKPTFS_RETURN_IF_ERROR(src.ReadAt(size - kFooterSize, footer));
  if (LoadLe32(footer.data() + 5) != kSeekableMagic) return Status::Ok();
  found = true;

  const uint64_t n_frames = LoadLe32(footer.data());
  const uint8_t descriptor = footer[4];
  if (descriptor & 0x7f) {
    return Status::Corruption(src.Name() + ": seek table descriptor has reserved bits set");
  }
  const bool checksums = descriptor & 0x80;
  const uint64_t entry_size = checksums ? 12 : 8;
  const uint64_t table_size = kSkippableHeaderSize + n_frames * entry_size + kFooterSize;
  if (table_size > size || table_size > kMaxSeekTableBytes) {
    return Status::Corruption(src.Name() + ": seek table of " + std::to_string(n_frames) +
                              " frames does not fit in the file");
  }
  std::string table(table_size, '\0');
  CKPTFS_RETURN_IF_ERROR(
      src.ReadAt(size - table_size, {reinterpret_cast<uint8_t*>(table.data()), table.size()}));
  const auto* p = reinterpret_cast<const uint8_t*>(table.data());
  if (LoadLe32(p) != kSeekTableSkippableMagic ||
      LoadLe32(p + 4) != table_size - kSkippableHeaderSize) {
    return Status::Corruption(src.Name() + ": seek table skippable frame header is malformed");
  }
  index.seekable = true;
  index.frames.reserve(n_frames);
  uint64_t compressed = 0;
  for (uint64_t i = 0; i < n_frames; ++i) {
    const uint8_t* e = p + kSkippableHeaderSize + i * entry_size;
    Frame f;
    f.compressed_offset = compressed;
    f.compressed_size = LoadLe32(e);
    f.decoded_offset = index.decoded_size;
    f.decoded_size = LoadLe32(e + 4);
    if (checksums) f.checksum = LoadLe32(e + 8);
    if (f.compressed_size == 0 && f.decoded_size != 0) {
      return Status::Corruption(src.Name() + ": seek table frame " + std::to_string(i) +
                                " has no compressed bytes");
    }
    compressed += f.compressed_size;
    index.decoded_size += f.decoded_size;
    if (f.compressed_size != 0) index.frames.push_back(f);
  }
  // The frames must tile everything before the seek table: a table that lies about
  // sizes would otherwise send reads into the middle of frames.
  if (compressed != size - table_size) {
    return Status::Corruption(src.Name() + ": seek table frames cover " +
                              std::to_string(compressed) + " compressed bytes but " +
                              std::to_string(size - table_size) + " precede the table");
  }
  return Status::Ok();
}

// Reads small pieces of the file (frame and block headers) through one buffer: a ReadAt
// per 3-byte block header would be a system call, or a request, per block, and a file of
// RLE blocks has one every 4 bytes.
class HeaderReader {
 public:
  explicit HeaderReader(const ByteSource& src) : src_(src) {}

  // Reads min(out.size(), bytes left in the file) bytes at `offset`; returns how many.
  Result<size_t> Read(uint64_t offset, std::span<uint8_t> out) {
    if (offset >= src_.Size()) return size_t{0};
    const size_t n = std::min<uint64_t>(out.size(), src_.Size() - offset);
    if (offset < start_ || offset + n > start_ + buf_.size()) {
      buf_.resize(std::min<uint64_t>(kChunk, src_.Size() - offset));
      CKPTFS_RETURN_IF_ERROR(src_.ReadAt(offset, buf_));
      start_ = offset;
    }
    std::copy_n(buf_.begin() + static_cast<ptrdiff_t>(offset - start_), n, out.begin());
    return n;
  }

 private:
  static constexpr uint64_t kChunk = 64 << 10;
  const ByteSource& src_;
  std::vector<uint8_t> buf_;
  uint64_t start_ = 0;
};

// Streams through one frame to count its decoded bytes, for frames whose header does
// not say. `limit` bounds the work (see StreamDecodeLimit): more output than that is an
// error, found after decoding `limit` bytes, not the frame.
Result<uint64_t> CountDecodedBytes(const ByteSource& src, const Frame& frame, uint64_t limit) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  std::vector<uint8_t> in(1 << 20), out(ZSTD_DStreamOutSize());
  uint64_t read = 0, decoded = 0;
  size_t ret = 1;
  while (read < frame.compressed_size) {
    const size_t n = std::min<uint64_t>(in.size(), frame.compressed_size - read);
    CKPTFS_RETURN_IF_ERROR(src.ReadAt(frame.compressed_offset + read, {in.data(), n}));
    read += n;
    ZSTD_inBuffer input{in.data(), n, 0};
    while (input.pos < input.size) {
      ZSTD_outBuffer output{out.data(), out.size(), 0};
      ret = ZSTD_decompressStream(dctx.get(), &output, &input);
      if (ZSTD_isError(ret)) {
        return Status::Corruption(At(src, frame.compressed_offset) + ZSTD_getErrorName(ret));
      }
      decoded += output.pos;
      if (decoded > limit) {
        return Status::Corruption(
            At(src, frame.compressed_offset) +
            "frames without a content size decode to more than " +
            std::to_string(StreamDecodeLimit(src.Size())) + " bytes, " +
            std::to_string(kMaxStreamDecodeRatio) +
            " times the file (a zstd bomb?); decompress it with zstd -d if it is real");
      }
    }
  }
  if (ret != 0) return Status::Corruption(At(src, frame.compressed_offset) + "frame is truncated");
  return decoded;
}

// Walks one frame's block headers (3 bytes each) to find where it ends, without decoding.
Result<uint64_t> FrameEnd(const ByteSource& src, HeaderReader& reader, uint64_t offset,
                          const ZSTD_frameHeader& h) {
  uint64_t pos = offset + h.headerSize;
  while (true) {
    std::array<uint8_t, 3> b;
    CKPTFS_ASSIGN_OR_RETURN(const size_t got, reader.Read(pos, b));
    if (got < b.size()) return Status::Corruption(At(src, offset) + "frame is truncated");
    const uint32_t header = b[0] | b[1] << 8 | b[2] << 16;
    const bool last = header & 1;
    const uint32_t type = (header >> 1) & 3;
    const uint32_t block_size = header >> 3;
    if (type == 3) return Status::Corruption(At(src, pos) + "reserved zstd block type");
    if (block_size > ZSTD_BLOCKSIZE_MAX) {
      return Status::Corruption(At(src, pos) + "zstd block larger than 128 KiB");
    }
    pos += 3 + (type == 1 ? 1 : block_size);  // an RLE block stores one byte
    if (last) break;
  }
  if (h.checksumFlag) pos += 4;
  if (pos > src.Size()) return Status::Corruption(At(src, offset) + "frame is truncated");
  return pos;
}

Result<FrameIndex> ScanFrames(const ByteSource& src) {
  FrameIndex index;
  HeaderReader reader(src);
  // Decoded bytes left to learn the sizes of frames without a content size, all together.
  uint64_t decode_budget = StreamDecodeLimit(src.Size());
  uint64_t offset = 0;
  while (offset < src.Size()) {
    std::array<uint8_t, ZSTD_FRAMEHEADERSIZE_MAX> buf;
    CKPTFS_ASSIGN_OR_RETURN(const size_t n, reader.Read(offset, buf));
    ZSTD_frameHeader h;
    const size_t r = ZSTD_getFrameHeader(&h, buf.data(), n);
    if (ZSTD_isError(r)) return Status::Corruption(At(src, offset) + "not a zstd frame");
    if (r != 0) return Status::Corruption(At(src, offset) + "zstd frame header is truncated");
    if (h.frameType == ZSTD_skippableFrame) {
      // Without the seek table the frames cannot be matched to the record's: refuse rather
      // than serve grouped bytes.
      if (LoadLe32(buf.data()) == kByteGroupMagic) {
        return Status::Corruption(At(src, offset) +
                                  "byte-group record in a shard without a seek table");
      }
      if (!RangeWithin(offset, kSkippableHeaderSize + h.frameContentSize, src.Size())) {
        return Status::Corruption(src.Name() + ": skippable frame is truncated");
      }
      offset += kSkippableHeaderSize + h.frameContentSize;
      continue;
    }
    CKPTFS_ASSIGN_OR_RETURN(uint64_t end, FrameEnd(src, reader, offset, h));
    Frame f;
    f.compressed_offset = offset;
    f.compressed_size = end - offset;
    f.decoded_offset = index.decoded_size;
    if (h.frameContentSize == ZSTD_CONTENTSIZE_UNKNOWN) {
      // A streamed frame: its size is known only by decoding it, once, now.
      CKPTFS_ASSIGN_OR_RETURN(f.decoded_size, CountDecodedBytes(src, f, decode_budget));
      decode_budget -= f.decoded_size;
    } else {
      f.decoded_size = h.frameContentSize;
    }
    const std::optional<uint64_t> decoded = CheckedAdd(index.decoded_size, f.decoded_size);
    if (!decoded) return Status::Corruption(At(src, offset) + "decoded sizes overflow");
    index.decoded_size = *decoded;
    index.frames.push_back(f);
    offset = end;
  }
  if (index.frames.empty()) return Status::Corruption(src.Name() + ": no zstd frames");
  return index;
}

}  // namespace

size_t FrameIndex::FrameAt(uint64_t offset) const {
  auto it = std::upper_bound(frames.begin(), frames.end(), offset,
                             [](uint64_t off, const Frame& f) { return off < f.decoded_offset; });
  return static_cast<size_t>(it - frames.begin()) - 1;
}

namespace {

// A packed shard's byte-group record is the seek table's last entry, of 0 decoded bytes:
// parsed against the frames before it, then dropped from them.
Status TakeByteGroupRecord(const ByteSource& src, FrameIndex& index) {
  if (index.frames.empty() || index.frames.back().decoded_size != 0) return Status::Ok();
  const Frame last = index.frames.back();
  if (last.compressed_size < kSkippableHeaderSize) return Status::Ok();
  std::array<uint8_t, kSkippableHeaderSize> header;
  CKPTFS_RETURN_IF_ERROR(src.ReadAt(last.compressed_offset, header));
  if (LoadLe32(header.data()) != kByteGroupMagic) return Status::Ok();
  if (LoadLe32(header.data() + 4) != last.compressed_size - kSkippableHeaderSize ||
      last.compressed_size > kMaxSeekTableBytes) {
    return Status::Corruption(At(src, last.compressed_offset) +
                              "byte-group record's size does not match its seek table entry");
  }
  std::vector<uint8_t> payload(last.compressed_size - kSkippableHeaderSize);
  CKPTFS_RETURN_IF_ERROR(src.ReadAt(last.compressed_offset + kSkippableHeaderSize, payload));
  index.frames.pop_back();
  index.record_size = last.compressed_size;
  return ParseByteGroupRecord(payload, src.Name(), index);
}

}  // namespace

Result<FrameIndex> ReadFrameIndex(const ByteSource& compressed) {
  FrameIndex index;
  bool seekable = false;
  CKPTFS_RETURN_IF_ERROR(ParseSeekTable(compressed, index, seekable));
  if (seekable) {
    CKPTFS_RETURN_IF_ERROR(TakeByteGroupRecord(compressed, index));
    return index;
  }
  return ScanFrames(compressed);
}

std::string BuildSeekTable(std::span<const Frame> frames, bool with_checksums) {
  const uint32_t entry_size = with_checksums ? 12 : 8;
  std::string out;
  AppendLe32(out, kSeekTableSkippableMagic);
  AppendLe32(out, static_cast<uint32_t>(frames.size() * entry_size + kFooterSize));
  for (const Frame& f : frames) {
    AppendLe32(out, static_cast<uint32_t>(f.compressed_size));
    AppendLe32(out, static_cast<uint32_t>(f.decoded_size));
    if (with_checksums) AppendLe32(out, f.checksum.value_or(0));
  }
  AppendLe32(out, static_cast<uint32_t>(frames.size()));
  out.push_back(static_cast<char>(with_checksums ? 0x80 : 0));
  AppendLe32(out, kSeekableMagic);
  return out;
}

uint32_t SeekableChecksum(std::span<const uint8_t> decoded) {
  return static_cast<uint32_t>(XXH64(decoded.data(), decoded.size(), 0));
}

}  // namespace ckptfs
