#include "core/layout/layout.h"

#include <malloc.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>

#include "core/cache/read_context.h"
#include "core/layout/views/views.h"

namespace ckptfs {

namespace {

bool Before(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
}

// The newest of `files`' mtimes, or `newest` if none is later.
struct timespec Newest(const std::vector<StoredFile>& files, struct timespec newest) {
  for (const StoredFile& f : files) {
    if (Before(newest, f.mtime)) newest = f.mtime;
  }
  return newest;
}

}  // namespace

uint32_t AppendExtents(std::vector<Extent>& extents, uint64_t& file_size, uint32_t source,
                       uint64_t offset, uint64_t length, bool tensor) {
  uint32_t added = 0;
  while (length > 0) {
    const uint64_t part = std::min(length, Extent::kMaxLength);
    extents.push_back(Extent{file_size, offset, static_cast<uint32_t>(part), source & 0x7fffffffu,
                             tensor ? 1u : 0u});
    file_size += part;
    offset += part;
    length -= part;
    ++added;
  }
  return added;
}

// Bytes a view keeps, lent to replies without a copy: the pool of small ones (.npy
// headers, one-tensor safetensors headers, the merged header's ends), or one large file's
// own (metadata.json, AppendHeld).
class LayoutBuilder::Pool final : public ByteSource {
 public:
  explicit Pool(std::string held = {}) : bytes(std::move(held)) {}
  uint64_t Size() const override { return bytes.size(); }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
    CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
    LendOrCopy({reinterpret_cast<const uint8_t*>(bytes.data()) + offset, length}, sink);
    return Status::Ok();
  }
  const std::string& Name() const override { return name_; }

  std::string bytes;

 private:
  const std::string name_ = "made bytes";
};

LayoutBuilder::LayoutBuilder(Layout& out, const Checkpoint& ckpt) : out_(out), ckpt_(ckpt) {
  out_.nodes_.resize(2);  // [0] unused, [1] root
  // Sources: shards first, then decoded data (Checkpoint::decoded), so a tensor's shard
  // number is its source number.
  for (const auto* group : {&ckpt.shards, &ckpt.decoded, &ckpt.index, &ckpt.others}) {
    for (const StoredFile& f : *group) {
      out_.sources_.push_back(f.source.get());
      out_.source_mtimes_.push_back(f.mtime);
      source_modes_.push_back(static_cast<uint16_t>(f.mode & 0555));
    }
  }
  out_.stored_sources_ = static_cast<uint32_t>(out_.sources_.size());
  first_index_ = static_cast<uint32_t>(ckpt.shards.size() + ckpt.decoded.size());
  for (const StoredFile& f : ckpt.shards) whole_ &= static_cast<uint16_t>(f.mode);
  // About three extents a tensor (a merged file; an .npy header and data): reserved, so
  // the table does not grow by copying.
  out_.extents_.reserve(3 * ckpt.tensors.size() + out_.sources_.size() + 16);
  auto pool = std::make_unique<Pool>();
  pool->bytes.reserve(64 << 10);
  pool_ = pool.get();
  pool_source_ = AddSource(std::move(pool));
}

uint32_t LayoutBuilder::AddSource(std::unique_ptr<ByteSource> source) {
  out_.sources_.push_back(source.get());
  out_.owned_sources_.push_back(std::move(source));
  source_modes_.push_back(0555);  // made bytes narrow nothing
  return static_cast<uint32_t>(out_.sources_.size() - 1);
}

uint8_t LayoutBuilder::AddMaker(const ExtentMaker* maker) {
  out_.makers_.push_back(maker);
  return static_cast<uint8_t>(out_.makers_.size());
}

uint64_t LayoutBuilder::AddDir(uint64_t parent, std::string_view name) {
  Node node;
  node.name_data = out_.names_.Add(name);
  node.name_size = static_cast<uint32_t>(name.size());
  node.parent = static_cast<uint32_t>(parent);
  out_.nodes_.push_back(node);
  return out_.nodes_.size() - 1;
}

uint64_t LayoutBuilder::AddFile(uint64_t parent, std::string_view name, uint16_t mode,
                                NodeKind kind) {
  const uint64_t ino = AddDir(parent, name);
  Node& node = out_.nodes_[ino];
  node.kind = kind;
  node.first = static_cast<uint32_t>(out_.extents_.size());
  node.mode = mode;
  return ino;
}

uint64_t LayoutBuilder::AddMadeFile(uint64_t parent, std::string_view name, uint16_t mode,
                                    uint64_t size, uint8_t maker) {
  const uint64_t ino = AddFile(parent, name, mode);
  out_.nodes_[ino].size = size;
  out_.nodes_[ino].maker = maker;
  return ino;
}

void LayoutBuilder::BeginExtents(uint64_t ino) {
  out_.nodes_[ino].first = static_cast<uint32_t>(out_.extents_.size());
}

uint64_t LayoutBuilder::AddStoredFile(uint64_t parent, std::string_view name, uint32_t source) {
  const uint64_t ino = AddFile(parent, name, 0555);
  AppendSource(ino, source, 0, out_.sources_[source]->Size());
  // Nodes are added in inode order, so stored_nodes_ stays sorted for MTime.
  out_.stored_nodes_.emplace_back(static_cast<uint32_t>(ino), source);
  return ino;
}

void LayoutBuilder::AppendSource(uint64_t ino, uint32_t source, uint64_t offset, uint64_t length,
                                 bool tensor) {
  Node& node = out_.nodes_[ino];
  // Even an empty range: a file showing bytes of a source is no more readable than it.
  node.mode &= source_modes_[source];
  node.count += AppendExtents(out_.extents_, node.size, source, offset, length, tensor);
}

void LayoutBuilder::AppendTensor(uint64_t ino, const Tensor& t) {
  StoredRange one;
  for (const StoredRange& r : RangesOf(ckpt_, t, one)) {
    AppendSource(ino, r.shard, r.offset, r.size, /*tensor=*/true);
  }
}

void LayoutBuilder::NarrowMode(uint64_t ino, uint32_t source) {
  out_.nodes_[ino].mode &= source_modes_[source];
}

void LayoutBuilder::AppendInline(uint64_t ino, std::string_view bytes) {
  const uint64_t pool_offset = pool_->bytes.size();
  pool_->bytes += bytes;
  AppendSource(ino, pool_source_, pool_offset, bytes.size());
}

void LayoutBuilder::AppendHeld(uint64_t ino, std::string bytes) {
  const uint64_t length = bytes.size();
  AppendSource(ino, AddSource(std::make_unique<Pool>(std::move(bytes))), 0, length);
}

Extent LayoutBuilder::AppendShared(uint64_t ino, std::string bytes) {
  auto [it, added] = shared_.try_emplace(std::move(bytes), pool_->bytes.size());
  if (added) pool_->bytes += it->first;
  AppendSource(ino, pool_source_, it->second, it->first.size());
  return out_.extents_.back();
}

void LayoutBuilder::Finish() {
  std::vector<Node>& nodes = out_.nodes_;
  std::vector<uint32_t> start(nodes.size() + 1, 0);
  for (uint64_t ino = 2; ino < nodes.size(); ++ino) ++start[nodes[ino].parent + 1];
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  out_.children_.resize(nodes.size() - 2);
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (uint64_t ino = 2; ino < nodes.size(); ++ino) out_.children_[fill[nodes[ino].parent]++] = ino;
  for (uint64_t ino = 1; ino < nodes.size(); ++ino) {
    if (nodes[ino].kind != NodeKind::kDirectory) continue;
    nodes[ino].first = start[ino];
    nodes[ino].count = start[ino + 1] - start[ino];
    auto begin = out_.children_.begin() + start[ino];
    std::sort(begin, begin + nodes[ino].count,
              [&](uint64_t a, uint64_t b) { return nodes[a].name() < nodes[b].name(); });
  }
  // Children come after their parent, so walking back finishes each directory before
  // its parent reads it: a directory gets r-x for each class that reads a child.
  std::vector<uint16_t> readers(nodes.size(), 0);
  for (uint64_t ino = nodes.size() - 1; ino >= 1; --ino) {
    Node& node = nodes[ino];
    if (node.kind == NodeKind::kDirectory) {
      if (node.count == 0) {
        node.mode = 0555;  // nothing inside to hide; lets no one read anything above
        continue;
      }
      node.mode = static_cast<uint16_t>(readers[ino] | readers[ino] >> 2);
    }
    if (ino > 1) readers[node.parent] |= node.mode & 0444;
  }
  // The tables grew by doubling; a mount keeps them for its lifetime, so drop the slack
  // (up to half of each at a million tensors).
  nodes.shrink_to_fit();
  out_.extents_.shrink_to_fit();
  pool_->bytes.shrink_to_fit();
}

Layout::~Layout() = default;

Layout Layout::Build(const Checkpoint& ckpt, ReadContext* context) {
  Layout layout;
  layout.ckpt_ = &ckpt;
  layout.newest_shard_mtime_ = Newest(ckpt.shards, {});
  layout.directory_mtime_ = ckpt.dir_mtime;
  if (ckpt.dir_mtime.tv_sec == 0 && ckpt.dir_mtime.tv_nsec == 0) {
    layout.directory_mtime_ = Newest(ckpt.others, Newest(ckpt.index, layout.newest_shard_mtime_));
  }
  LayoutBuilder b(layout, ckpt);

  std::vector<std::string> view_names;
  for (const ViewEntry& entry : kViews) {
    if (ckpt.files_only) break;  // SOURCE's files as they are (ReadFilesOnly)
    layout.views_.push_back(entry.make(ckpt));
    view_names.push_back(layout.views_.back()->RootName());
  }
  layout.view_roots_ = view_names;
  // Plans need only the checkpoint: they run at once, beside the laying out (at a
  // million tensors the merged header, the torch zip's size and tensors/ each take most
  // of a second). The laying out is the last task: every plan is taken before it, so its
  // waits are for plans under way.
  const size_t n = layout.views_.size();
  std::mutex mu;
  std::condition_variable planned_cv;
  std::vector<char> planned(n, 0);  // guarded by mu
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < n; ++i) {
    tasks.emplace_back([&, i] {
      layout.views_[i]->Plan();
      std::lock_guard lock(mu);
      planned[i] = 1;
      planned_cv.notify_all();
    });
  }
  tasks.emplace_back([&] {
    layout.LayOutViews(b, view_names);
    for (size_t i = 0; i < n; ++i) {
      {
        std::unique_lock lock(mu);
        planned_cv.wait(lock, [&] { return planned[i] != 0; });
      }
      View& view = *layout.views_[i];
      view.Finish(b);
      layout.notes_.insert(layout.notes_.end(), std::make_move_iterator(view.notes.begin()),
                           std::make_move_iterator(view.notes.end()));
      view.notes = {};
    }
  });
  if (context) {
    context->RunAll(std::move(tasks));
  } else {
    for (auto& task : tasks) task();
  }
  b.Finish();
  return layout;
}

void Layout::LayOutViews(LayoutBuilder& b, const std::vector<std::string>& view_names) {
  const Checkpoint& ckpt = *ckpt_;
  // Root: non-weight files unchanged, unless a view owns the name. "FOLDER/NAME" (a
  // sentence-transformers module folder's file, OpenHfModuleFolders) goes in FOLDER.
  auto reserved = [&view_names](std::string_view name) {
    return std::find(view_names.begin(), view_names.end(), name) != view_names.end();
  };
  std::vector<std::pair<std::string, uint64_t>> folders;
  for (const std::string& folder : ckpt.folders) {
    if (!reserved(folder)) folders.emplace_back(folder, b.AddDir(kRoot, folder));
  }
  const auto first_other =
      static_cast<uint32_t>(ckpt.shards.size() + ckpt.decoded.size() + ckpt.index.size());
  for (uint32_t i = 0; i < ckpt.others.size(); ++i) {
    const StoredFile& f = ckpt.others[i];
    const size_t slash = f.name.find('/');
    const std::string top = f.name.substr(0, slash);
    if (reserved(top)) {
      hidden_.push_back(f.name);
      continue;
    }
    uint64_t parent = kRoot;
    if (slash != std::string::npos) {
      auto folder = std::find_if(folders.begin(), folders.end(),
                                 [&](const auto& d) { return d.first == top; });
      if (folder == folders.end()) continue;  // not a listed folder: never from a reader
      parent = folder->second;
    }
    b.AddStoredFile(parent, f.name.substr(slash == std::string::npos ? 0 : slash + 1),
                    first_other + i);
  }

  for (auto& view : views_) view->LayOut(b);
}

const char* Layout::NameArena::Add(std::string_view name) {
  constexpr size_t kBlock = 256 << 10;
  if (capacity - used < name.size() + 1) {
    capacity = std::max(kBlock, name.size() + 1);
    blocks.push_back(std::make_unique_for_overwrite<char[]>(capacity));
    used = 0;
  }
  char* out = blocks.back().get() + used;
  std::memcpy(out, name.data(), name.size());
  out[name.size()] = '\0';
  used += name.size() + 1;
  return out;
}

void ReleaseFreeMemory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

const Node* Layout::Find(uint64_t ino) const {
  return ino >= kRoot && ino < nodes_.size() ? &nodes_[ino] : nullptr;
}

struct timespec Layout::MTime(uint64_t ino) const {
  const Node* node = Find(ino);
  if (!node) return {};
  if (node->kind == NodeKind::kDirectory) return directory_mtime_;
  if (node->tensor >= 0) return source_mtimes_[ckpt_->tensors[node->tensor].shard];
  auto it = std::lower_bound(stored_nodes_.begin(), stored_nodes_.end(), ino,
                             [](const auto& entry, uint64_t i) { return entry.first < i; });
  if (it != stored_nodes_.end() && it->first == ino) return source_mtimes_[it->second];
  return newest_shard_mtime_;  // files made from the whole checkpoint
}

std::span<const uint64_t> Layout::Children(uint64_t dir) const {
  const Node* node = Find(dir);
  if (!node || node->kind != NodeKind::kDirectory) return {};
  return std::span<const uint64_t>(children_).subspan(node->first, node->count);
}

uint64_t Layout::Lookup(uint64_t parent, std::string_view name) const {
  std::span<const uint64_t> kids = Children(parent);
  auto it =
      std::lower_bound(kids.begin(), kids.end(), name,
                       [this](uint64_t ino, std::string_view n) { return nodes_[ino].name() < n; });
  return it != kids.end() && nodes_[*it].name() == name ? *it : 0;
}

namespace {

// The extents of `all` (a file's, in file order) overlapping [offset, end).
std::span<const Extent> Overlapping(std::span<const Extent> all, uint64_t offset, uint64_t end) {
  // First extent whose end is past `offset`, then every one that starts before `end`.
  auto first = std::upper_bound(all.begin(), all.end(), offset, [](uint64_t off, const Extent& e) {
    return off < e.file_offset + e.length;
  });
  auto last = std::lower_bound(first, all.end(), end,
                               [](const Extent& e, uint64_t off) { return e.file_offset < off; });
  return {first, last};
}

}  // namespace

ExtentList Layout::Extents(uint64_t ino, uint64_t offset, uint64_t length) const {
  const Node* node = Find(ino);
  if (!node || node->kind != NodeKind::kFile || offset >= node->size || length == 0) return {};
  const uint64_t end = offset + std::min(length, node->size - offset);
  if (node->maker == 0) {
    return ExtentList(Overlapping(
        std::span<const Extent>(extents_).subspan(node->first, node->count), offset, end));
  }
  const ExtentList made = makers_[node->maker - 1u]->Extents(*node);
  const std::span<const Extent> part = Overlapping({made.begin(), made.size()}, offset, end);
  if (!made.owned()) return ExtentList(part);
  return ExtentList(std::vector<Extent>(part.begin(), part.end()));
}

}  // namespace ckptfs
