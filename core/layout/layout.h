// Layout: the immutable file tree of a mount, built once from a Checkpoint's headers.
//
// Every file is a list of extents laid end to end. An extent is either a range of a
// stored file (a shard, the index, config.json...) or synthesized bytes (a merged
// safetensors header, an .npy header) kept in one in-memory pool. The views (the two
// merged files are named by Checkpoint::safetensors_view and torch_view: adapter_model.*
// for a peft adapter, see HfViewNamesOf; the names below otherwise):
//   /model.safetensors          merged header + every tensor of the model (Checkpoint::model:
//                               in_model tensors, named by ModelName), ordered by element
//                               size (largest first) then name, so all are aligned
//   /tensors/a/b/leaf.npy       every tensor, model or not: .npy header + the tensor (one-tensor
//   .safetensors when
//                               numpy lacks the dtype)
//   /pytorch_model.bin          a torch.save zip of every model tensor with a torch type:
//                               synthesized pickle and zip headers around one stored
//                               record per storage, each an extent over the shard bytes
//   /pytorch_model/map.pt       the per-key split layout (docs/split.md): map.pt lists the
//   /pytorch_model/<key>.pt     model's keys (ModelName) in stored order (shard, storage
//                               as the shard lists them, offset: a split or torch
//                               source's own order), and each
//                               <key>.pt (SplitKeyFileName) is torch.save(tensor) of one
//                               model tensor with a torch type: zip headers and pickle made
//                               on each read around one record, the tensor's stored bytes
//   /shards/NAME                each stored weight file and the index, unchanged
//   /NAME                       every non-weight file of SOURCE, unchanged
//   /.ckptfs/stats.json         a kStats node, its bytes made at open by the caller
//   /.ckptfs/metadata.json      the non-tensor values (MetadataJson)
// Strided tensors (non-contiguous torch views) are only in pytorch_model.bin. Complex
// tensors (C64, C128) are left out of model.safetensors with a note (safetensors has no
// C128, and C64 only since 0.6); tensors/ has them as .npy (<c8, <c16), pytorch_model.bin
// and pytorch_model/ as torch's Complex*Storage.
// Modes: a stored file shown unchanged keeps its StoredFile::mode; a file drawn from
// stored files is no more readable than any of them (bits ANDed, read bits only); files
// made from the whole checkpoint (model.safetensors, pytorch_model.bin, .ckptfs/*) take
// the least readable shard's bits. A directory is listable (r-x) by each class that can
// read something inside it; an empty one is 0555. The FUSE front end narrows these
// further by the mount's --file-mode, --dir-mode and --umask (fs/ownership.h).
// Times (MTime): a stored file shown unchanged (root files, shards/) has its StoredFile's
// mtime; a per-tensor file its shard's; files made from the whole checkpoint the newest
// shard's; directories SOURCE's own (Checkpoint::dir_mtime), else the newest stored
// file's. Derived on each call from the ~one timespec kept per stored file, so nodes stay
// 40 bytes. A remount of the same SOURCE shows the same times.
// Inode numbers are node indices; kRoot is 1 as FUSE expects. Memory and build time grow
// with the number of tensors, never with checkpoint bytes: about 190 bytes a tensor (two
// nodes, three extents, names, model.safetensors' order; its header entries are made per
// read), about 85 for pytorch_model/ (a node, a child slot and a name per tensor: its files'
// extents and bytes are made per read), and 152 more once pytorch_model.bin is used (its
// extents, pickle and record table; tests/unit/memory_test.cc holds all three). Thread safety:
// immutable after Build (what the first use of pytorch_model.bin makes is made once, under a
// once_flag), so any number of readers may use it at once.
#pragma once

#include <time.h>

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

// 24 bytes: a mount holds three per tensor, two more once pytorch_model.bin is used. A stored range
// longer than 4 GiB - 1 is laid out as several extents, each under the 32-bit length.
struct Extent {
  static constexpr uint32_t kInline = 0x7fffffff;  // bytes in the header pool
  static constexpr uint32_t kLazy = kInline - 1;   // bytes made on first read (torch zip)
  // Torch zip bytes made again on every read (GeneratedBytes): the local header of
  // storage record `source_offset`, or central-directory chunk `source_offset`.
  static constexpr uint32_t kZipHeader = kInline - 2;
  static constexpr uint32_t kZipDirectory = kInline - 3;
  // The merged safetensors header's entries of chunk `source_offset` (Layout's
  // header_chunks_), made again on every read (GeneratedBytes). A chunk closes after
  // kHeaderChunk tensors or once its bytes reach kHeaderChunkBytes, whichever comes first:
  // hostile long names then cost a read at most one entry beyond that, and a chunk's
  // length always fits an extent.
  static constexpr uint32_t kHeaderEntries = kInline - 4;
  // A pytorch_model/<key>.pt file's bytes before and after its tensor's, for tensor
  // `source_offset` (index into Checkpoint::tensors), made again on every read.
  static constexpr uint32_t kSplitHead = kInline - 5;
  static constexpr uint32_t kSplitTail = kInline - 6;
  // pytorch_model/map.pt's bytes, made on its first read and kept.
  static constexpr uint32_t kSplitMap = kInline - 7;
  static constexpr uint32_t kFirstSynthesized = kSplitMap;
  static constexpr uint32_t kHeaderChunk = 1024;
  static constexpr uint64_t kHeaderChunkBytes = 1u << 20;
  static constexpr uint64_t kMaxLength = UINT32_MAX;  // longer ranges take several extents

  uint64_t file_offset;    // where the extent starts in the file
  uint64_t source_offset;  // offset in the source, or in the inline pool
  uint32_t length;
  uint32_t source : 31;  // index into Layout::sources(), or kInline / kLazy
  uint32_t tensor : 1;   // data of one tensor: a read of its start prefetches the rest

  bool synthesized() const { return source >= kFirstSynthesized; }
  bool generated() const {
    return source == kZipHeader || source == kZipDirectory || source == kHeaderEntries ||
           source == kSplitHead || source == kSplitTail;
  }
};

// What Layout::Extents returns: a slice of the layout's table, or, for a file whose
// extents are not kept (pytorch_model/<key>.pt), the few made for the call. Iterate it
// while it lives; movable, not copyable.
class ExtentList {
 public:
  ExtentList() = default;
  explicit ExtentList(std::span<const Extent> view) : view_(view) {}
  explicit ExtentList(std::vector<Extent> own) : own_(std::move(own)), view_(own_) {}
  ExtentList(ExtentList&& other) noexcept
      : own_(std::move(other.own_)), view_(own_.empty() ? other.view_ : own_) {}
  ExtentList& operator=(ExtentList&&) = delete;
  ExtentList(const ExtentList&) = delete;

  const Extent* begin() const { return view_.data(); }
  const Extent* end() const { return view_.data() + view_.size(); }
  size_t size() const { return view_.size(); }
  bool empty() const { return view_.empty(); }
  const Extent& operator[](size_t i) const { return view_[i]; }

 private:
  std::vector<Extent> own_;
  std::span<const Extent> view_;
};

enum class NodeKind : uint8_t { kDirectory, kFile, kStats };

// 40 bytes, names in the layout's arena (a mount holds about two nodes per tensor). The
// three bytes after `kind` are free: room for a 16-bit mode.
struct Node {
  const char* name_data = "";  // NUL-terminated (fuse_add_direntry wants that), never null
  uint64_t size = 0;           // files: bytes; directories: 0
  uint32_t parent = 0;
  uint32_t first = 0;   // files: first extent; directories: first child slot
  uint32_t count = 0;   // files: extents; directories: children
  int32_t tensor = -1;  // per-tensor files: index into Checkpoint::tensors
  uint32_t name_size = 0;
  NodeKind kind = NodeKind::kDirectory;
  uint16_t mode = 0555;  // permission bits (see Layout: Modes)

  std::string_view name() const { return {name_data, name_size}; }
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
  // The modification time of `ino` (see Times above); {0, 0} where the sources give none
  // (a server without Last-Modified, in-memory test sources) or `ino` does not exist.
  struct timespec MTime(uint64_t ino) const;
  // Children of a directory, sorted by name (empty for a file).
  std::span<const uint64_t> Children(uint64_t dir) const;
  // The extents of file `ino` overlapping [offset, offset + length), in file order.
  ExtentList Extents(uint64_t ino, uint64_t offset, uint64_t length) const;
  // The bytes of a synthesized extent. The first call for a kLazy extent makes the
  // merged torch zip's headers, for a kSplitMap extent map.pt's bytes (each once,
  // thread-safe); `ckpt` must still be alive then.
  // Not for generated() extents, whose bytes GeneratedBytes makes.
  std::string_view InlineBytes(const Extent& e) const;
  // The bytes of a generated() extent, made from a per-record table on each call (the
  // first makes the table with the kLazy bytes).
  std::string GeneratedBytes(const Extent& e) const;
  const ByteSource& Source(uint32_t index) const { return *sources_[index]; }
  uint64_t node_count() const { return nodes_.size() - 1; }
  // Names SOURCE had that the views shadow (e.g. a stray "tensors" file), for a log line.
  const std::vector<std::string>& hidden() const { return hidden_; }
  // Tensors some view leaves out, and why, for log lines at mount.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  class Builder;
  class DirectoryWalker;
  class TorchZipLazy;

  void MakeLazyBytes() const;
  void MakeSplitMap() const;
  // Whether `node` is a pytorch_model/<key>.pt file, whose extents Extents makes.
  bool IsSplitFile(const Node& node) const {
    return node.tensor >= 0 && node.parent == split_dir_ && split_dir_ != 0;
  }

  // pytorch_model.bin's extents (48 bytes a tensor), kept synthesized bytes (the pickle,
  // ~95 bytes a tensor) and the record table its generated headers are made from (12
  // bytes a tensor). Most mounts never read that file: Build only measures it, and these
  // are made on its first use.
  struct LazyBytes {
    std::once_flag once;
    std::vector<Extent> extents;  // of pytorch_model.bin (24 bytes, two a tensor)
    std::string bytes;
    std::vector<uint32_t> record_storages;  // record key -> index into Checkpoint::storages
    std::vector<uint64_t> header_offsets;   // record key -> its local header in the file
    std::once_flag split_once;              // pytorch_model/map.pt's bytes
    std::string split_map;
  };

  // Node names, NUL-terminated, in blocks that never move (a Layout is returned by value,
  // and one allocation per name would cost more than most names).
  struct NameArena {
    std::vector<std::unique_ptr<char[]>> blocks;
    size_t used = 0, capacity = 0;  // of the last block
    const char* Add(std::string_view name);
  };

  std::vector<Node> nodes_;  // [0] unused so inode == index
  NameArena names_;
  std::vector<uint64_t> children_;  // directory child lists, each sorted by name
  std::vector<Extent> extents_;
  std::string pool_;  // synthesized bytes
  const Checkpoint* ckpt_ = nullptr;
  uint64_t torch_zip_ = 0;  // pytorch_model.bin's inode: its extents are made on first use
  uint64_t split_dir_ = 0;  // pytorch_model/'s inode
  std::unique_ptr<LazyBytes> lazy_ = std::make_unique<LazyBytes>();
  // model.safetensors' tensors in file order, and where each header chunk starts (its
  // first tensor in that order and that tensor's data offset): the header entries (about
  // 90 bytes a tensor) are made on each read.
  struct HeaderChunk {
    uint32_t begin;
    uint32_t end;
    uint64_t data_offset;
  };
  std::vector<uint32_t> merged_order_;
  std::vector<HeaderChunk> header_chunks_;
  std::vector<const ByteSource*> sources_;
  // MTime's inputs: the mtime of each of sources_, the nodes showing one stored file
  // unchanged as (inode, source) in inode order, the newest shard's and the directories'.
  std::vector<struct timespec> source_mtimes_;
  std::vector<std::pair<uint32_t, uint32_t>> stored_nodes_;
  struct timespec newest_shard_mtime_ = {};
  struct timespec directory_mtime_ = {};
  std::vector<std::string> hidden_;
  std::vector<std::string> notes_;
};

// Returns the free pages of the heap to the system (glibc's malloc_trim). Building a Layout
// of a million tensors frees about as much as it keeps, in pieces between live ones that
// free() alone never returns; the Volume calls this once built, InlineBytes after making
// the torch zip bytes.
void ReleaseFreeMemory();

}  // namespace ckptfs
