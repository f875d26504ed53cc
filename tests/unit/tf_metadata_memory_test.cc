// What metadata.json costs once a TensorFlow checkpoint is laid out (docs/tensorflow.md,
// "Metadata memory"): the reader charges its compact text and its laid-out text, and the
// layout holds the laid-out text once, moved in (AppendHeld), so what the reader charges
// covers what reading and laying out hold; a Volume then frees the compact text. The
// bundles come from scripts/make_tf_checkpoint.py (`standard`, and `graph_nodes`: 300k
// empty object-graph nodes, 0.6 MB stored, 35 MB laid out). tests/mount/tf_mount_test.cc
// checks the same case against the bound on the real binary (inspect, mount, the daemon).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/format/formats.h"
#include "core/layout/layout.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;

// This process's scratch directory, removed when the test binary exits.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("ckptfs_tfmem_" + std::to_string(getpid()));
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
const Scratch kScratch;

// A bundle scripts/make_tf_checkpoint.py writes: `kind` in a directory of its own.
fs::path Generated(const std::string& kind) {
  const fs::path dir = kScratch.dir / kind;
  fs::remove_all(dir);
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR "/scripts/make_tf_checkpoint.py " +
                          kind + " " + dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

using testing::PeakRssKib;
using testing::ResetPeakRss;

// .ckptfs/metadata.json of `layout`: its inode, or 0.
uint64_t MetadataJsonNode(const Layout& layout) {
  const uint64_t dir = layout.Lookup(Layout::kRoot, ".ckptfs");
  return dir == 0 ? 0 : layout.Lookup(dir, "metadata.json");
}

// The file is one extent over a made source of exactly its bytes: not a copy appended to
// the pool the .npy headers share (which the pool grew into, by doubling, while the text
// it was copied from was still held).
TEST(TfMetadataMemoryTest, LayoutHoldsMetadataJsonOnce) {
  auto ckpt = OpenCheckpoint(Generated("standard").string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const Layout layout = Layout::Build(*ckpt);
  const uint64_t ino = MetadataJsonNode(layout);
  ASSERT_NE(ino, 0u);
  const uint64_t size = layout.Find(ino)->size;
  EXPECT_EQ(size, MetadataJsonSize(*ckpt));
  const ExtentList extents = layout.Extents(ino, 0, size);
  ASSERT_EQ(extents.size(), 1u);
  const Extent& e = extents[0];
  EXPECT_FALSE(layout.Stored(e.source));
  EXPECT_EQ(e.source_offset, 0u);
  EXPECT_EQ(layout.Source(e.source).Size(), size) << "metadata.json shares its source";
}

// Laying out 300k object-graph nodes takes the laid-out text once (33 MB), not twice (the
// text made, then its copy in the pool: the 99.5 MiB peak of inspect against a bound of
// 82.3 MiB).
TEST(TfMetadataMemoryTest, ManyNodesLaidOutOnce) {
  auto ckpt = OpenCheckpoint(Generated("graph_nodes").string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const uint64_t laid_out = MetadataJsonSize(*ckpt);
  ASSERT_GT(laid_out, 30u << 20);
  EXPECT_EQ(ckpt->state_json.capacity(), ckpt->state_json.size()) << "held at its size";
  // Free heap pages earlier tests left resident would take the layout's bytes unseen.
  ReleaseFreeMemory();
  ResetPeakRss();
  const long before = PeakRssKib();
  const Layout layout = Layout::Build(*ckpt);
  const auto grown = static_cast<uint64_t>(PeakRssKib() - before) << 10;
  std::cout << "300k object-graph nodes: state_json " << ckpt->state_json.size()
            << " bytes, metadata.json " << laid_out << ", layout peak RSS +" << (grown >> 20)
            << " MiB\n";
  ASSERT_NE(MetadataJsonNode(layout), 0u);
  EXPECT_LT(grown, laid_out + laid_out / 4);
}

// A Volume keeps metadata.json laid out, not the compact text it was made from too (TF's
// inspect lines do not read it): the file still shows every byte.
TEST(TfMetadataMemoryTest, VolumeFreesTheCompactTextOnceLaidOut) {
  auto ckpt = OpenCheckpoint(Generated("standard").string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_FALSE(ckpt->state_json.empty());
  const std::string expected = MetadataJson(*ckpt);
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  EXPECT_TRUE(volume->checkpoint().state_json.empty());
  const Layout& layout = volume->layout();
  const uint64_t ino = MetadataJsonNode(layout);
  ASSERT_NE(ino, 0u);
  const ExtentList extents = layout.Extents(ino, 0, expected.size());
  ASSERT_EQ(extents.size(), 1u);
  std::string bytes(extents[0].length, '\0');
  ASSERT_TRUE(layout.Source(extents[0].source)
                  .ReadAt(extents[0].source_offset,
                          {reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()})
                  .ok());
  EXPECT_EQ(bytes, expected);
}

}  // namespace
}  // namespace ckptfs
