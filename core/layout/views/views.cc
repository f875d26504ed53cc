#include "core/layout/views/views.h"

#include <algorithm>
#include <cstring>

namespace ckptfs {

std::unique_ptr<View> MakeRootFilesView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeMergedSafetensorsView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeTorchZipView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeTensorsView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeShardsView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeSplitView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeMetadataView(const Checkpoint& ckpt);

namespace {

constexpr ViewEntry kTable[] = {
    {"format's root files", MakeRootFilesView},
    {"merged safetensors", MakeMergedSafetensorsView},
    {"torch zip", MakeTorchZipView},
    {"tensors", MakeTensorsView},
    {"shards", MakeShardsView},
    {"per-key split", MakeSplitView},
    {"metadata", MakeMetadataView},
};

}  // namespace

const std::span<const ViewEntry> kViews = kTable;

Status ReadMadePieces(uint64_t offset, uint64_t length, ReadSink& sink, const std::string& name,
                      const std::function<uint64_t(uint64_t at, std::string& bytes)>& piece) {
  if (length == 0) return Status::Ok();
  const std::span<uint8_t> out = sink.Fill();
  std::string bytes;
  for (size_t done = 0; done < out.size();) {
    const uint64_t at = offset + done;
    bytes.clear();
    const uint64_t start = piece(at, bytes);
    if (at < start || at - start >= bytes.size()) {
      return Status::Corruption(name + ": no made bytes at offset " + std::to_string(at));
    }
    const size_t n = std::min<uint64_t>(out.size() - done, bytes.size() - (at - start));
    std::memcpy(out.data() + done, bytes.data() + (at - start), n);
    done += n;
  }
  return Status::Ok();
}

}  // namespace ckptfs
