#include "core/source/remote_source.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/cache/disk_cache.h"

namespace ckptfs {
namespace {

// ETIMEDOUT marks a timeout between the object and this source; readers get EIO, as for
// any other failed read.
Status Reported(Status status) {
  if (status.errno_value() != ETIMEDOUT) return status;
  return Status::IoError(status.message());
}

}  // namespace

RemoteSource::RemoteSource(std::unique_ptr<ByteSource> object, std::string identity,
                           ReadContext& context, DiskCache* disk, std::chrono::milliseconds timeout)
    : object_(std::move(object)),
      identity_(std::move(identity)),
      context_(context),
      disk_(disk),
      blocks_(*this, context, CachedBlocks::Workers::kFetch),
      readahead_(context.NewReadahead(object_->Size(), /*remote=*/true)),
      timed_out_window_(TimedOutWindow(timeout)) {}

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

ByteRange RemoteSource::BlockRange(size_t block) const {
  return {block * kBlockSize, block * kBlockSize + BlockLength(block)};
}

Status RemoteSource::LoadBlock(size_t block, std::span<uint8_t> out, bool* from_server) const {
  if (disk_ && disk_->Get(identity_, block, out)) {
    context_.disk_cache_bytes.fetch_add(out.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  // A queued prefetch of an object that just timed out would only wait as long again.
  CKPTFS_RETURN_IF_ERROR(RecentTimeout());
  *from_server = true;
  if (Status s = object_->ReadAt(block * kBlockSize, out); !s.ok()) {
    if (s.errno_value() == ETIMEDOUT) NoteTimeout(s);
    return s;
  }
  ClearTimeout();
  context_.remote_requests.fetch_add(1, std::memory_order_relaxed);
  context_.remote_bytes_fetched.fetch_add(out.size(), std::memory_order_relaxed);
  ChargeWork(&WorkCounters::remote_bytes_fetched, out.size());
  return Status::Ok();
}

void RemoteSource::Published(size_t block, std::span<const uint8_t> bytes) const {
  if (disk_) disk_->Put(identity_, block, bytes);
}

void RemoteSource::Prefetch(uint64_t offset, uint64_t length) const {
  if (!serving_.load(std::memory_order_acquire) || length == 0 || offset >= Size()) return;
  blocks_.Schedule(offset, std::min(Size(), offset + length));
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

Status RemoteSource::RecentTimeout() const {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(timed_out_mu_);
  if (timed_out_ && now - timed_out_at_ < timed_out_window_) return timed_out_status_;
  return Status::Ok();
}

void RemoteSource::NoteTimeout(const Status& status) const {
  std::lock_guard<std::mutex> lock(timed_out_mu_);
  timed_out_ = true;
  timed_out_at_ = std::chrono::steady_clock::now();
  timed_out_status_ = status;
}

void RemoteSource::ClearTimeout() const {
  std::lock_guard<std::mutex> lock(timed_out_mu_);
  timed_out_ = false;
}

template <typename ReadBlocks>
Status RemoteSource::ServeBlocks(uint64_t length, ReadBlocks read) const {
  if (length == 0) return read();
  // A fresh timeout is noted where the fetch failed (LoadBlock); noting here too would
  // restart the backoff on every read that failed at once with the remembered error.
  Status status = RecentTimeout();
  if (status.ok()) status = read();
  return Reported(std::move(status));
}

Status RemoteSource::ReadWhileOpening(uint64_t offset, std::span<uint8_t> out) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, out.size()));
  if (disk_ && !out.empty() && ReadFromDisk(offset, out)) {
    context_.disk_cache_bytes.fetch_add(out.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  CKPTFS_RETURN_IF_ERROR(Reported(object_->ReadAt(offset, out)));
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

Status RemoteSource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  if (!sink.lent || !serving_.load(std::memory_order_acquire)) {
    return ReadInto(offset, sink.Fill());
  }
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  return ServeBlocks(length, [&] { return blocks_.Lend(offset, length, sink.lent); });
}

Status RemoteSource::ReadInto(uint64_t offset, std::span<uint8_t> out) const {
  if (!serving_.load(std::memory_order_acquire)) return ReadWhileOpening(offset, out);
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, out.size()));
  const ByteRange ahead = readahead_->OnRead(offset, out.size());
  if (!ahead.empty()) Prefetch(ahead.begin, ahead.size());
  return ServeBlocks(out.size(), [&] { return blocks_.Read(offset, out); });
}

}  // namespace ckptfs
