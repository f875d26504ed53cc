// The per-tensor memory of a mount, pinned: the compact structs keep their sizes, and
// building the Layout of 100k tiny tensors (the shape of make_checkpoint.py --kind
// headers: one directory per tensor, the worst case for nodes) allocates no more than the
// bytes per tensor the README documents. Heap bytes come from mallinfo2 (glibc): what is
// in use, not what the process holds, so fragmentation is the mount test's business.

#include <gtest/gtest.h>
#include <malloc.h>

#include "core/format/formats.h"
#include "core/layout/layout.h"
#include "test_util.h"

namespace ckptfs {
namespace {

using testing::MakeSafetensors;
using testing::MemoryDir;
using testing::TestContext;
using testing::TestTensor;

// Heap in use: small chunks plus mmapped ones (the big tables).
uint64_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

TEST(TensorMemory, CompactStructs) {
  // A mount holds about two nodes and three extents per tensor, two more extents once
  // pytorch_model.bin is read (README, "Memory").
  EXPECT_LE(sizeof(Node), 40u);
  EXPECT_LE(sizeof(Tensor), 128u);  // the model view's fields live in padding
  EXPECT_LE(sizeof(Extent), 24u);
}

TEST(TensorMemory, LayoutBytesPerTensor) {
  constexpr uint64_t kTensors = 100'000;
  // Documented in the README: the Layout at mount (275 measured: nodes, three extents,
  // names, children, model.safetensors' order, 190 of them; then pytorch_model/'s 85, a
  // node, a child slot and a file name per tensor, its extents and bytes made per read),
  // and what the first read of pytorch_model.bin makes (152 measured: its two extents a
  // tensor, the pickle and a record table).
  constexpr uint64_t kLayoutBytesPerTensor = 295;
  constexpr uint64_t kTorchZipBytesPerTensor = 170;

  std::vector<TestTensor> tensors;
  tensors.reserve(kTensors);
  for (uint64_t i = 0; i < kTensors; ++i) {
    tensors.push_back(
        {"model.layers." + std::to_string(i % 4) + ".block." + std::to_string(i / 4) + ".weight",
         Dtype::kF32,
         {1}});
  }
  auto ckpt =
      OpenCheckpointIn(MemoryDir({{"model.safetensors", MakeSafetensors(tensors)}}), TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  tensors = {};

  const uint64_t before = HeapInUse();
  Layout layout = Layout::Build(*ckpt);
  const uint64_t built = HeapInUse();
  EXPECT_GE(layout.node_count(), 2 * kTensors);  // a directory and a file per tensor
  const uint64_t layout_bytes = (built - before) / kTensors;
  EXPECT_LE(layout_bytes, kLayoutBytesPerTensor);

  const uint64_t bin = layout.Lookup(Layout::kRoot, "pytorch_model.bin");
  ASSERT_NE(bin, 0u);
  uint8_t first = 0;  // the first read makes what the file's first use makes
  for (const Extent& e : layout.Extents(bin, 0, 1)) {
    ASSERT_TRUE(layout.Source(e.source).ReadAt(e.source_offset, {&first, 1}).ok());
  }
  const uint64_t zip_bytes = (HeapInUse() - built) / kTensors;
  EXPECT_LE(zip_bytes, kTorchZipBytesPerTensor);
  std::printf("layout %llu B/tensor, torch zip bytes %llu B/tensor\n",
              static_cast<unsigned long long>(layout_bytes),
              static_cast<unsigned long long>(zip_bytes));
}

}  // namespace
}  // namespace ckptfs
