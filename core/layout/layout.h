// Layout: the immutable file tree of a mount, built once from a Checkpoint's headers.
//
// A plain tree of nodes. Every file is a list of extents laid end to end, each a range of
// one extent source: a stored file (a shard, the index, config.json...) or bytes a view
// makes (a merged safetensors header, .npy headers, zip headers), which the view owns as
// a ByteSource of its own. Layout knows no view: SOURCE's own files go at the root, then
// each view of the table (core/layout/views/views.h) adds its nodes and extents, and
// owns what it needs to make its bytes.
//
// What the views show, and their rules of names, modes and order: views/views.h and the
// header of each view. The rules every view follows:
// Modes: a stored file shown unchanged keeps its StoredFile::mode; a file drawn from
// stored files is no more readable than any of them (bits ANDed, read bits only); files
// made from the whole checkpoint take the least readable shard's bits
// (LayoutBuilder::whole_mode). A directory is listable (r-x) by each class that can read
// something inside it; an empty one is 0555. The mount tree narrows these further by the
// mount's --file-mode, --dir-mode and --umask.
// Times (MTime): a stored file shown unchanged (root files, shards/) has its StoredFile's
// mtime; a per-tensor file (Node::tensor) its shard's; other files the newest shard's;
// directories SOURCE's own (Checkpoint::dir_mtime), else the newest stored file's.
// Derived on each call from one timespec kept per stored file. A remount of the same
// SOURCE shows the same times and the same inode numbers.
// Inode numbers are node indices; kRoot is 1 as FUSE expects. Memory and build time grow
// with the number of tensors, never with checkpoint bytes (tests/unit/memory_test.cc
// holds the bytes per tensor; docs/memory.md explains them).
// Thread safety: immutable after Build (what a view makes on first use is made once,
// thread-safe), so any number of readers may use it at once.
#pragma once

#include <time.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/source/byte_source.h"

namespace ckptfs {

class ReadContext;

// 24 bytes: a mount holds about three per tensor. A stored range longer than 4 GiB - 1 is
// laid out as several extents, each under the 32-bit length.
struct Extent {
  static constexpr uint64_t kMaxLength = UINT32_MAX;  // longer ranges take several extents

  uint64_t file_offset;    // where the extent starts in the file
  uint64_t source_offset;  // where its bytes start in the source
  uint32_t length;
  uint32_t source : 31;  // index into the layout's extent sources (Layout::Source)
  uint32_t tensor : 1;   // data of one tensor: a read of its start prefetches the rest
};

// What Layout::Extents returns: a slice of the layout's table, or, for a file whose
// extents a view makes on use, the ones made for the call. Iterate it while it lives;
// movable, not copyable.
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
  bool owned() const { return !own_.empty(); }

 private:
  std::vector<Extent> own_;
  std::span<const Extent> view_;
};

// Appends the extents of `length` bytes of `source` at `offset` to a file of `file_size`
// bytes, which grows by `length`; returns how many (one per kMaxLength).
uint32_t AppendExtents(std::vector<Extent>& extents, uint64_t& file_size, uint32_t source,
                       uint64_t offset, uint64_t length, bool tensor);

enum class NodeKind : uint8_t { kDirectory, kFile, kStats };

// 40 bytes, names in the layout's arena (a mount holds about two nodes per tensor).
struct Node {
  const char* name_data = "";  // NUL-terminated (fuse_add_direntry wants that), never null
  uint64_t size = 0;           // files: bytes; directories: 0
  uint32_t parent = 0;
  uint32_t first = 0;   // files: first extent; directories: first child slot
  uint32_t count = 0;   // files: extents; directories: children
  int32_t tensor = -1;  // per-tensor files: index into Checkpoint::tensors
  uint32_t name_size = 0;
  NodeKind kind = NodeKind::kDirectory;
  uint8_t maker = 0;     // files whose extents a view makes on use: 1 + its ExtentMaker
  uint16_t mode = 0555;  // permission bits (see Layout: Modes)

  std::string_view name() const { return {name_data, name_size}; }
};

// A view whose files' extents are not kept in the layout's table but made on use: from
// state the view makes on first use (pytorch_model.bin), or anew on each call
// (pytorch_model/<key>.pt). Thread-safe.
class ExtentMaker {
 public:
  virtual ~ExtentMaker() = default;
  // Every extent of file `node`, in file order: a span the maker keeps, or owned ones.
  virtual ExtentList Extents(const Node& node) const = 0;
};

// One part of the tree a view adds (a file or a directory of files), made from the
// checkpoint. Built in three steps, so the long ones overlap:
// - Plan: work that needs only the checkpoint (an order, a size measured). Build runs
//   every view's Plan at once on the ReadContext's workers, while views lay out.
// - LayOut: on the building thread, in the table's order (so inode numbers are the same
//   on every mount), adds the view's nodes and extents. Must not use what Plan makes.
// - Finish: then, in the same order, once this view's Plan is done: what needs it (a
//   file's extents or size, the nodes an order decides).
// A view lives as long as its Layout: the sources and makers it registers may point
// into it.
class View {
 public:
  virtual ~View() = default;
  // The root entry the view adds: a stored file of SOURCE by that name is hidden.
  virtual std::string RootName() const = 0;
  virtual void Plan() {}
  virtual void LayOut(class LayoutBuilder& b) = 0;
  virtual void Finish(class LayoutBuilder& /*b*/) {}
  // Tensors this view leaves out, and why, for log lines at mount (read after Finish;
  // a view's Plan and LayOut, which may run at once, must not both write them).
  std::vector<std::string> notes;
};

class Layout {
 public:
  static constexpr uint64_t kRoot = 1;

  // `ckpt` must outlive the Layout: extents point at its sources. With `context`, the
  // views' Plan steps run on its workers (ReadContext::RunAll) while the views lay out,
  // else first, one after another.
  static Layout Build(const Checkpoint& ckpt, ReadContext* context = nullptr);

  Layout() = default;
  Layout(Layout&&) noexcept = default;
  Layout& operator=(Layout&&) noexcept = default;
  ~Layout();

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
  // Extent source `index`: a stored file, or bytes a view makes.
  const ByteSource& Source(uint32_t index) const { return *sources_[index]; }
  // Whether extent source `index` is a stored file (else a view makes its bytes).
  bool Stored(uint32_t index) const { return index < stored_sources_; }
  uint64_t node_count() const { return nodes_.size() - 1; }
  // Names SOURCE had that the views shadow (e.g. a stray "tensors" file), for a log line.
  const std::vector<std::string>& hidden() const { return hidden_; }
  // Tensors some view leaves out, and why, for log lines at mount.
  const std::vector<std::string>& notes() const { return notes_; }
  // The root entry of each view, in the view table's order (views/views.h); a view that
  // had nothing to show has no node by its name.
  const std::vector<std::string>& view_roots() const { return view_roots_; }

 private:
  friend class LayoutBuilder;

  // SOURCE's own files at the root, then each view's LayOut, in order.
  void LayOutViews(LayoutBuilder& b, const std::vector<std::string>& view_names);

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
  const Checkpoint* ckpt_ = nullptr;
  // Extent sources: the stored files first, then the ones views own.
  std::vector<const ByteSource*> sources_;
  uint32_t stored_sources_ = 0;
  std::vector<std::unique_ptr<ByteSource>> owned_sources_;
  std::vector<const ExtentMaker*> makers_;
  std::vector<std::unique_ptr<View>> views_;
  std::vector<std::string> view_roots_;
  // MTime's inputs: the mtime of each stored source, the nodes showing one stored file
  // unchanged as (inode, source) in inode order, the newest shard's and the directories'.
  std::vector<struct timespec> source_mtimes_;
  std::vector<std::pair<uint32_t, uint32_t>> stored_nodes_;
  struct timespec newest_shard_mtime_ = {};
  struct timespec directory_mtime_ = {};
  std::vector<std::string> hidden_;
  std::vector<std::string> notes_;
};

// What views build a Layout with. Nodes are added in order (inode numbers); a file's
// extents are appended while it is the file most recently added. Children lists are made
// at the end (Finish).
class LayoutBuilder {
 public:
  LayoutBuilder(Layout& out, const Checkpoint& ckpt);

  const Checkpoint& checkpoint() const { return ckpt_; }
  // The mode of files made from the whole checkpoint: the least readable shard's bits.
  uint16_t whole_mode() const { return whole_; }
  // The extent source of stored file `i` of Checkpoint::shards, or of index file `i`.
  uint32_t ShardSource(uint32_t i) const { return i; }
  uint32_t IndexSource(uint32_t i) const { return first_index_ + i; }

  uint64_t AddDir(uint64_t parent, std::string_view name);
  // `mode`: the most a file may show; each stored extent appended narrows it.
  uint64_t AddFile(uint64_t parent, std::string_view name, uint16_t mode,
                   NodeKind kind = NodeKind::kFile);
  // A file of `size` bytes whose extents `maker` (see AddMaker) makes on use.
  uint64_t AddMadeFile(uint64_t parent, std::string_view name, uint16_t mode, uint64_t size,
                       uint8_t maker);
  Node& node(uint64_t ino) { return out_.nodes_[ino]; }

  // Extent source `index` (a stored file, or bytes a view made), as Layout::Source.
  const ByteSource& Source(uint32_t index) const { return *out_.sources_[index]; }
  // Registers bytes a view makes as an extent source; returns its index.
  uint32_t AddSource(std::unique_ptr<ByteSource> source);
  // Registers a view's ExtentMaker (which must outlive the layout: the view itself, or
  // something it owns); returns the value of Node::maker for its files.
  uint8_t AddMaker(const ExtentMaker* maker);

  // Lets file `ino`, added earlier with no extents, take its extents from here on.
  void BeginExtents(uint64_t ino);
  // Appends an extent of `source` to file `ino`, the file most recently added or begun.
  void AppendSource(uint64_t ino, uint32_t source, uint64_t offset, uint64_t length,
                    bool tensor = false);
  // Appends the bytes of contiguous tensor `t`: one extent per stored range.
  void AppendTensor(uint64_t ino, const Tensor& t);
  // Makes file `ino` no more readable than stored file `source`, without an extent.
  void NarrowMode(uint64_t ino, uint32_t source);
  // Adds a file showing stored file `source` (an index of Checkpoint::shards, decoded,
  // index or others, in that order, as ShardSource and IndexSource count) unchanged.
  uint64_t AddStoredFile(uint64_t parent, std::string_view name, uint32_t source);
  // Appends `bytes`, kept in the layout's pool of small made bytes (an extent source that
  // lends them, so replies send them without a copy).
  void AppendInline(uint64_t ino, std::string_view bytes);
  // Appends `bytes` as their own extent source, moved in and lent like the pool's: for one
  // large made file (metadata.json: 33 MB for 300k TF object-graph nodes), which the pool
  // would copy, and grow to twice its size for whatever comes after.
  void AppendHeld(uint64_t ino, std::string bytes);
  // AppendInline for bytes many files repeat (an .npy header depends only on dtype and
  // shape, and a model has few distinct shapes): the pool keeps one copy of each.
  // Returns the extent appended, which a caller may append again to other files.
  Extent AppendShared(uint64_t ino, std::string bytes);

  // Makes children lists and directory modes; the layout is then complete.
  void Finish();

 private:
  Layout& out_;
  const Checkpoint& ckpt_;
  class Pool;
  Pool* pool_;  // owned by out_.owned_sources_
  uint32_t pool_source_ = 0;
  uint32_t first_index_ = 0;
  uint16_t whole_ = 0444;
  std::vector<uint16_t> source_modes_;
  std::unordered_map<std::string, uint64_t> shared_;  // bytes -> pool offset
};

// Returns the free pages of the heap to the system (glibc's malloc_trim). Building a Layout
// of a million tensors frees about as much as it keeps, in pieces between live ones that
// free() alone never returns; the Volume calls this once built, views after making their
// first-use bytes.
void ReleaseFreeMemory();

}  // namespace ckptfs
