#include "core/volume/verify.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/checkpoint/natural_order.h"
#include "core/codec/zstd_source.h"
#include "core/format/formats.h"

namespace ckptfs {
namespace {

Status ReadEverything(const ByteSource& source, const std::function<void(uint64_t)>& advance) {
  std::vector<uint8_t> buf(4u << 20);
  for (uint64_t off = 0; off < source.Size(); off += buf.size()) {
    const uint64_t n = std::min<uint64_t>(buf.size(), source.Size() - off);
    CKPTFS_RETURN_IF_ERROR(source.ReadAt(off, {buf.data(), n}));
    advance(n);
  }
  return Status::Ok();
}

// What a damaged frame of weight shard `shard` held, for the report: its decoded byte
// range and the tensors overlapping it (natural order, the first few named).
std::string DamagedFrame(const Checkpoint& ckpt, const ZstdSource& zstd, uint32_t shard,
                         size_t frame) {
  uint64_t begin = 0, end = zstd.Size();
  if (frame != ZstdSource::kWholeStream) {
    begin = zstd.index().frames[frame].decoded_offset;
    end = begin + zstd.index().frames[frame].decoded_size;
  }
  std::vector<std::string> hit;
  for (const Tensor& t : ckpt.tensors) {
    // A strided view draws from its whole storage; a TF partitioned one from its ranges.
    const Storage& storage = ckpt.storages[t.storage];
    StoredRange one;
    for (const StoredRange& r :
         t.contiguous() ? RangesOf(ckpt, t, one) : RangesOf(ckpt, storage, one)) {
      if (r.shard == shard && r.offset < end && begin < r.offset + r.size) {
        hit.push_back(t.name);
        break;
      }
    }
  }
  std::sort(hit.begin(), hit.end(),
            [](const std::string& a, const std::string& b) { return NaturalLess(a, b); });
  std::string line = "; bytes " + std::to_string(begin) + "-" + std::to_string(end) + " of " +
                     ckpt.shards[shard].name + ", ";
  if (hit.empty()) return line + "no tensor (header or padding)";
  constexpr size_t kNamed = 8;
  line += std::to_string(hit.size()) + (hit.size() == 1 ? " tensor: " : " tensors: ");
  for (size_t i = 0; i < std::min(hit.size(), kNamed); ++i) {
    if (i) line += ", ";
    line += hit[i];
  }
  if (hit.size() > kNamed) line += ", ... (" + std::to_string(hit.size() - kNamed) + " more)";
  return line;
}

}  // namespace

uint64_t VerifyTotalBytes(const Checkpoint& ckpt) {
  uint64_t total = 0;
  for (const auto* group : {&ckpt.shards, &ckpt.index, &ckpt.others}) {
    for (const StoredFile& f : *group) total += f.source->Size();
  }
  return total;
}

VerifyResult VerifyCheckpoint(const Checkpoint& ckpt,
                              const std::function<void(const Status&)>& report,
                              const std::function<void(uint64_t done, uint64_t total)>& progress) {
  VerifyResult result;
  const uint64_t total = VerifyTotalBytes(ckpt);
  auto problem = [&](const Status& s) {
    ++result.damaged;
    report(s);
  };
  auto advance = [&](uint64_t n) {
    result.bytes_read += n;
    if (progress) progress(result.bytes_read, total);
  };
  for (const auto* group : {&ckpt.shards, &ckpt.index, &ckpt.others}) {
    for (const StoredFile& f : *group) {
      const auto* zstd = dynamic_cast<const ZstdSource*>(f.source.get());
      if (!zstd) {
        if (Status s = ReadEverything(*f.source, advance); !s.ok()) problem(s);
        continue;
      }
      const auto shard = static_cast<uint32_t>(&f - group->data());
      const bool weights = group == &ckpt.shards;
      zstd->VerifyAll(
          [&](const Status& s, size_t frame) {
            problem(weights
                        ? Status::Corruption(s.message() + DamagedFrame(ckpt, *zstd, shard, frame))
                        : s);
          },
          advance);
    }
  }
  // torch.save records carry a CRC-32 of each storage: check what the zip promised.
  std::vector<uint8_t> scratch;
  for (const Storage& s : ckpt.storages) {
    if (!s.has_crc32 || result.damaged) continue;
    Result<uint32_t> crc = ReadStorageCrc(ckpt, s, scratch);
    if (!crc.ok()) {
      problem(crc.status());
    } else if (crc.value() != s.crc32) {
      char line[160];
      std::snprintf(line, sizeof(line),
                    ": storage at byte %llu (%llu bytes) has CRC-32 %08x, the zip says %08x",
                    static_cast<unsigned long long>(s.offset),
                    static_cast<unsigned long long>(s.size), crc.value(), s.crc32);
      problem(Status::Corruption(ShardFile(ckpt, s.shard).name + line));
    }
  }
  // Checks of the format's own (TF: index blocks and each tensor's CRC32C).
  if (const FormatReader& format = FormatOf(ckpt); format.verify && !result.damaged) {
    if (Status s = format.verify(ckpt, problem); !s.ok()) problem(s);
  }
  return result;
}

}  // namespace ckptfs
