#include "core/cache/prefetch.h"

#include <algorithm>
#include <utility>

#include "core/checked.h"

namespace ckptfs {
namespace {

// Stragglers of a stream's own out-of-order requests land behind it by up to the few
// requests the kernel keeps in flight; 4 covers that without swallowing real seeks. A
// stream read backwards must have come down further than that before it is one.
constexpr uint64_t kStragglerSlacks = 4;
constexpr uint64_t kBackwardReads = 3;

}  // namespace

ThreadPool::ThreadPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  work_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  // `dropped` dies here, outside mu_: a task's captures (Handles, shared_ptrs) may take
  // other locks when they are destroyed.
}

bool ThreadPool::TrySubmit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  work_.notify_one();
  return true;
}

size_t ThreadPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // Prefetch is best effort: one failing task must not take the mount's workers down.
    try {
      task();
    } catch (...) {
    }
  }
}

Readahead::Readahead() : Readahead(Options()) {}

Readahead::Readahead(Options options)
    : options_(options), streams_(static_cast<size_t>(std::max(1, options.streams))) {}

ByteRange Readahead::OnRead(uint64_t offset, uint64_t length, uint64_t* stream_start) {
  if (stream_start) *stream_start = offset;
  if (length == 0) return {};
  const uint64_t end = SaturatingAdd(offset, length);
  const uint64_t straggler_slack = options_.slack * kStragglerSlacks;

  std::lock_guard lock(mu_);
  ++tick_;
  // The stream the read lies nearest to, among those it may belong to: just past its
  // furthest end (forward), just below its lowest read (backward), or a straggler within
  // a few requests of the edge it moves.
  Stream* stream = nullptr;
  uint64_t best_distance = UINT64_MAX;
  for (Stream& s : streams_) {
    if (!s.active) continue;
    uint64_t distance = UINT64_MAX;
    if (offset >= s.next) {
      if (offset - s.next <= options_.slack) distance = offset - s.next;
    } else if (offset < s.low) {
      // Two slacks: the kernel asks for a fault's pages below a backward reader as two
      // requests at once, and the lower one may arrive first.
      const uint64_t gap = s.low - std::min(end, s.low);
      if (gap <= 2 * options_.slack) distance = gap;
    } else if (s.next - offset <= straggler_slack) {
      distance = s.next - offset;
    } else if (s.downs > 0 && offset - s.low <= straggler_slack) {
      distance = offset - s.low;  // a straggler of a stream going down
    }
    if (distance < best_distance) {
      stream = &s;
      best_distance = distance;
    }
  }

  if (stream == nullptr) {
    // A seek or a new reader: take the least recently used slot (free slots have
    // last_used 0 and go first) and wait for a second read before prefetching.
    Stream* slot = &*std::min_element(
        streams_.begin(), streams_.end(),
        [](const Stream& a, const Stream& b) { return a.last_used < b.last_used; });
    *slot = Stream{.active = true,
                   .start = offset,
                   .low = offset,
                   .next = end,
                   .prefetched_from = offset,
                   .prefetched_until = end,
                   .window = 0,
                   .downs = 0,
                   .last_used = tick_};
    return {};
  }

  stream->last_used = tick_;
  if (stream_start) *stream_start = stream->start;
  if (end > stream->next) return Forward(*stream, end);
  if (offset < stream->low) return Backward(*stream, offset);
  return {};  // a straggler: already covered
}

ByteRange Readahead::Forward(Stream& stream, uint64_t end) {
  stream.next = end;
  // Grown with what the reader has read, not per read: doubling on every (1 MiB) request
  // reached the maximum window after a few requests, so reading one tensor prefetched tens
  // of MiB past it (issue 28). Now the window is never more than the stream has read
  // (beyond the initial window).
  if (stream.window == 0) {
    stream.window = std::min(options_.initial_window, options_.max_window);
  } else if (options_.grow_to_read) {
    stream.window = std::clamp(end - stream.start, stream.window, options_.max_window);
  } else if (stream.window < options_.max_window &&
             end - stream.start >= SaturatingAdd(stream.window, stream.window)) {
    stream.window = std::min(stream.window * 2, options_.max_window);
  }
  const uint64_t begin = std::max(stream.prefetched_until, stream.next);
  const uint64_t stop = std::min(SaturatingAdd(stream.next, stream.window), options_.limit);
  if (stop <= begin) return {};
  stream.prefetched_until = stop;
  return {begin, stop};
}

ByteRange Readahead::Backward(Stream& stream, uint64_t offset) {
  stream.low = offset;
  ++stream.downs;
  // The kernel's first requests for a forward reader can arrive in any order, the highest
  // first; only a reader that has come down further than that batch, in more than a
  // couple of reads, reads backwards.
  const uint64_t below = stream.start - stream.low;
  if (below < options_.slack * kStragglerSlacks || stream.downs < kBackwardReads) return {};
  // The initial window only, never grown: a backward reader is a piece of a larger copy,
  // and where the piece ends (the piece below was read a moment ago, forward) whatever
  // was requested past it is wasted; a grown window there cost 40% more decoding than the
  // reader read.
  const uint64_t window = std::min(options_.initial_window, options_.max_window);
  const uint64_t begin = stream.low > window ? stream.low - window : 0;
  const uint64_t stop = std::min(stream.prefetched_from, stream.low);
  if (stop <= begin) return {};
  stream.prefetched_from = begin;
  return {begin, stop};
}

}  // namespace ckptfs
