#include "core/source/remote_source.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "core/cache/disk_cache.h"

namespace ckptfs {
namespace {

// A fetch claim (DiskCache::TryClaim) older than a fetch may take is its dead claimant's.
constexpr std::chrono::milliseconds kClaimMargin{2000};

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
      timeout_(timeout),
      readahead_(context.NewReadahead(object_->Size(), /*remote=*/true)),
      timed_out_window_(TimedOutWindow(timeout)) {}

RemoteSource::~RemoteSource() = default;

std::string RemoteSource::Identity() const {
  // "URL\nVALIDATOR\nSIZE" (HttpSource::Identity): no validator, no identity.
  return identity_.find("\n\n") == std::string::npos ? identity_ : std::string();
}

void RemoteSource::SetBlockCuts(std::vector<uint64_t> cuts) {
  if (blocks_) return;  // serving already: the blocks are what they are
  const uint64_t size = Size();
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(size);
  std::vector<uint64_t> starts = {0};
  uint64_t pos = 0;  // where the current block starts
  for (const uint64_t cut : cuts) {
    if (cut <= pos || cut > size) continue;
    // Whole blocks up to the cut; a remainder under kMinBlock joins the last of them.
    while (cut - pos > kBlockSize + kMinBlock) starts.push_back(pos += kBlockSize);
    // Cut here unless the block would be tiny: small tensors then share a block.
    if (cut - pos >= kMinBlock || cut == size) starts.push_back(pos = cut);
  }
  if (starts.back() != size) starts.push_back(size);
  starts_ = std::move(starts);
}

size_t RemoteSource::BlockCount() const {
  if (!starts_.empty()) return starts_.size() - 1;
  return (Size() + kBlockSize - 1) / kBlockSize;
}

size_t RemoteSource::BlockAt(uint64_t offset) const {
  if (starts_.empty()) return offset / kBlockSize;
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) -
                             starts_.begin()) -
         1;
}

std::string RemoteSource::DiskName(uint64_t length) const {
  return identity_ + "\n" + std::to_string(length);
}

void RemoteSource::BeginServing() {
  object_->BeginServing();  // an HttpSource's open deadline ends here
  if (!blocks_) {
    const BlockSet& blocks = *this;  // a private base: converted here, not in make_unique
    blocks_ = std::make_unique<CachedBlocks>(blocks, context_, CachedBlocks::Workers::kFetch);
  }
  serving_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(opening_mu_);
  opening_block_ = UINT64_MAX;
  std::vector<uint8_t>().swap(opening_bytes_);
}

uint64_t RemoteSource::BlockLength(uint64_t block) const {
  return std::min(kBlockSize, Size() - block * kBlockSize);
}

ByteRange RemoteSource::BlockRange(size_t block) const {
  if (!starts_.empty()) return {starts_[block], starts_[block + 1]};
  return {block * kBlockSize, block * kBlockSize + BlockLength(block)};
}

Status RemoteSource::LoadBlock(size_t block, std::span<uint8_t> out, bool* from_server) const {
  const uint64_t offset = BlockRange(block).begin;
  const std::string disk_name = disk_ ? DiskName(out.size()) : std::string();
  // Another mount sharing the disk cache may be fetching this very block: wait for its
  // entry rather than fetch it twice (DiskCache::TryClaim), within one fetch's timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (bool waited = false; disk_;) {
    if (disk_->Get(disk_name, offset, out)) {
      context_.disk_cache_bytes.fetch_add(out.size(), std::memory_order_relaxed);
      return Status::Ok();
    }
    if (waited || disk_->TryClaim(disk_name, offset, timeout_ + kClaimMargin)) break;
    waited = !disk_->WaitForClaim(disk_name, offset, deadline);
  }
  // A queued prefetch of an object that just timed out would only wait as long again.
  if (Status s = RecentTimeout(); !s.ok()) {
    if (disk_) disk_->Unclaim(disk_name, offset);
    return s;
  }
  *from_server = true;
  // Readahead waits for a slot of the link; a reader's own fetch never does (FetchLimit).
  FetchLimit& limit = context_.fetch_limit();
  if (on_fetch_worker) {
    limit.Acquire();
  } else {
    limit.Enter();
  }
  Status s = Status::IoError(Name() + ": fetch abandoned");
  {
    // The slot is given back however the fetch ends (an exception included): a slot lost
    // would leave the workers waiting for it forever.
    const auto began = std::chrono::steady_clock::now();
    const std::unique_ptr<FetchLimit, std::function<void(FetchLimit*)>> slot(
        &limit, [&](FetchLimit* l) {
          l->Done(out.size(), std::chrono::steady_clock::now() - began, s.ok());
        });
    s = object_->ReadAt(offset, out);
  }
  if (!s.ok()) {
    if (disk_) disk_->Unclaim(disk_name, offset);
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
  if (!disk_) return;
  const std::string disk_name = DiskName(bytes.size());
  disk_->Put(disk_name, BlockRange(block).begin, bytes);
  disk_->Unclaim(disk_name, BlockRange(block).begin);
}

void RemoteSource::Prefetch(uint64_t offset, uint64_t length) const {
  if (!serving_.load(std::memory_order_acquire) || length == 0 || offset >= Size()) return;
  blocks_->Schedule(offset, std::min(Size(), offset + length));
}

bool RemoteSource::ReadFromDisk(uint64_t offset, std::span<uint8_t> out) const {
  std::lock_guard<std::mutex> lock(opening_mu_);
  for (uint64_t done = 0; done < out.size();) {
    const uint64_t block = (offset + done) / kBlockSize;
    if (opening_block_ != block) {
      opening_bytes_.resize(BlockLength(block));
      opening_block_ = UINT64_MAX;
      if (!disk_->Get(DiskName(opening_bytes_.size()), block * kBlockSize, opening_bytes_)) {
        return false;
      }
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
  // A header read is kept as it was read, beside the blocks: the blocks that hold it need
  // not be on disk (blocks cut at tensors leave the header bytes to whoever reads them),
  // and the next mount makes the same reads while opening.
  const std::string exact = disk_ ? identity_ + "\nopening\n" + std::to_string(out.size()) : "";
  if (disk_ && !out.empty() && (disk_->Get(exact, offset, out) || ReadFromDisk(offset, out))) {
    context_.disk_cache_bytes.fetch_add(out.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  CKPTFS_RETURN_IF_ERROR(Reported(object_->ReadAt(offset, out)));
  context_.remote_requests.fetch_add(1, std::memory_order_relaxed);
  context_.remote_bytes_fetched.fetch_add(out.size(), std::memory_order_relaxed);
  if (disk_ && !out.empty()) {
    if (out.size() < kBlockSize) disk_->Put(exact, offset, out);
    // Whole blocks read here (an index or config file read whole) are kept for next time.
    const uint64_t end = offset + out.size();
    for (uint64_t b = (offset + kBlockSize - 1) / kBlockSize; b * kBlockSize < end; ++b) {
      const uint64_t length = BlockLength(b);
      if (b * kBlockSize + length > end) break;
      disk_->Put(DiskName(length), b * kBlockSize, out.subspan(b * kBlockSize - offset, length));
    }
  }
  return Status::Ok();
}

Status RemoteSource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  if (!sink.lent || !serving_.load(std::memory_order_acquire)) {
    return ReadInto(offset, sink.Fill());
  }
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  return ServeBlocks(length, [&] { return blocks_->Lend(offset, length, sink.lent); });
}

Status RemoteSource::ReadInto(uint64_t offset, std::span<uint8_t> out) const {
  if (!serving_.load(std::memory_order_acquire)) return ReadWhileOpening(offset, out);
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, out.size()));
  const ByteRange ahead = readahead_->OnRead(offset, out.size());
  if (!ahead.empty()) Prefetch(ahead.begin, ahead.size());
  return ServeBlocks(out.size(), [&] { return blocks_->Read(offset, out); });
}

}  // namespace ckptfs
