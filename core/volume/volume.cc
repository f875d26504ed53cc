#include "core/volume/volume.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/cache/disk_cache.h"
#include "core/checkpoint/format_reader.h"
#include "core/encoding/safetensors.h"
#include "core/format/formats.h"

namespace ckptfs {

uint64_t CurrentRssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<uint64_t>(resident) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE))
                : 0;
}

namespace {

// Opening is over for every stored file (see ByteSource::BeginServing). Each shard learns
// where its storages begin and end first (ByteSource::SetBlockCuts).
void BeginServing(Checkpoint& ckpt) {
  std::vector<std::vector<uint64_t>> cuts(ckpt.shards.size());
  for (const Storage& storage : ckpt.storages) {
    StoredRange one;
    for (const StoredRange& r : RangesOf(ckpt, storage, one)) {
      if (r.shard >= cuts.size()) continue;  // decoded data: in memory
      cuts[r.shard].push_back(r.offset);
      cuts[r.shard].push_back(r.offset + r.size);
    }
  }
  for (size_t s = 0; s < cuts.size(); ++s) ckpt.shards[s].source->SetBlockCuts(std::move(cuts[s]));
  for (auto* group : {&ckpt.shards, &ckpt.index, &ckpt.others}) {
    for (StoredFile& f : *group) f.source->BeginServing();
  }
}

}  // namespace

Result<std::unique_ptr<Volume>> Volume::Open(const std::string& source_path,
                                             const ReadOptions& read_options, ZipCrcMode zip_crc,
                                             const OpenOptions& open) {
  auto context = std::make_shared<ReadContext>(read_options);
  CKPTFS_ASSIGN_OR_RETURN(SourceDir dir, OpenSourceDir(source_path, *context, open.remote));
  return OpenListed(dir, source_path, std::move(context), zip_crc, open);
}

Result<std::unique_ptr<Volume>> Volume::OpenListed(const SourceDir& dir,
                                                   const std::string& source_path,
                                                   std::shared_ptr<ReadContext> context,
                                                   ZipCrcMode zip_crc, const OpenOptions& open) {
  CKPTFS_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint(source_path, *context, open, &dir));
  // Reading every tensor (--zip-crc mount) is serving, not opening: a remote checkpoint's
  // open deadline bounds its headers, not a pass over all its bytes (each read keeps
  // --timeout).
  if (zip_crc == ZipCrcMode::kMount) BeginServing(ckpt);
  CrcStore store(CrcSidecarDir(open.remote.cache_dir));
  CKPTFS_ASSIGN_OR_RETURN(ZipCrcStatus crcs,
                          ResolveZipCrcs(ckpt, zip_crc, store, context->options().warn));
  auto volume = FromCheckpoint(std::move(ckpt), std::move(context));
  volume->zip_crcs_ = std::move(crcs);
  volume->crc_store_ = std::move(store);
  return volume;
}

std::unique_ptr<Volume> Volume::FromCheckpoint(Checkpoint ckpt,
                                               std::shared_ptr<ReadContext> context,
                                               ContextUse use) {
  BeginServing(ckpt);  // after --zip-crc too: a no-op for sources already serving
  auto volume = std::unique_ptr<Volume>(new Volume(std::move(ckpt), std::move(context), use));
  // Open resolves them; a checkpoint wrapped as it is says only what it carries.
  volume->zip_crcs_.missing = MissingCrcStorages(volume->ckpt_);
  if (!volume->zip_crcs_.missing.empty()) {
    volume->zip_crcs_.state = ZipCrcStatus::State::kUnknown;
    volume->zip_crcs_.origin = "no sidecar looked up";
  }
  // The layout holds metadata.json laid out; the compact text it was made from is read
  // again only by a format's inspect lines (DeepSpeed's ZeRO summary parses it). Kept, it
  // would be a second copy for the mount's lifetime (19 MB beside 35 for 300k TF
  // object-graph nodes).
  if (!FormatOf(volume->ckpt_).inspect) std::string().swap(volume->ckpt_.state_json);
  // Parsing headers and building the layout freed about as much as they keep; the daemon
  // forked from this process would otherwise carry those pages for its lifetime.
  ReleaseFreeMemory();
  return volume;
}

// Prefetch tasks and the CRC pass point at sources: stop them before the sources go.
Volume::~Volume() {
  crc_pass_.reset();
  if (context_use_ == ContextUse::kOwned) {
    context_->Shutdown();
  } else {
    context_->DropPending();
  }
}

void Volume::StartZipCrcPass(std::function<void(const std::string&)> log) {
  if (zip_crcs_.state != ZipCrcStatus::State::kPending || crc_pass_) return;
  crc_pass_ = std::make_unique<BackgroundCrcPass>(ckpt_, zip_crcs_, crc_store_, std::move(log));
}

namespace {

// stats.json's "zip_crc": whether pytorch_model.bin carries CRCs, and the pass's progress.
nlohmann::json ZipCrcJson(const ZipCrcStatus& status, const BackgroundCrcPass* pass) {
  std::string state = "known";
  if (status.state == ZipCrcStatus::State::kUnknown) state = "not_computed";
  if (status.state == ZipCrcStatus::State::kPending) {
    state = "pending";  // no pass started (inspect, or a front end that starts none)
    if (pass) {
      const BackgroundCrcPass::State s = pass->state();
      state = s == BackgroundCrcPass::State::kRunning ? "computing"
              : s == BackgroundCrcPass::State::kSaved ? "saved_for_next_mount"
                                                      : "failed";
    }
  }
  return {{"state", state},
          {"in_headers", status.state == ZipCrcStatus::State::kKnown},
          {"origin", status.origin},
          {"sidecar", status.sidecar_path},
          {"storages", status.missing.size()},
          {"bytes_total", status.missing_bytes},
          {"bytes_done", pass ? pass->bytes_done() : 0}};
}

}  // namespace

void Volume::IndexViews() {
  for (const auto* group : {&ckpt_.shards, &ckpt_.decoded, &ckpt_.index, &ckpt_.others}) {
    for (const StoredFile& f : *group) stored_of_.emplace(f.source.get(), &f);
  }
  view_names_ = layout_.view_roots();
  view_names_.emplace_back(kOtherView);
  view_counters_ = std::make_unique<ViewCounters[]>(view_names_.size());
  const auto other = static_cast<uint8_t>(std::min<size_t>(view_names_.size() - 1, 255));
  view_of_.assign(layout_.node_count() + 1, other);
  // A node belongs to the view whose root entry it is under; nodes are few hops deep.
  for (uint64_t ino = Layout::kRoot + 1; ino < view_of_.size(); ++ino) {
    uint64_t top = ino;
    for (const Node* n = layout_.Find(top); n && n->parent > Layout::kRoot; n = layout_.Find(top)) {
      top = n->parent;
    }
    const Node* root_entry = layout_.Find(top);
    if (!root_entry) continue;
    for (size_t v = 0; v + 1 < view_names_.size() && v < other; ++v) {
      if (root_entry->name() == view_names_[v]) {
        view_of_[ino] = static_cast<uint8_t>(v);
        break;
      }
    }
  }
}

std::unique_ptr<Readahead> Volume::NewReadahead(uint64_t ino) const {
  const Node* node = layout_.Find(ino);
  return context_->NewReadahead(node ? node->size : 0, ckpt_.remote);
}

void Volume::Prefetch(uint64_t ino, ByteRange range) const {
  for (const Extent& e : layout_.Extents(ino, range.begin, range.size())) {
    const uint64_t from = std::max(range.begin, e.file_offset);
    const uint64_t to = std::min(range.end, e.file_offset + e.length);
    layout_.Source(e.source).Prefetch(e.source_offset + (from - e.file_offset), to - from);
  }
}

Status Volume::PlanRead(uint64_t ino, uint64_t offset, uint64_t size, std::vector<ReadPiece>* plan,
                        Readahead* readahead) const {
  plan->clear();
  const Node* node = layout_.Find(ino);
  if (!node) return Status::NotFound("inode " + std::to_string(ino) + ": no such file");
  if (node->kind != NodeKind::kFile) {
    return Status::InvalidArgument(std::string(node->name()) + ": not a regular file with extents");
  }
  const uint64_t end = offset + std::min(size, node->size - std::min(offset, node->size));
  uint64_t stream_start = offset;
  ByteRange ahead;
  if (readahead && offset < end) ahead = readahead->OnRead(offset, end - offset, &stream_start);
  for (const Extent& e : layout_.Extents(ino, offset, size)) {
    // Clip the extent to the requested window.
    const uint64_t from = std::max(offset, e.file_offset);
    const uint64_t to = std::min(end, e.file_offset + e.length);
    const uint64_t skip = from - e.file_offset;
    ReadPiece piece{&layout_.Source(e.source), e.source_offset + skip, to - from,
                    !layout_.Stored(e.source)};
    // Reading the start of a tensor (np.load, a loader walking tensors): the rest of it
    // will follow, so let its source fetch or decode it ahead, in parallel. Not over a
    // network for a stream that came through an earlier tensor: its window fetches ahead,
    // and the kernel's own read-ahead past the one tensor a reader wanted touched the next
    // tensors' starts, which then fetched each of them whole. (A stream that began in a
    // header still has its first tensor fetched ahead.)
    const bool continued = ckpt_.remote && CameThroughATensor(ino, stream_start, e.file_offset);
    if (e.tensor && skip == 0 && piece.length < e.length && !continued) {
      piece.source->Prefetch(piece.offset + piece.length, e.length - piece.length);
    }
    plan->push_back(piece);
  }
  if (!ahead.empty() && ckpt_.remote) ahead = WithinFirstTensor(ino, ahead, end, stream_start);
  if (!ahead.empty()) Prefetch(ino, ahead);
  return Status::Ok();
}

bool Volume::CameThroughATensor(uint64_t ino, uint64_t stream_start, uint64_t here) const {
  // Far below, it has: and the walk over the extents between stays short.
  constexpr uint64_t kLookBack = uint64_t{64} << 20;
  if (here <= stream_start) return false;
  if (here - stream_start > kLookBack) return true;
  for (const Extent& e : layout_.Extents(ino, stream_start, here - stream_start)) {
    if (e.tensor) return true;
  }
  return false;
}

ByteRange Volume::WithinFirstTensor(uint64_t ino, ByteRange ahead, uint64_t end,
                                    uint64_t stream_start) const {
  // Reading the start of a tensor already fetches the rest of it (PlanRead), so within a
  // first tensor a window only fetches its neighbours'. A reader that has gone through
  // one tensor into the next reads on, and its window goes where it goes.
  if (end == 0) return ahead;
  for (const Extent& e : layout_.Extents(ino, end - 1, 1)) {
    if (!e.tensor || CameThroughATensor(ino, stream_start, e.file_offset)) return ahead;
    const uint64_t tensor_end = e.file_offset + e.length;
    if (ahead.end <= tensor_end) return ahead;
    return {ahead.begin, std::max(ahead.begin, tensor_end)};
  }
  return ahead;
}

namespace {

// Where a gathered piece goes: spans its source lends, or its bytes read into the caller's
// buffer at the piece's place in the reply. The buffer is sized to the whole reply once,
// when a piece is first copied, before any segment points into it.
class PieceSink final : public ReadSink {
 public:
  PieceSink(std::vector<LentBytes>* lent_to, std::vector<uint8_t>& buffer, uint64_t total,
            uint64_t at, uint64_t length)
      : ReadSink(lent_to), buffer_(buffer), total_(total), at_(at), length_(length) {}
  std::span<uint8_t> Fill() override {
    if (buffer_.size() < total_) buffer_.resize(total_);
    filled_ = true;
    return {buffer_.data() + at_, length_};
  }
  bool filled() const { return filled_; }

 private:
  std::vector<uint8_t>& buffer_;
  uint64_t total_, at_, length_;
  bool filled_ = false;
};

}  // namespace

Status Volume::Gather(std::span<const ReadPiece> plan, bool descriptors,
                      std::vector<uint8_t>& buffer, Gathered* out,
                      const ByteSource** failed) const {
  uint64_t total = 0;
  for (const ReadPiece& p : plan) total += p.length;
  std::vector<LentBytes> lent;
  uint64_t at = 0;  // where the piece goes in the reply
  for (const ReadPiece& p : plan) {
    const uint64_t here = at;
    at += p.length;
    // The segment before, when it is this piece's file by descriptor: checked unchanged
    // already for this read.
    ReplySegment* last = out->segments.empty() || out->segments.back().source != p.source
                             ? nullptr
                             : &out->segments.back();
    Status s;
    if (p.source->Fd() >= 0 && (last || (s = p.source->CheckUnchanged()).ok()) && descriptors) {
      // Tensors that follow each other in a shard are one range of its descriptor.
      if (last && last->offset + last->length == p.offset) {
        last->length += p.length;
      } else {
        out->segments.push_back({nullptr, p.source->Fd(), p.offset, p.length, p.source});
      }
    } else if (s.ok()) {
      PieceSink sink(&lent, buffer, total, here, p.length);
      s = p.source->Read(p.offset, p.length, sink);
      if (s.ok() && sink.filled()) {
        out->segments.push_back({buffer.data() + here, -1, 0, p.length});
      } else if (s.ok()) {
        for (LentBytes& l : lent) {
          out->segments.push_back({l.bytes.data(), -1, 0, l.bytes.size()});
          if (l.keep_alive) out->keep_alive.push_back(std::move(l.keep_alive));
        }
      }
      lent.clear();
    }
    if (!s.ok()) {
      *failed = p.source;
      return s;
    }
    Stats::Add(p.made ? stats_.bytes_synthesized : stats_.bytes_fetched, p.length);
  }
  return Status::Ok();
}

namespace {

// Makes `gathered` one segment in `buffer` (at least the reply's size, from Gather): each
// segment's bytes go to their place in the reply, read by their source if they were a
// descriptor's, copied otherwise (unless Gather already read them there).
Status Flatten(Gathered& gathered, std::vector<uint8_t>& buffer, const ByteSource** failed) {
  uint64_t total = 0;
  for (const ReplySegment& seg : gathered.segments) total += seg.length;
  if (buffer.size() < total) buffer.resize(total);
  uint64_t at = 0;
  for (const ReplySegment& seg : gathered.segments) {
    uint8_t* dest = buffer.data() + at;
    if (seg.fd >= 0) {
      if (Status s = seg.source->ReadAt(seg.offset, {dest, seg.length}); !s.ok()) {
        *failed = seg.source;
        return s;
      }
    } else if (seg.data != dest) {
      std::memcpy(dest, seg.data, seg.length);
    }
    at += seg.length;
  }
  gathered.segments = {ReplySegment{buffer.data(), -1, 0, total}};
  return Status::Ok();
}

}  // namespace

Status Volume::Read(uint64_t ino, uint64_t offset, uint64_t size, Readahead* readahead,
                    const ReplyLimits& limits, std::vector<uint8_t>& buffer, Gathered* out,
                    ReadError* reported) const {
  thread_local std::vector<ReadPiece> plan;  // reused: its capacity stays with the thread
  const auto started = std::chrono::steady_clock::now();
  // Decodes and fetches done for this read, and the prefetches it starts, count for its view.
  ViewCounters* view = ViewOf(ino);
  ScopedWorkCounters charge(view);
  const ByteSource* failed = nullptr;
  auto fail = [&](const Status& status) {
    Stats::Add(stats_.read_errors, 1);
    ReadError error;
    if (RecordFailure(ino, failed, status, &error) && reported) *reported = std::move(error);
    return status;
  };
  if (Status s = PlanRead(ino, offset, size, &plan, readahead); !s.ok()) return fail(s);
  Stats::Add(stats_.reads, 1);
  Stats::Add(stats_.reads_by_size[Stats::SizeClass(size)], 1);
  uint64_t total = 0;
  for (const ReadPiece& p : plan) total += p.length;
  Stats::Add(stats_.bytes_read, total);
  Status s = Gather(plan, limits.descriptors, buffer, out, &failed);
  plan.clear();
  if (s.ok() && view) Stats::Add(view->bytes_served, total);
  // writev takes at most IOV_MAX pieces, and a reply the kernel refuses leaves its reader
  // waiting forever: a read across many tiny tensors (a thousand small records in 1 MiB of
  // pytorch_model.bin) goes out as one copied piece instead. So does a spliced reply of
  // more pieces than the front end's pipe holds, which libfuse would copy less well.
  auto by_descriptor = [&] {
    return std::any_of(out->segments.begin(), out->segments.end(),
                       [](const ReplySegment& seg) { return seg.fd >= 0; });
  };
  if (s.ok() && (out->segments.size() >= limits.max_segments ||
                 (out->segments.size() > limits.max_descriptor_segments && by_descriptor()))) {
    s = Flatten(*out, buffer, &failed);
  }
  if (s.ok()) CountReply(*out, buffer);
  Stats::Add(stats_.gather_ns,
             static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - started)
                                       .count()));
  return s.ok() ? s : fail(s);
}

std::string Volume::PathOf(uint64_t ino) const {
  std::string path;
  for (const Node* n = layout_.Find(ino); n && ino != Layout::kRoot; n = layout_.Find(ino)) {
    path = path.empty() ? std::string(n->name()) : std::string(n->name()) + "/" + path;
    ino = n->parent;
  }
  return path;
}

bool Volume::RecordFailure(uint64_t ino, const ByteSource* source, const Status& status,
                           ReadError* out) const {
  ReadError error;
  error.file = PathOf(ino);
  error.reason = status.message();
  // The stored file: the failed source's, or for bytes a view makes from stored files (a
  // converted tensor), the stored file the message starts with (sources name themselves).
  const StoredFile* stored = nullptr;
  if (auto it = stored_of_.find(source); it != stored_of_.end()) stored = it->second;
  for (auto it = stored_of_.begin(); !stored && it != stored_of_.end(); ++it) {
    if (error.reason.starts_with(it->first->Name() + ": ")) stored = it->second;
  }
  const std::string name = stored ? stored->source->Name() : source ? source->Name() : "";
  error.source = stored ? StoredPath(ckpt_.source_path, stored->stored_name) : name;
  if (!name.empty() && error.reason.starts_with(name + ": ")) {
    error.reason.erase(0, name.size() + 2);
  }
  if (!errors_.Record(error)) return false;
  *out = std::move(error);
  return true;
}

void Volume::CountReply(const Gathered& out, const std::vector<uint8_t>& buffer) const {
  const uint8_t* begin = buffer.data();
  const uint8_t* end = begin + buffer.size();
  uint64_t copied = 0, lent = 0, by_descriptor = 0;
  for (const ReplySegment& seg : out.segments) {
    if (seg.fd >= 0) {
      by_descriptor += seg.length;
    } else if (seg.data >= begin && seg.data < end) {
      copied += seg.length;
    } else {
      lent += seg.length;
    }
  }
  if (copied) Stats::Add(stats_.bytes_copied, copied);
  if (lent) Stats::Add(stats_.bytes_lent, lent);
  if (by_descriptor) Stats::Add(stats_.bytes_by_descriptor, by_descriptor);
}

Status Volume::ReadInto(std::span<const ReadPiece> plan, uint8_t* out) const {
  for (const ReadPiece& p : plan) {
    Status s = p.source->ReadAt(p.offset, {out, p.length});
    if (!s.ok()) {
      Stats::Add(stats_.read_errors, 1);
      return s;
    }
    Stats::Add(p.made ? stats_.bytes_synthesized : stats_.bytes_fetched, p.length);
    out += p.length;
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> Volume::Xattrs(uint64_t ino) const {
  const Node* node = layout_.Find(ino);
  if (!node || node->tensor < 0) return {};
  const auto i = static_cast<size_t>(node->tensor);
  TypeShown type = TypeOf(ckpt_, i);
  std::vector<std::pair<std::string, std::string>> out = {
      {"user.ckptfs.dtype", std::move(type.dtype)},
      {"user.ckptfs.shape", ShapeToJson(type.shape)},
      {"user.ckptfs.name", ckpt_.tensors[i].name}};
  if (std::optional<BlockType> blocks = BlocksOf(ckpt_, i)) {
    // Its bytes are blocks: how many elements a block holds, in how many bytes.
    out.emplace_back("user.ckptfs.block_size", std::to_string(blocks->block_elements));
    out.emplace_back("user.ckptfs.block_bytes", std::to_string(blocks->block_bytes));
  }
  if (const std::span<const std::string> keys = TensorKeys(ckpt_); !keys.empty()) {
    out.emplace_back("user.ckptfs.tf_key", keys[static_cast<size_t>(node->tensor)]);
  }
  return out;
}

std::string Volume::StatsJson() const {
  auto load = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stats_.started).count();
  nlohmann::json j = {
      {"source", ckpt_.source_path},
      {"shards", ckpt_.shards.size()},
      {"tensors", ckpt_.tensors.size()},
      {"tensor_bytes", ckpt_.TotalTensorBytes()},
      {"uptime_seconds", uptime},
      {"reads", load(stats_.reads)},
      {"bytes_read", load(stats_.bytes_read)},
      {"bytes_fetched", load(stats_.bytes_fetched)},
      {"bytes_synthesized", load(stats_.bytes_synthesized)},
      {"read_errors", load(stats_.read_errors)},
      {"opens", load(stats_.opens)},
      {"replies_spliced", stats_.replies_spliced.load(std::memory_order_relaxed)},
      {"rss_bytes", CurrentRssBytes()},
      {"bytes_decompressed", load(context_->bytes_decoded)},
      {"compressed_bytes_read", load(context_->compressed_bytes_read)},
      {"frames_decoded", load(context_->frames_decoded)},
      {"decode_errors", load(context_->decode_errors)},
      {"prefetched_frames", load(context_->prefetches)},
  };
  nlohmann::json by_size = nlohmann::json::object();
  static constexpr const char* kSizeClasses[] = {"4K", "64K", "256K", "1M", "more"};
  for (size_t i = 0; i < 5; ++i) by_size[kSizeClasses[i]] = load(stats_.reads_by_size[i]);
  j["requests"] = {{"by_size", std::move(by_size)},
                   {"gather_seconds", static_cast<double>(load(stats_.gather_ns)) / 1e9},
                   {"reply_seconds", static_cast<double>(load(stats_.reply_ns)) / 1e9},
                   {"bytes_copied", load(stats_.bytes_copied)},
                   {"bytes_lent", load(stats_.bytes_lent)},
                   {"bytes_by_descriptor", load(stats_.bytes_by_descriptor)}};
  if (ckpt_.remote) {
    j["remote"] = {{"bytes_fetched", load(context_->remote_bytes_fetched)},
                   {"requests", load(context_->remote_requests)},
                   {"prefetched_blocks", load(context_->remote_prefetches)},
                   {"disk_cache_bytes", load(context_->disk_cache_bytes)}};
    const FetchLimit::Snapshot limit = context_->fetch_limit().snapshot();
    j["remote"]["in_flight_limit"] = limit.limit;
    j["remote"]["in_flight_now"] = limit.in_flight;
    j["remote"]["in_flight_max_seen"] = limit.max_seen;
    j["remote"]["fetch_ms_per_mib_best"] = limit.best_ms_per_mib;
    j["remote"]["fetch_ms_per_mib_recent"] = limit.recent_ms_per_mib;
    if (const DiskCache* disk = context_->disk_cache()) {
      const DiskCache::Counters d = disk->counters();
      j["disk_cache"] = {{"hits", d.hits},
                         {"misses", d.misses},
                         {"corrupt", d.corrupt},
                         {"bytes_used", d.bytes_used},
                         {"bytes_written", d.bytes_written},
                         {"evictions", d.evictions},
                         {"write_errors", d.write_errors},
                         {"claim_waits", d.claim_waits}};
    }
  }
  // Per view: bytes served against the work done for them shows read amplification.
  nlohmann::json views = nlohmann::json::object();
  for (size_t v = 0; v < view_names_.size(); ++v) {
    const bool last = v + 1 == view_names_.size();
    if (!last && layout_.Lookup(Layout::kRoot, view_names_[v]) == 0) continue;  // shows nothing
    const ViewCounters& c = view_counters_[v];
    nlohmann::json entry = {{"bytes_served", load(c.bytes_served)},
                            {"bytes_decoded", load(c.bytes_decoded)},
                            {"compressed_bytes_read", load(c.compressed_bytes_read)}};
    if (ckpt_.remote) entry["bytes_fetched"] = load(c.remote_bytes_fetched);
    views[view_names_[v]] = std::move(entry);
  }
  j["views"] = std::move(views);
  j["errors"] = ErrorsJson(errors_);
  j["zip_crc"] = ZipCrcJson(zip_crcs_, crc_pass_.get());
  const BlockCache::Counters c = context_->cache().counters();
  j["cache"] = {{"capacity_bytes", c.capacity_bytes},
                {"charged_bytes", c.charged_bytes},
                {"pinned_bytes", c.pinned_bytes},
                {"entries", c.entries},
                {"hits", c.hits},
                {"misses", c.misses},
                {"coalesced", c.coalesced},
                {"evictions", c.evictions},
                {"load_errors", c.load_errors}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ckptfs
