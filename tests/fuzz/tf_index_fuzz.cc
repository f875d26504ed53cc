// Fuzz target: any bytes as a TensorBundle index must parse or be refused, never crash or
// allocate what a length field says; an accepted bundle must be self-consistent: every
// numeric tensor's runs cover exactly its shape's bytes, every location names a shard.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/format/tf/bundle.h"
#include "core/format/tf/names.h"
#include "core/format/tf/slices.h"
#include "core/format/tf/sstable.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // The verify walk must agree with the reader on a sound table.
  const bool blocks_sound = ckptfs::tf::CheckSstableBlocks(bytes, "fuzz.index").empty();
  ckptfs::MetadataBudget budget("fuzz.index");
  budget.AddStored(bytes.size());
  auto table = ckptfs::tf::WalkSstable(
      bytes, "fuzz.index", budget,
      [](std::string_view, std::string_view) { return ckptfs::Status::Ok(); });
  if (table.ok() && !blocks_sound) std::abort();
  auto bundle = ckptfs::tf::ParseTensorBundle(bytes, "fuzz.index");
  if (!bundle.ok()) return 0;
  const auto shards = static_cast<uint64_t>(bundle->header.num_shards);
  for (const ckptfs::tf::TfTensor& t : bundle->tensors) {
    (void)ckptfs::tf::TfKeyToName(t.key);
    if (!t.partitioned() && t.where.shard_id >= shards) std::abort();
    for (const auto& p : t.slices) {
      if (p.where.shard_id >= shards) std::abort();
    }
    if (t.type.kind != ckptfs::tf::TfKind::kNumeric) continue;
    const uint64_t esize = ckptfs::DtypeSize(*t.type.dtype);
    auto runs = ckptfs::tf::TensorRuns(t, esize, "fuzz.index");
    if (!runs.ok()) std::abort();  // the parser already checked coverage
    uint64_t total = 0;
    for (const auto& r : *runs) total += r.length;
    if (total != *ckptfs::tf::ShapeBytes(t.shape, esize)) std::abort();
  }
  return 0;
}
