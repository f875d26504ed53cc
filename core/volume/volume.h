// Volume: one mounted checkpoint. Owns the Checkpoint (open files), its Layout and the
// live Stats, and answers the questions a file system front end asks: lookup, attributes,
// directory listing, extended attributes, and reads.
//
// A read crosses core once: Read plans it (PlanRead: (inode, offset, size) into pieces,
// each a range of one extent source: a stored file, or bytes a view makes), gathers the
// pieces into reply segments with no copy where the front end can take them (descriptors
// it splices, pinned cache blocks, bytes a view keeps), and copies only what it cannot. A read that
// starts a tensor tells the tensor's source to prefetch the rest of it; a read that
// continues a sequential stream prefetches the stream's next window. Prefetch stays inside
// the file being read, so reading one tensor file never decodes its neighbours. ReadInto
// copies a plan instead, for callers that want plain bytes. Either way a read crosses the
// layout once and touches each stored file once.
//
// Thread safety: every method is const or uses atomics; one Volume serves all FUSE worker
// threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cache/prefetch.h"
#include "core/cache/read_context.h"
#include "core/checkpoint/checkpoint.h"
#include "core/crc/zip_crc.h"
#include "core/layout/layout.h"
#include "core/status.h"
#include "core/volume/error_log.h"
#include "core/volume/stats.h"

namespace ckptfs {

struct ReadPiece {
  const ByteSource* source = nullptr;  // a stored file, or bytes a view makes (Layout::Source)
  uint64_t offset = 0;                 // in `source`
  uint64_t length = 0;
  bool made = false;  // the source is a view's (counted as bytes_synthesized)
};

// One contiguous part of a reply: bytes in memory, or a range of a file descriptor that
// the kernel can read (splice) itself.
struct ReplySegment {
  const uint8_t* data = nullptr;  // memory, valid while the Gathered lives
  int fd = -1;                    // or this descriptor (of `source`)...
  uint64_t offset = 0;            // ...at this offset
  uint64_t length = 0;
  const ByteSource* source = nullptr;  // with fd: what reads the same bytes without it
};

struct Gathered {
  std::vector<ReplySegment> segments;
  std::vector<std::shared_ptr<const void>> keep_alive;  // pinned cache blocks, copy buffers
};

// What a front end can send in one reply.
struct ReplyLimits {
  bool descriptors = true;    // segments may name a descriptor (the front end splices it)
  size_t max_segments = 256;  // a reply of more goes out as one copied segment
  // A reply naming a descriptor with more segments than this goes out copied as well: the
  // front end splices it through a pipe that holds only so many (fs/fuse_ops.cc).
  size_t max_descriptor_segments = 256;
};

// Whether a Volume owns its ReadContext (a single-checkpoint mount: closing the Volume
// stops the context's workers) or shares it with other Volumes (a run: closing one only
// drops the queued prefetches, so no task outlives the sources it reads).
enum class ContextUse : uint8_t { kOwned, kShared };

class Volume {
 public:
  // Storages without a CRC-32 (safetensors ones) get theirs as `zip_crc` says (see
  // core/crc/zip_crc.h): from a sidecar (kAuto, kMount), else computed now (kMount), else
  // left 0 for this mount (kAuto: StartZipCrcPass computes them for the next one). The
  // sidecars live in CrcSidecarDir(open.remote.cache_dir); ignored ones go to options.warn.
  static Result<std::unique_ptr<Volume>> Open(const std::string& source_path,
                                              const ReadOptions& options = {},
                                              ZipCrcMode zip_crc = ZipCrcMode::kAuto,
                                              const OpenOptions& open = {});
  // Open over SOURCE `source_path` as OpenSourceDir listed it (`dir`) with `context`.
  static Result<std::unique_ptr<Volume>> OpenListed(const SourceDir& dir,
                                                    const std::string& source_path,
                                                    std::shared_ptr<ReadContext> context,
                                                    ZipCrcMode zip_crc = ZipCrcMode::kAuto,
                                                    const OpenOptions& open = {});
  // Wraps an already opened checkpoint whose compressed sources use `context`.
  static std::unique_ptr<Volume> FromCheckpoint(Checkpoint ckpt,
                                                std::shared_ptr<ReadContext> context,
                                                ContextUse use = ContextUse::kOwned);
  ~Volume();

  // The checkpoint served. Its state_json is empty once the layout holds metadata.json,
  // unless the format's inspect lines (FormatReader::inspect) read it.
  const Checkpoint& checkpoint() const { return ckpt_; }
  const Layout& layout() const { return layout_; }
  Stats& stats() const { return stats_; }
  ReadContext& context() const { return *context_; }

  // Reads [offset, offset + size) of file `ino` for a reply (clipped at end of file):
  // plans it, gathers it into `out` as `limits` allow, and counts it in stats(). Bytes that
  // must be copied (descriptor segments when `limits` forbid them, every segment past
  // max_segments) go into `buffer`, the caller's, reused across its reads so its pages
  // stay mapped. The segments are valid while `out` and `buffer` live. Errors as
  // PlanRead's and the sources' (counted in stats().read_errors), each recorded in
  // errors(): when the record is new, not a retry of a read that just failed (ErrorLog),
  // it is also copied to `*reported` (if given) for the caller to log; otherwise
  // `reported->reason` stays empty.
  Status Read(uint64_t ino, uint64_t offset, uint64_t size, Readahead* readahead,
              const ReplyLimits& limits, std::vector<uint8_t>& buffer, Gathered* out,
              ReadError* reported = nullptr) const;

  // Pieces covering [offset, offset + size) of file `ino`, clipped at end of file (an
  // empty plan at or past the end). NotFound for a bad inode, InvalidArgument for a
  // directory or the stats file (whose bytes come from StatsJson).
  // With `readahead` (one per open file), a read that continues a sequential stream also
  // prefetches what the stream will read next, within the file.
  Status PlanRead(uint64_t ino, uint64_t offset, uint64_t size, std::vector<ReadPiece>* plan,
                  Readahead* readahead = nullptr) const;
  // A sequential-read detector for file `ino`, windows sized to the cache.
  std::unique_ptr<Readahead> NewReadahead(uint64_t ino) const;
  // Copies the planned bytes into `out`, which must hold their total length.
  Status ReadInto(std::span<const ReadPiece> plan, uint8_t* out) const;

  // Extended attributes of a node (user.ckptfs.dtype, .shape, .name for tensor files; a
  // tensor of a block type, BlockType, also .block_size and .block_bytes).
  std::vector<std::pair<std::string, std::string>> Xattrs(uint64_t ino) const;

  // The current contents of /.ckptfs/stats.json.
  std::string StatsJson() const;
  // The read errors recorded (stats.json "errors").
  const ErrorLog& errors() const { return errors_; }
  // The path of node `ino` inside the checkpoint's tree ("tensors/a/b.npy"; "" for the root).
  std::string PathOf(uint64_t ino) const;

  // What the reads of one view cost (stats.json "views"): bytes served, and the decodes
  // and fetches done for them, the prefetches they started included. A view is a root
  // entry of the view table (model.safetensors, tensors, shards...); SOURCE's own files
  // at the root are one more, kOtherView.
  struct ViewCounters : WorkCounters {
    std::atomic<uint64_t> bytes_served{0};
  };
  static constexpr char kOtherView[] = "other";
  // The counters of the view file `ino` belongs to; null for no such inode.
  ViewCounters* ViewOf(uint64_t ino) const {
    return ino < view_of_.size() ? &view_counters_[view_of_[ino]] : nullptr;
  }
  // The views' names, as ViewOf's counters are indexed.
  const std::vector<std::string>& view_names() const { return view_names_; }
  const ViewCounters& view_counters(size_t i) const { return view_counters_[i]; }

  // What is known of pytorch_model.bin's zip CRCs at mount.
  const ZipCrcStatus& zip_crcs() const { return zip_crcs_; }
  // If the CRCs are pending, computes them on a background thread of idle priority and
  // saves the sidecar for the next mount; `log` gets one line when it ends. Call once, in
  // the process that serves (threads do not survive fork); stopped by the destructor.
  void StartZipCrcPass(std::function<void(const std::string&)> log);

 private:
  // Counts how a gathered reply's bytes travel (Stats: copied, lent, by descriptor).
  void CountReply(const Gathered& out, const std::vector<uint8_t>& buffer) const;
  // Turns a plan into reply segments with as few copies as possible: descriptors of plain
  // files (checked unchanged since mount) when `descriptors`, bytes lent by their sources
  // (cache blocks, bytes a view keeps); the rest is read into `buffer`, each piece at its
  // place in the reply.
  // On failure `*failed` is the source that failed.
  Status Gather(std::span<const ReadPiece> plan, bool descriptors, std::vector<uint8_t>& buffer,
                Gathered* out, const ByteSource** failed) const;
  // Records the failure `status` of a read of `ino` from `source` (null if none was read) in
  // errors_; true with `*out` filled when the record is new.
  bool RecordFailure(uint64_t ino, const ByteSource* source, const Status& status,
                     ReadError* out) const;
  // Asks the sources under [range) of file `ino` to fetch or decode it ahead.
  void Prefetch(uint64_t ino, ByteRange range) const;
  // A remote read-ahead `ahead` of a stream that began at `stream_start` and now reads up
  // to `end`, cut at the end of the tensor the reader is in while it has read no other
  // tensor through: reading one tensor fetches that tensor only.
  ByteRange WithinFirstTensor(uint64_t ino, ByteRange ahead, uint64_t end,
                              uint64_t stream_start) const;
  // Whether a stream of file `ino` that began at `stream_start` read through a tensor (or
  // came a long way) before reaching `here`.
  bool CameThroughATensor(uint64_t ino, uint64_t stream_start, uint64_t here) const;

  Volume(Checkpoint ckpt, std::shared_ptr<ReadContext> context, ContextUse use)
      : context_(std::move(context)),
        context_use_(use),
        ckpt_(std::move(ckpt)),
        layout_(Layout::Build(ckpt_, context_.get())) {
    IndexViews();
  }
  // Fills view_names_, view_counters_ and view_of_ from the layout, and stored_of_.
  void IndexViews();

  std::shared_ptr<ReadContext> context_;  // first: outlives the sources that use it
  ContextUse context_use_;
  Checkpoint ckpt_;
  Layout layout_;
  mutable Stats stats_;
  ZipCrcStatus zip_crcs_;
  CrcStore crc_store_{""};
  std::unique_ptr<BackgroundCrcPass> crc_pass_;  // reads ckpt_: stopped first
  // Per-view accounting. Loads queued for a read point at its view's counters: they die
  // after the destructor has drained the context's workers.
  std::vector<std::string> view_names_;
  std::unique_ptr<ViewCounters[]> view_counters_;
  std::vector<uint8_t> view_of_;  // by inode: index into view_counters_
  mutable ErrorLog errors_;
  // The stored files' sources, for naming the file a failed read came from.
  std::unordered_map<const ByteSource*, const StoredFile*> stored_of_;
};

}  // namespace ckptfs
