#include "core/source/remote_source.h"

#include <algorithm>
#include <cstring>

#include "core/cache/disk_cache.h"

namespace ckptfs {
namespace {

Readahead::Options SourceReadahead(uint64_t size) {
  Readahead::Options options;
  options.initial_window = RemoteSource::kBlockSize;
  options.limit = size;
  return options;
}

}  // namespace

RemoteSource::RemoteSource(std::unique_ptr<ByteSource> object, std::string identity,
                           CodecContext& context, DiskCache* disk)
    : object_(std::move(object)),
      identity_(std::move(identity)),
      context_(context),
      disk_(disk),
      cache_id_(context.cache().NewSourceId()),
      queued_(new std::atomic<bool>[BlockCount()]()),
      consumed_(new std::atomic<uint64_t>[BlockCount()]()),
      readahead_(std::make_unique<Readahead>(SourceReadahead(object_->Size()))) {}

RemoteSource::~RemoteSource() = default;

std::string RemoteSource::Identity() const {
  // "URL\nVALIDATOR\nSIZE" (HttpSource::Identity): no validator, no identity.
  return identity_.find("\n\n") == std::string::npos ? identity_ : std::string();
}

void RemoteSource::BeginServing() {
  object_->BeginServing();  // an HttpSource's open deadline ends here
  serving_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(opening_mu_);
  opening_block_ = UINT64_MAX;
  std::vector<uint8_t>().swap(opening_bytes_);
}

uint64_t RemoteSource::BlockLength(uint64_t block) const {
  return std::min(kBlockSize, Size() - block * kBlockSize);
}

Status RemoteSource::LoadBlock(uint64_t block, std::span<uint8_t> out, bool* from_server) const {
  consumed_[block].store(0, std::memory_order_relaxed);
  if (disk_ && disk_->Get(identity_, block, out)) {
    context_.disk_cache_bytes.fetch_add(out.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  *from_server = true;
  CKPTFS_RETURN_IF_ERROR(object_->ReadAt(block * kBlockSize, out));
  context_.remote_requests.fetch_add(1, std::memory_order_relaxed);
  context_.remote_bytes_fetched.fetch_add(out.size(), std::memory_order_relaxed);
  return Status::Ok();
}

Result<BlockCache::Handle> RemoteSource::GetBlock(uint64_t block) const {
  bool from_server = false;
  auto handle = context_.cache().GetOrLoad(
      BlockKey{cache_id_, block}, BlockLength(block),
      [&](std::span<uint8_t> out) { return LoadBlock(block, out, &from_server); });
  // Written to the disk cache only now that the block is published: readers waiting for
  // it have their bytes and need not wait for a file to be written.
  if (disk_ && from_server && handle.ok()) disk_->Put(identity_, block, handle->data());
  return handle;
}

void RemoteSource::Schedule(uint64_t first_block, uint64_t end_block) const {
  // Prefetched blocks must survive until the reader gets there: never ask for more than a
  // quarter of the cache at once.
  const uint64_t budget = std::max<uint64_t>(1, context_.cache().capacity() / 4 / kBlockSize);
  end_block = std::min({end_block, BlockCount(), first_block + budget});
  for (uint64_t b = first_block; b < end_block; ++b) {
    // One queued task per block, however many overlapping windows ask for it.
    if (queued_[b].exchange(true, std::memory_order_acq_rel)) continue;
    if (context_.cache().ContainsOrLoading(BlockKey{cache_id_, b})) {
      queued_[b].store(false, std::memory_order_release);
      continue;
    }
    // The flag clears when the task is gone, run or dropped (a refused submit, or
    // CodecContext::DropPending when another checkpoint of a run closes).
    auto unqueue = std::shared_ptr<void>(
        nullptr, [this, b](void*) { queued_[b].store(false, std::memory_order_release); });
    // A failure is retried by the reader, who reports it.
    if (!context_.TrySubmitFetch([this, b, unqueue] { (void)GetBlock(b); })) return;
    context_.remote_prefetches.fetch_add(1, std::memory_order_relaxed);
  }
}

void RemoteSource::Prefetch(uint64_t offset, uint64_t length) const {
  if (!serving_.load(std::memory_order_acquire) || length == 0 || offset >= Size()) return;
  const uint64_t end = std::min(Size(), offset + length);
  Schedule(offset / kBlockSize, (end + kBlockSize - 1) / kBlockSize);
}

template <typename Fn>
Status RemoteSource::ForEachBlock(uint64_t offset, uint64_t length, Fn&& fn) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  if (length == 0) return Status::Ok();
  const uint64_t first = offset / kBlockSize;
  const uint64_t last = (offset + length - 1) / kBlockSize;
  // Fetch the later blocks in parallel while this thread fetches the first.
  if (last > first) Schedule(first + 1, last + 1);
  uint64_t done = 0;
  for (uint64_t b = first; b <= last; ++b) {
    CKPTFS_ASSIGN_OR_RETURN(BlockCache::Handle handle, GetBlock(b));
    const uint64_t from = offset + done - b * kBlockSize;
    const uint64_t n = std::min(length - done, handle.data().size() - from);
    // Every byte of the block has been handed out (counted, since parallel FUSE requests
    // arrive out of order): it goes first when the cache needs room.
    if (consumed_[b].fetch_add(n, std::memory_order_relaxed) + n >= handle.data().size()) {
      handle.MarkConsumed();
    }
    fn(handle, handle.data().subspan(from, n));
    done += n;
  }
  return Status::Ok();
}

bool RemoteSource::ReadFromDisk(uint64_t offset, std::span<uint8_t> out) const {
  std::lock_guard<std::mutex> lock(opening_mu_);
  for (uint64_t done = 0; done < out.size();) {
    const uint64_t block = (offset + done) / kBlockSize;
    if (opening_block_ != block) {
      opening_bytes_.resize(BlockLength(block));
      opening_block_ = UINT64_MAX;
      if (!disk_->Get(identity_, block, opening_bytes_)) return false;
      opening_block_ = block;
    }
    const uint64_t from = offset + done - block * kBlockSize;
    const uint64_t n = std::min<uint64_t>(out.size() - done, opening_bytes_.size() - from);
    std::memcpy(out.data() + done, opening_bytes_.data() + from, n);
    done += n;
  }
  return true;
}

Status RemoteSource::ReadWhileOpening(uint64_t offset, std::span<uint8_t> out) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, out.size()));
  if (disk_ && !out.empty() && ReadFromDisk(offset, out)) {
    context_.disk_cache_bytes.fetch_add(out.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  CKPTFS_RETURN_IF_ERROR(object_->ReadAt(offset, out));
  context_.remote_requests.fetch_add(1, std::memory_order_relaxed);
  context_.remote_bytes_fetched.fetch_add(out.size(), std::memory_order_relaxed);
  // Whole blocks read here (an index or config file read whole) are kept for next time.
  if (disk_) {
    const uint64_t end = offset + out.size();
    for (uint64_t b = (offset + kBlockSize - 1) / kBlockSize; b * kBlockSize < end; ++b) {
      const uint64_t length = BlockLength(b);
      if (b * kBlockSize + length > end) break;
      disk_->Put(identity_, b, out.subspan(b * kBlockSize - offset, length));
    }
  }
  return Status::Ok();
}

Status RemoteSource::ReadAt(uint64_t offset, std::span<uint8_t> out) const {
  if (!serving_.load(std::memory_order_acquire)) return ReadWhileOpening(offset, out);
  const ByteRange ahead = readahead_->OnRead(offset, out.size());
  if (!ahead.empty()) Prefetch(ahead.begin, ahead.size());
  uint8_t* dest = out.data();
  return ForEachBlock(offset, out.size(), [&](BlockCache::Handle&, std::span<const uint8_t> b) {
    std::memcpy(dest, b.data(), b.size());
    dest += b.size();
  });
}

Status RemoteSource::Lend(uint64_t offset, uint64_t length, std::vector<LentBytes>* out) const {
  return ForEachBlock(offset, length, [&](BlockCache::Handle& block, std::span<const uint8_t> b) {
    out->push_back({b, std::make_shared<BlockCache::Handle>(std::move(block))});
  });
}

}  // namespace ckptfs
