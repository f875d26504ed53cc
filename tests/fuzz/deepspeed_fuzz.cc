// Fuzz target: any bytes as a DeepSpeed rank file (a torch.save zip read in DeepSpeed mode)
// must be read and consolidated or refused, never crash, and every range of an accepted
// consolidation must lie inside the file. The input is used as the model states file alone
// (stage 0) and as both the model states and the one optimizer file.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/encoding/torch_file.h"
#include "core/format/deepspeed/zero.h"
#include "core/source/byte_source.h"

namespace {

void Check(const ckptfs::Result<ckptfs::deepspeed::ZeroCheckpoint>& zero, size_t size) {
  if (!zero.ok()) return;
  for (const ckptfs::StoredRange& r : zero->ranges) {
    if (r.shard != 0 || r.offset > size || r.size > size - r.offset) std::abort();
  }
  for (const ckptfs::deepspeed::ZeroTensor& t : zero->tensors) {
    if (uint64_t{t.first_range} + t.range_count > zero->ranges.size()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckptfs::MemorySource source("fuzz.pt", std::string(reinterpret_cast<const char*>(data), size));
  auto file = ckptfs::ReadTorchFile(source, ckptfs::PickleGlobals::kDeepSpeed);
  if (!file.ok()) return 0;
  const ckptfs::deepspeed::RankFile rank{"fuzz.pt", 0, &*file};
  (void)ckptfs::deepspeed::ReadTagInfo(rank);
  Check(ckptfs::deepspeed::Consolidate({&rank, 1}, {}), size);
  Check(ckptfs::deepspeed::Consolidate({&rank, 1}, {&rank, 1}), size);
  return 0;
}
