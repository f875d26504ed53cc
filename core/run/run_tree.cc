#include "core/run/run_tree.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/run/run_slot.h"
#include "core/transient.h"
#include "core/volume/stats.h"

namespace ckptfs {
using namespace run_nodes;
namespace {

// A transient failure is tried again after kRetryFirst, then after twice as long each
// time it fails again, up to kRetryMost.
constexpr RunClock::duration kRetryFirst = std::chrono::seconds(1);
constexpr RunClock::duration kRetryMost = std::chrono::seconds(30);
// Entries opened at once: each holds its files (and a sharded one reads them on threads)
// before it counts in the bound on held descriptors.
constexpr int kMaxOpening = 4;
constexpr size_t kMinHeldFiles = 64;

// Descriptors an open checkpoint holds: one per stored local file.
size_t FilesHeld(const Checkpoint& ckpt) {
  if (ckpt.remote) return 0;
  return ckpt.shards.size() + ckpt.index.size() + ckpt.others.size() + (ckpt.packed_crcs ? 1 : 0);
}

size_t DefaultMaxHeldFiles() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 1u << 20;
  return std::max<size_t>(kMinHeldFiles, static_cast<size_t>(lim.rlim_cur / 2));
}

// What a reopened Layout must match to keep its slot's inodes: every node's kind, size
// and parent. Layout is deterministic, so an unchanged checkpoint always matches.
uint64_t Shape(const Layout& layout) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(layout.node_count());
  for (uint64_t i = 1; i <= layout.node_count(); ++i) {
    const Node* n = layout.Find(i);
    mix(n->size);
    mix(n->parent);
    mix(static_cast<uint64_t>(n->kind));
  }
  return h;
}

}  // namespace

RunNode RunNode::Single(std::shared_ptr<Volume> volume) {
  RunNode node;
  node.kind = Kind::kVolume;
  node.ino = Layout::kRoot;
  node.volume = std::move(volume);
  node.root_ino = Layout::kRoot;
  return node;
}

RunTree::RunTree(RunSource source, std::shared_ptr<ReadContext> context, RunTreeOptions options)
    : source_(std::move(source)), context_(std::move(context)), options_(std::move(options)) {
  ::clock_gettime(CLOCK_REALTIME, &started_);
  if (options_.max_held_files == 0) options_.max_held_files = DefaultMaxHeldFiles();
  slots_.emplace_back();  // slot 0 is the run's own
}

Result<std::unique_ptr<RunTree>> RunTree::Open(RunSource source,
                                               std::shared_ptr<ReadContext> context,
                                               RunTreeOptions options) {
  CKPTFS_ASSIGN_OR_RETURN(RunListing listing, source.list());
  std::unique_ptr<RunTree> tree(new RunTree(std::move(source), std::move(context), options));
  tree->pipeline_ = listing.pipeline;
  tree->Apply(listing, /*initial=*/true);
  tree->CheckPointers();
  const std::string& pin = tree->options_.pin;
  std::string names;
  for (const std::string& n : tree->EntryNames()) names += (names.empty() ? "" : ", ") + n;
  if (names.empty()) names = "none";
  if (!pin.empty() && pin != "latest" && pin != "best" &&
      (!tree->Shown(pin) || pin == kPipelineFilesEntry)) {
    return Status::InvalidArgument(tree->source_.path + ": --checkpoint " + pin +
                                   ": no such complete checkpoint in the run (entries: " + names +
                                   ")");
  }
  // A root following a best nobody records would stay empty: say what the run does record.
  if (pin == "best" && tree->Best().empty()) {
    const std::string latest = tree->Latest();
    return Status::InvalidArgument(
        tree->source_.path +
        ": --checkpoint best: the run records no best checkpoint (no best_model_checkpoint "
        "in trainer_state.json, no best_model_path in a Lightning .ckpt); it records latest " +
        (latest.empty()             ? "none"
         : latest == listing.latest ? latest + " (" + listing.latest_from + ")"
                                    : latest) +
        " and entries " + names + "; use --checkpoint latest or an entry name");
  }
  return tree;
}

RunTree::~RunTree() { StopWatching(); }

std::vector<std::string> RunTree::Apply(const RunListing& listing, bool initial) {
  std::vector<std::string> changed;
  std::vector<std::shared_ptr<Slot>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const RunClock::time_point now = options_.now();
    std::map<std::string, uint32_t> next;
    std::vector<std::string> order;
    std::map<std::string, Candidate> candidates;
    std::vector<const RunEntry*> entries;
    for (const RunEntry& e : listing.entries) entries.push_back(&e);
    if (listing.top_files) entries.push_back(&*listing.top_files);
    for (const RunEntry* entry : entries) {
      const RunEntry& e = *entry;
      if (!e.complete) continue;
      auto it = shown_.find(e.name);
      if (it != shown_.end() && slots_[it->second]->entry.signature == e.signature) {
        next[e.name] = it->second;
        order.push_back(e.name);
        continue;
      }
      // New or rewritten: shown once two listings `stable` apart agree on it. Top files
      // being rewritten (DeepSpeed's `latest` at each save) stay shown as they were.
      if (!initial) {
        auto c = candidates_.find(e.name);
        const bool keep = e.kind == RunEntry::Kind::kFiles && it != shown_.end();
        if (c == candidates_.end() || c->second.signature != e.signature) {
          candidates[e.name] = {e.signature, now};
          if (keep) next[e.name] = it->second, order.push_back(e.name);
          continue;
        }
        if (now - c->second.first_seen < options_.stable) {
          candidates[e.name] = c->second;
          if (keep) next[e.name] = it->second, order.push_back(e.name);
          continue;
        }
      }
      const auto id = static_cast<uint32_t>(slots_.size());
      slots_.push_back(std::make_shared<Slot>(id, e));
      next[e.name] = id;
      order.push_back(e.name);
      // A training run's file and directory entries are also their own files, by name.
      const bool own = e.kind == RunEntry::Kind::kFile || e.kind == RunEntry::Kind::kDirectory;
      if (own && !pipeline_) {
        const auto twin = static_cast<uint32_t>(slots_.size());
        slots_.push_back(std::make_shared<Slot>(twin, e));
        slots_[twin]->own_files = true;
        slots_[id]->twin = twin;
      }
    }
    // Top files (kFiles) are shown in the root itself, not as an entry.
    files_slot_ = 0;
    std::erase_if(order, [&](const std::string& name) {
      if (slots_[next[name]]->entry.kind != RunEntry::Kind::kFiles) return false;
      files_slot_ = next[name];
      return true;
    });
    for (const auto& [name, id] : shown_) {
      auto it = next.find(name);
      if (it != next.end() && it->second == id) continue;
      for (const uint32_t gone : {id, slots_[id]->twin}) {
        if (gone == 0) continue;
        slots_[gone]->retired = true;
        retired.push_back(slots_[gone]);
      }
      changed.push_back(name);
    }
    for (const auto& [name, id] : next) {
      if (!shown_.count(name)) changed.push_back(name);
    }
    // The root's names for top files time out in a second (short_lived): no entry name.
    std::erase(changed, std::string(kPipelineFilesEntry));
    // `latest` and `best` name shown entries only. While the listing's latest is not shown
    // yet (not stable), the old one stays if still shown, else the shown entry with the
    // highest step (else the last shown): never a dangling link while training deletes.
    // A checkpoint that failed to open (CheckPointers) is never either.
    auto valid = [&](const std::string& name) {
      auto it = next.find(name);
      return it != next.end() && !failed_.count(it->second);
    };
    auto pick = [&](const std::string& wanted, const std::string& old) {
      return valid(wanted) ? wanted : valid(old) ? old : std::string();
    };
    std::string latest = pick(listing.latest, latest_);
    if (latest.empty() && !listing.latest.empty()) {
      std::optional<uint64_t> top;
      for (const std::string& name : order) {
        if (!valid(name)) continue;
        const std::optional<uint64_t>& step = slots_[next[name]]->entry.step;
        if (latest.empty() || (step && (!top || *step >= *top))) {
          if (step) top = step;
          latest = name;
        }
      }
    }
    std::string best = pick(listing.best, best_);
    if (latest != latest_) changed.push_back("latest");
    if (best != best_) changed.push_back("best");
    shown_ = std::move(next);
    order_ = std::move(order);
    candidates_ = std::move(candidates);
    latest_ = std::move(latest);
    best_ = std::move(best);
    skipped_ = listing.skipped;
    last_list_ = now;
  }
  // Outside mu_: a slot's lock may be held by a long open. Open files keep their Volume.
  for (const auto& slot : retired) {
    std::shared_ptr<Volume> closing;
    std::lock_guard<std::mutex> lock(slot->mu);
    closing = TakeVolume(*slot);
  }
  return changed;
}

std::shared_ptr<RunTree::Slot> RunTree::SlotOf(uint64_t slot_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot_id == 0 || slot_id >= slots_.size()) return nullptr;
  auto slot = slots_[slot_id];
  return slot->retired ? nullptr : slot;
}

std::shared_ptr<RunTree::Slot> RunTree::Shown(const std::string& name) const {
  auto it = shown_.find(name);
  return it == shown_.end() ? nullptr : slots_[it->second];
}

std::shared_ptr<RunTree::Slot> RunTree::PinnedSlot() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& pin = options_.pin;
  return Shown(pin == "latest" ? latest_ : pin == "best" ? best_ : pin);
}

RunNode RunTree::RootNode() const {
  RunNode node;
  node.kind = RunNode::Kind::kDirectory;
  node.ino = kRootIno;
  node.short_lived = node.short_children = true;
  return node;
}

RunNode RunTree::EntryDir(const Slot& slot, uint64_t root_ino) const {
  RunNode node;
  node.ino = root_ino;
  node.mtime = slot.entry.mtime;
  node.mode = slot.entry.mode;
  // A training run's views are in views/; an entry's own files and a pipeline's
  // components at the root.
  node.parent = slot.own_files || pipeline_ ? kRootIno : kViewsIno;
  node.short_lived = true;
  node.short_children = root_ino == kRootIno;  // a pinned root follows its target
  if (slot.volume) {
    node.kind = RunNode::Kind::kVolume;
    node.volume = slot.volume;
    node.base = slot.base();
    node.root_ino = root_ino;
  }
  return node;
}

RunNode RunTree::OpenEntry(Slot& slot, uint64_t root_ino) {
  std::lock_guard<std::mutex> lock(slot.mu);
  const RunClock::time_point now = options_.now();
  slot.last_used = Ticks(now);
  const bool due = slot.error.empty() || (slot.transient && now >= slot.retry_at);
  if (!slot.volume && due && !slot.retired) OpenLocked(slot);
  return EntryDir(slot, root_ino);
}

void RunTree::OpenLocked(Slot& slot) {
  {
    std::unique_lock<std::mutex> lock(opening_mu_);
    opening_cv_.wait(lock, [this] { return opening_ < kMaxOpening; });
    ++opening_;
  }
  MakeRoom(slot);
  Result<Checkpoint> ckpt =
      !slot.own_files ? source_.open(slot.entry, *context_)
      : source_.open_files
          ? source_.open_files(slot.entry, *context_)
          : Result<Checkpoint>(Status::NotFound(slot.entry.name + ": no own files"));
  {
    std::lock_guard<std::mutex> lock(opening_mu_);
    --opening_;
  }
  opening_cv_.notify_one();
  if (!ckpt.ok()) {
    // One line naming the entry: the reader's message may name only a file inside it.
    slot.error = ckpt.status().message();
    if (slot.error.find(slot.entry.name) == std::string::npos) {
      slot.error = slot.entry.name + ": " + slot.error;
    }
    slot.transient = IsTransient(ckpt.status());
    if (slot.transient) {
      slot.backoff = std::clamp(slot.backoff * 2, kRetryFirst, kRetryMost);
      // From when it failed: an open that waits out a timeout is not tried back to back.
      slot.retry_at = options_.now() + slot.backoff;
      slot.error += " (tried again on the next use)";
    }
    return;
  }
  const size_t files = FilesHeld(ckpt.value());
  std::shared_ptr<Volume> volume =
      Volume::FromCheckpoint(std::move(ckpt.value()), context_, ContextUse::kShared);
  const uint64_t shape = Shape(volume->layout());
  if (slot.shape != 0 && slot.shape != shape) {
    // Its files changed since the first open, before a listing noticed: these inodes
    // must not show the new bytes. The next listing gives it a new slot.
    slot.retired = true;
    slot.error = slot.entry.name + ": changed since first opened";
    slot.transient = false;
    return;
  }
  slot.error.clear();
  slot.transient = false;
  slot.backoff = {};
  slot.shape = shape;
  slot.volume = std::move(volume);
  slot.files = files;
  held_files_ += files;
}

std::shared_ptr<Volume> RunTree::TakeVolume(Slot& slot) {
  held_files_ -= slot.files;
  slot.files = 0;
  return std::move(slot.volume);
}

void RunTree::MakeRoom(const Slot& opening) {
  if (held_files_ < options_.max_held_files) return;
  std::vector<std::shared_ptr<Slot>> slots = ShownSlots();
  std::sort(slots.begin(), slots.end(),
            [](const auto& a, const auto& b) { return a->last_used < b->last_used; });
  for (const auto& slot : slots) {
    if (held_files_ < options_.max_held_files) return;
    if (slot.get() == &opening) continue;
    std::shared_ptr<Volume> closing;
    // try_lock: a slot busy opening (its thread may be here too) is not idle anyway.
    std::unique_lock<std::mutex> lock(slot->mu, std::try_to_lock);
    // use_count 1: only the slot holds it, no open file or request in flight.
    if (!lock.owns_lock() || !slot->volume || slot->volume.use_count() > 1) continue;
    closing = TakeVolume(*slot);
  }
}

std::vector<std::string> RunTree::CheckPointers() {
  std::vector<std::string> changed;
  // A checkpoint that failed for a while (a server away, descriptors out) may be latest or
  // best again once it opens: tried again when due, and the next listing may pick it.
  std::vector<std::shared_ptr<Slot>> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t id : failed_) failed.push_back(slots_[id]);
  }
  for (const std::shared_ptr<Slot>& slot : failed) {
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      if (!slot->transient || slot->retired) continue;
    }
    OpenEntry(*slot, slot->base() | Layout::kRoot);
    bool opened = false;
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      opened = slot->error.empty() && slot->shape != 0;
    }
    if (!opened) continue;
    std::lock_guard<std::mutex> lock(mu_);
    failed_.erase(slot->id);
  }
  // Each round opens one more checkpoint (headers only, kept as a first use would keep
  // them); a run whose every checkpoint fails ends with no latest after as many rounds.
  size_t rounds = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rounds = slots_.size();
  }
  for (size_t round = 0; round <= rounds; ++round) {
    std::shared_ptr<Slot> latest, best;
    {
      std::lock_guard<std::mutex> lock(mu_);
      latest = Shown(latest_);
      best = Shown(best_);
    }
    std::shared_ptr<Slot> bad;
    for (const std::shared_ptr<Slot>& slot : {latest, best}) {
      if (!slot || bad) continue;
      {
        std::lock_guard<std::mutex> lock(slot->mu);
        if (slot->shape != 0) continue;  // opened fine once: valid for the slot's life
      }
      OpenEntry(*slot, slot->base() | Layout::kRoot);
      std::lock_guard<std::mutex> lock(slot->mu);
      if (!slot->error.empty()) bad = slot;
    }
    if (!bad) break;
    std::lock_guard<std::mutex> lock(mu_);
    failed_.insert(bad->id);
    if (bad->entry.name == best_) {
      best_.clear();
      changed.push_back("best");
    }
    if (bad->entry.name != latest_) continue;
    // The shown entry of highest step (else the last) that has not failed.
    std::string next;
    std::optional<uint64_t> top;
    for (const std::string& name : order_) {
      std::shared_ptr<Slot> slot = Shown(name);
      if (!slot || failed_.count(slot->id)) continue;
      if (next.empty() || (slot->entry.step && (!top || *slot->entry.step >= *top))) {
        if (slot->entry.step) top = slot->entry.step;
        next = name;
      }
    }
    latest_ = next;
    changed.push_back("latest");
  }
  return changed;
}

Status RunTree::Relist() {
  std::lock_guard<std::mutex> lock(relist_mu_);
  CKPTFS_ASSIGN_OR_RETURN(RunListing listing, source_.list());
  std::vector<std::string> changed = Apply(listing, /*initial=*/false);
  for (std::string& name : CheckPointers()) changed.push_back(std::move(name));
  Notify(changed);
  return Status::Ok();
}

void RunTree::MaybeRelist() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!source_.watch_dir.empty() || options_.now() - last_list_ < options_.relist) return;
  }
  std::unique_lock<std::mutex> lock(relist_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is listing now
  Result<RunListing> listing = source_.list();
  // A failed listing (server away) keeps what is shown; the next root access tries again.
  if (listing.ok()) {
    Apply(*listing, /*initial=*/false);
    CheckPointers();
  }
}

std::vector<std::shared_ptr<RunTree::Slot>> RunTree::ShownSlots() const {
  std::vector<std::shared_ptr<Slot>> slots;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, id] : shown_) {
    slots.push_back(slots_[id]);
    if (slots_[id]->twin != 0) slots.push_back(slots_[slots_[id]->twin]);
  }
  return slots;
}

size_t RunTree::CloseIdle() {
  std::vector<std::shared_ptr<Slot>> slots = ShownSlots();
  const int64_t cutoff = Ticks(options_.now() - options_.idle_close);
  size_t closed = 0;
  for (const auto& slot : slots) {
    std::shared_ptr<Volume> closing;
    std::lock_guard<std::mutex> lock(slot->mu);
    // use_count 1: only the slot holds it, no open file or request in flight.
    if (!slot->volume || slot->volume.use_count() > 1 || slot->last_used > cutoff) continue;
    closing = TakeVolume(*slot);
    ++closed;
  }
  return closed;
}

void RunTree::Notify(const std::vector<std::string>& names) {
  if (!changed_) return;
  for (const std::string& name : names) changed_(name);
  if (!options_.pin.empty() && !names.empty()) changed_("");  // the pinned root may move
}

std::vector<std::string> RunTree::EntryNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  return order_;
}

bool RunTree::Pipeline() const { return pipeline_; }

std::string RunTree::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

std::vector<std::string> RunTree::Skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

std::string RunTree::Best() const {
  std::lock_guard<std::mutex> lock(mu_);
  return best_;
}

size_t RunTree::OpenVolumes() const {
  std::vector<std::shared_ptr<Slot>> slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : order_) slots.push_back(Shown(name));  // no top files
  }
  size_t open = 0;
  for (const auto& slot : slots) {
    std::lock_guard<std::mutex> lock(slot->mu);
    open += slot->volume != nullptr;
  }
  return open;
}

std::string RunTree::StatsJson() const {
  const BlockCache::Counters c = context_->cache().counters();
  nlohmann::json j;
  {
    std::lock_guard<std::mutex> lock(mu_);
    j = {{"source", source_.path},
         {"checkpoints", order_.size()},
         {"latest", latest_},
         {"best", best_},
         {"pending", candidates_.size()},
         {"slots_made", slots_.size() - 1},
         {"skipped", skipped_}};
  }
  j["checkpoints_open"] = OpenVolumes();
  j["files_held"] = HeldFiles();
  j["files_held_max"] = options_.max_held_files;
  {
    // Read errors of the checkpoints open now (a closed one's go with it), each file named
    // under its checkpoint.
    std::vector<std::pair<std::string, std::shared_ptr<Slot>>> slots;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [name, id] : shown_) slots.emplace_back(name, slots_[id]);
    }
    uint64_t total = 0;
    nlohmann::json recent = nlohmann::json::array();
    for (const auto& [name, slot] : slots) {
      std::shared_ptr<Volume> volume;
      {
        std::lock_guard<std::mutex> lock(slot->mu);
        volume = slot->volume;
      }
      if (!volume) continue;
      nlohmann::json one = ckptfs::ErrorsJson(volume->errors(), name + "/");
      total += one["total"].get<uint64_t>();
      for (auto& e : one["recent"]) recent.push_back(std::move(e));
    }
    // The newest ErrorLog::kKept of all, oldest first (ISO 8601 times sort as text).
    std::stable_sort(recent.begin(), recent.end(), [](const auto& a, const auto& b) {
      return a["time"].template get<std::string>() < b["time"].template get<std::string>();
    });
    if (recent.size() > ErrorLog::kKept) {
      recent.erase(recent.begin(), recent.end() - static_cast<std::ptrdiff_t>(ErrorLog::kKept));
    }
    j["errors"] = {{"total", total}, {"recent", std::move(recent)}};
  }
  j["rss_bytes"] = CurrentRssBytes();
  j["cache"] = {{"capacity_bytes", c.capacity_bytes},
                {"charged_bytes", c.charged_bytes},
                {"hits", c.hits},
                {"misses", c.misses},
                {"evictions", c.evictions}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ckptfs
