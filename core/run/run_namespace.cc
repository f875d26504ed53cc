// What each directory of a mounted run lists (the root as SOURCE is, views/, .ckptfs/, an
// entry's ERROR) and how a global inode resolves to its node: run_tree.h, "What it shows"
// and "Inodes".
#include <algorithm>
#include <set>

#include "core/run/run_slot.h"
#include "core/run/run_tree.h"

namespace ckptfs {
using namespace run_nodes;

Result<RunNode> RunTree::Resolve(uint64_t ino, bool open_entry) {
  const uint64_t slot_id = ino >> 32, local = ino & kLocalMask;
  if (ino == kRootIno && !options_.pin.empty()) {
    std::shared_ptr<Slot> slot = PinnedSlot();
    if (!slot) return RootNode();  // nothing to show (yet): an empty root
    if (open_entry) return OpenEntry(*slot, kRootIno);
    std::lock_guard<std::mutex> lock(slot->mu);
    return EntryDir(*slot, kRootIno);
  }
  if (slot_id == 0) {
    RunNode node;
    node.ino = ino;
    node.parent = kRootIno;
    node.short_lived = node.short_children = true;
    if (ino == kRootIno) return RootNode();
    if ((ino == kMetaDirIno || ino == kStatsIno) && options_.pin.empty()) {
      node.kind = ino == kMetaDirIno ? RunNode::Kind::kDirectory : RunNode::Kind::kFile;
      node.parent = ino == kMetaDirIno ? kRootIno : kMetaDirIno;
      if (ino == kStatsIno) node.text = StatsJson();
      return node;
    }
    if (ino == kViewsIno && options_.pin.empty() && !pipeline_) {
      node.kind = RunNode::Kind::kDirectory;
      return node;
    }
    std::lock_guard<std::mutex> lock(mu_);
    const bool latest = ino == kLatestIno || ino == kViewsLatestIno;
    const bool in_views = ino == kViewsLatestIno || ino == kViewsBestIno;
    const std::string& target = latest ? latest_ : best_;
    const bool pointer = latest || ino == kBestIno || ino == kViewsBestIno;
    if (pointer && !target.empty() && options_.pin.empty() && !(in_views && pipeline_)) {
      node.kind = RunNode::Kind::kSymlink;
      node.text = PointerTarget(target, in_views);
      if (in_views) node.parent = kViewsIno;
      return node;
    }
    return Status::NotFound("inode " + std::to_string(ino) + ": gone");
  }
  std::shared_ptr<Slot> slot = SlotOf(slot_id);
  if (!slot) return Status::NotFound("inode " + std::to_string(ino) + ": checkpoint gone");
  std::shared_ptr<Slot> pinned = options_.pin.empty() ? nullptr : PinnedSlot();
  // A pipeline's top files' Layout root is the run's root (their "..").
  const bool at_root = pinned == slot || slot->entry.kind == RunEntry::Kind::kFiles;
  const uint64_t root_ino = at_root ? kRootIno : slot->base() | Layout::kRoot;
  if (local == Layout::kRoot && !open_entry) {
    slot->last_used = Ticks(options_.now());
    std::lock_guard<std::mutex> lock(slot->mu);
    return EntryDir(*slot, root_ino);
  }
  RunNode node = OpenEntry(*slot, root_ino);  // reopens one closed while idle
  if (node.kind == RunNode::Kind::kVolume) {
    // It opened on a later try: its ERROR file is gone.
    if (local == kErrorLocal) return Status::NotFound("inode " + std::to_string(ino) + ": gone");
    if (local != Layout::kRoot) node.ino = ino, node.short_lived = false;
    return node;
  }
  if (local == Layout::kRoot) return node;
  if (local != kErrorLocal || slot->retired) return Status::NotFound("inode gone");
  std::lock_guard<std::mutex> lock(slot->mu);
  node.kind = RunNode::Kind::kFile;
  node.ino = ino;
  node.parent = root_ino;
  node.text = slot->error + "\n";
  return node;
}

Result<RunNode> RunTree::Lookup(const RunNode& dir, std::string_view name) {
  for (auto& [child_name, child] : List(dir)) {
    if (child_name == name) return child;
  }
  return Status::NotFound(std::string(name) + ": no such entry");
}

std::vector<std::pair<std::string, RunNode>> RunTree::List(const RunNode& dir) {
  std::vector<std::pair<std::string, RunNode>> out;
  if (dir.kind != RunNode::Kind::kDirectory) return out;
  if (dir.ino == kViewsIno && options_.pin.empty() && !pipeline_) return ListViews();
  if (dir.ino == kRootIno && options_.pin.empty()) {
    MaybeRelist();
    std::vector<std::shared_ptr<Slot>> slots;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const std::string& name : order_) {
        std::shared_ptr<Slot> slot = Shown(name);
        // A training run shows an entry's own files; a pipeline its components' views.
        if (pipeline_) slots.push_back(slot);
        if (!pipeline_ && slot->twin != 0) slots.push_back(slots_[slot->twin]);
      }
    }
    std::set<std::string> names;
    for (const auto& slot : slots) {
      std::optional<RunNode> node;
      // A file is opened to be shown (its size, its mode); a directory on first use.
      if (slot->own_files && slot->entry.kind == RunEntry::Kind::kFile) {
        node = OwnNode(*slot);
      } else {
        std::lock_guard<std::mutex> lock(slot->mu);
        node = EntryDir(*slot, slot->base() | Layout::kRoot);
      }
      if (!node) continue;
      names.insert(slot->entry.name);
      out.emplace_back(slot->entry.name, std::move(*node));
    }
    ListTopFiles(names, out);
    // A name of SOURCE wins over the run's own node.
    for (const auto& [name, ino] : {std::pair<std::string, uint64_t>{"latest", kLatestIno},
                                    {"best", kBestIno},
                                    {kViewsDir, kViewsIno},
                                    {kMetaDir, kMetaDirIno}}) {
      if (names.count(name)) continue;
      Result<RunNode> node = Resolve(ino, false);
      if (node.ok()) out.emplace_back(name, std::move(node.value()));
    }
    return out;
  }
  if (dir.ino == kMetaDirIno) {
    Result<RunNode> node = Resolve(kStatsIno, false);
    if (node.ok()) out.emplace_back("stats.json", std::move(node.value()));
    return out;
  }
  // A failed entry (or a pinned root showing one): its ERROR file.
  const uint64_t slot_id =
      dir.ino == kRootIno ? (PinnedSlot() ? PinnedSlot()->id : 0) : dir.ino >> 32;
  if (slot_id == 0) return out;
  Result<RunNode> error = Resolve((slot_id << 32) | kErrorLocal, true);
  if (error.ok() && error->kind == RunNode::Kind::kFile) {
    error->parent = dir.ino;
    out.emplace_back("ERROR", std::move(error.value()));
  }
  return out;
}

std::vector<std::pair<std::string, RunNode>> RunTree::ListViews() {
  std::vector<std::pair<std::string, RunNode>> out;
  std::vector<std::shared_ptr<Slot>> slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : order_) slots.push_back(Shown(name));
  }
  std::set<std::string> names;
  for (const auto& slot : slots) {
    names.insert(slot->entry.name);
    std::lock_guard<std::mutex> lock(slot->mu);
    out.emplace_back(slot->entry.name, EntryDir(*slot, slot->base() | Layout::kRoot));
  }
  for (const auto& [name, ino] :
       {std::pair<std::string, uint64_t>{"latest", kViewsLatestIno}, {"best", kViewsBestIno}}) {
    if (names.count(name)) continue;
    Result<RunNode> node = Resolve(ino, false);
    if (node.ok()) out.emplace_back(name, std::move(node.value()));
  }
  return out;
}

std::optional<RunNode> RunTree::OwnNode(Slot& own) {
  RunNode node = OpenEntry(own, own.base() | Layout::kRoot);
  if (node.kind != RunNode::Kind::kVolume) {
    // One line per failure (OpenLocked keeps it until due again): the entry's views still
    // serve, and its ERROR is under views/.
    std::lock_guard<std::mutex> lock(own.mu);
    if (context_->options().warn && !own.error.empty() && !own.error_said) {
      context_->options().warn(source_.path + "/" + own.error + "; not shown");
      own.error_said = true;
    }
    return std::nullopt;
  }
  node.parent = kRootIno;
  // The one file of its files-only Volume, under its own inode.
  const uint64_t local = node.volume->layout().Lookup(Layout::kRoot, own.entry.name);
  if (local == 0) return std::nullopt;
  node.ino = node.Global(local);
  return node;
}

std::string RunTree::PointerTarget(const std::string& entry, bool in_views) const {
  if (in_views) return entry;
  std::shared_ptr<Slot> slot = Shown(entry);
  // An entry without a path of its own in SOURCE (a TF prefix, the final model): its views.
  if (!slot || slot->twin == 0) return std::string(kViewsDir) + "/" + entry;
  return entry;
}

void RunTree::ListTopFiles(std::set<std::string>& names,
                           std::vector<std::pair<std::string, RunNode>>& out) {
  std::shared_ptr<Slot> files;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (files_slot_ != 0) files = slots_[files_slot_];
  }
  if (!files) return;
  // Opened like any entry (lazily, kept while used, closed when idle); one that fails
  // (an I/O error) shows nothing at the root and says why in the log, as an entry's ERROR.
  const RunNode top = OpenEntry(*files, kRootIno);
  if (top.kind != RunNode::Kind::kVolume) return;
  // Only the stored files and folders are shown (a files-only Layout has nothing else), and
  // a stored file the Layout hid behind a view's name is not (never a view's bytes).
  const Checkpoint& ckpt = top.volume->checkpoint();
  const Layout& layout = top.volume->layout();
  // A checkpoint shown with its views (a sentence-transformers model's top): all of it.
  const bool all = files->entry.views;
  std::set<std::string, std::less<>> stored;
  for (const StoredFile& f : ckpt.others) {
    if (f.name.find('/') == std::string::npos) stored.insert(f.name);
  }
  for (const std::string& hidden : layout.hidden()) stored.erase(hidden);
  for (const uint64_t local : layout.Children(Layout::kRoot)) {
    const Node* node = layout.Find(local);
    const std::string name(node->name());
    const bool shown = all || (node->kind == NodeKind::kDirectory
                                   ? std::find(ckpt.folders.begin(), ckpt.folders.end(), name) !=
                                         ckpt.folders.end()
                                   : node->kind == NodeKind::kFile && stored.count(name));
    if (!shown || !names.insert(name).second) continue;
    RunNode child = top;
    child.ino = top.Global(local);
    child.short_lived = true;  // the root's names change with SOURCE's
    out.emplace_back(name, std::move(child));
  }
}

}  // namespace ckptfs
