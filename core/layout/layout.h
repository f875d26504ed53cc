// Layout: the immutable file tree of a mount, built once from a Checkpoint's headers.
//
// Every file is a list of extents laid end to end. An extent is either a range of a
// stored file (a shard, the index, config.json...) or synthesized bytes (a merged
// safetensors header, an .npy header) kept in one in-memory pool. The views:
//   /model.safetensors          merged header + every tensor, ordered by element size
//                               (largest first) then name, so all are aligned
//   /tensors/a/b/leaf.npy       .npy header + the tensor (one-tensor .safetensors when
//                               numpy lacks the dtype)
//   /pytorch_model.bin          a torch.save zip of every tensor with a torch type:
//                               synthesized pickle and zip headers around one stored
//                               record per storage, each an extent over the shard bytes
//   /shards/NAME                each stored weight file and the index, unchanged
//   /NAME                       every non-weight file of SOURCE, unchanged
//   /.ckptfs/stats.json         a kStats node, its bytes made at open by the caller
//   /.ckptfs/metadata.json      the non-tensor values (MetadataJson)
// Strided tensors (non-contiguous torch views) are only in pytorch_model.bin.
// Modes: a stored file shown unchanged keeps its StoredFile::mode; a file drawn from
// stored files is no more readable than any of them (bits ANDed, read bits only); files
// made from the whole checkpoint (model.safetensors, pytorch_model.bin, .ckptfs/*) take
// the least readable shard's bits. A directory is listable (r-x) by each class that can
// read something inside it; an empty one is 0555.
// Inode numbers are node indices; kRoot is 1 as FUSE expects. Memory and build time grow
// with the number of tensors, never with checkpoint bytes. Thread safety: immutable after
// Build, so any number of readers may use it at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/source/byte_source.h"

namespace ckptfs {

struct Extent {
  static constexpr uint32_t kInline = UINT32_MAX;    // bytes in the header pool
  static constexpr uint32_t kLazy = UINT32_MAX - 1;  // bytes made on first read (torch zip)

  uint64_t file_offset;  // where the extent starts in the file
  uint64_t length;
  uint64_t source_offset;  // offset in the source, or in the inline pool
  uint32_t source;         // index into Layout::sources(), or kInline / kLazy
  bool tensor = false;     // the whole data of one tensor: a read of its start prefetches the rest

  bool synthesized() const { return source >= kLazy; }
};

enum class NodeKind : uint8_t { kDirectory, kFile, kStats };

struct Node {
  std::string name;
  uint64_t parent = 0;
  uint64_t size = 0;    // files: bytes; directories: 0
  uint32_t first = 0;   // files: first extent; directories: first child slot
  uint32_t count = 0;   // files: extents; directories: children
  int32_t tensor = -1;  // per-tensor files: index into Checkpoint::tensors
  NodeKind kind = NodeKind::kDirectory;
  uint16_t mode = 0555;  // permission bits (see Layout: Modes)
};

class Layout {
 public:
  static constexpr uint64_t kRoot = 1;

  // `ckpt` must outlive the Layout: extents point at its sources.
  static Layout Build(const Checkpoint& ckpt);

  // nullptr for an inode that does not exist.
  const Node* Find(uint64_t ino) const;
  // The child `name` of directory `parent`, or 0.
  uint64_t Lookup(uint64_t parent, std::string_view name) const;
  // Children of a directory, sorted by name (empty for a file).
  std::span<const uint64_t> Children(uint64_t dir) const;
  // The extents of file `ino` overlapping [offset, offset + length), in file order.
  std::span<const Extent> Extents(uint64_t ino, uint64_t offset, uint64_t length) const;
  // The bytes of a synthesized extent. The first call for a kLazy extent makes the
  // merged torch zip's headers (once, thread-safe); `ckpt` must still be alive then.
  std::string_view InlineBytes(const Extent& e) const;
  const ByteSource& Source(uint32_t index) const { return *sources_[index]; }
  uint64_t node_count() const { return nodes_.size() - 1; }
  // Names SOURCE had that the views shadow (e.g. a stray "tensors" file), for a log line.
  const std::vector<std::string>& hidden() const { return hidden_; }
  // Tensors some view leaves out, and why, for log lines at mount.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  class Builder;
  class DirectoryWalker;
  class TorchZipExtents;

  void AddTorchZip(Builder& b, const Checkpoint& ckpt, uint16_t mode);

  // pytorch_model.bin's synthesized bytes (pickle, zip headers) cost ~300 bytes a
  // tensor, and most mounts never read that file: they are made again on first read.
  struct LazyBytes {
    std::once_flag once;
    std::string bytes;
  };

  std::vector<Node> nodes_;         // [0] unused so inode == index
  std::vector<uint64_t> children_;  // directory child lists, each sorted by name
  std::vector<Extent> extents_;
  std::string pool_;  // synthesized bytes
  const Checkpoint* ckpt_ = nullptr;
  std::unique_ptr<LazyBytes> lazy_ = std::make_unique<LazyBytes>();
  std::vector<const ByteSource*> sources_;
  std::vector<std::string> hidden_;
  std::vector<std::string> notes_;
};

}  // namespace ckptfs
