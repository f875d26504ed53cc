#include "core/layout/views/views.h"

namespace ckptfs {

std::unique_ptr<View> MakeMergedSafetensorsView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeTorchZipView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeTensorsView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeShardsView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeSplitView(const Checkpoint& ckpt);
std::unique_ptr<View> MakeMetadataView(const Checkpoint& ckpt);

namespace {

constexpr ViewEntry kTable[] = {
    {"merged safetensors", MakeMergedSafetensorsView},
    {"torch zip", MakeTorchZipView},
    {"tensors", MakeTensorsView},
    {"shards", MakeShardsView},
    {"per-key split", MakeSplitView},
    {"metadata", MakeMetadataView},
};

}  // namespace

const std::span<const ViewEntry> kViews = kTable;

}  // namespace ckptfs
