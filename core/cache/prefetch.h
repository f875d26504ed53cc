// Prefetch: guessing which bytes a reader wants next, and a small pool to fetch them.
//
// Readahead watches the reads of one source (a decoded shard) and turns sequential
// access into prefetch requests. It keeps a few streams, each a guess that some reader
// is walking the source forward: where that reader should read next, how far ahead of it
// has already been requested, and a window. A read that starts where a stream expects
// (within a slack of one FUSE request, because the kernel's requests reach worker threads
// slightly out of order) continues it. The first continuing read starts prefetching with
// the initial window; each further one asks for the bytes from where the stream's last
// request ended up to the reader's position plus the window, so nothing is requested
// twice, a steady reader keeps a full window in flight, and never more than one window
// is ahead of it. The window doubles, up to a maximum, once the reader has read twice the
// window since the stream began: it never exceeds what the reader has read (beyond the
// initial window), so a reader that stops after one tensor leaves at most one window,
// no larger than that tensor or the initial window, of wasted work. Over a remote object
// (Options::grow_to_read) the window grows faster, to all the reader has read: a window is
// round trips there (40 ms each to an object store), and doubling only every two windows
// took half of a 64 MiB shard to open the window the link needed; the waste bound is the
// same (never more than what the reader has read). A read that
// continues no stream is a seek: it claims the least recently used stream slot and
// prefetches nothing, since a single read is not a pattern. A random reader therefore
// never triggers readahead, a reader that seeks starts again from the small window, and
// several readers interleaving on one source (up to `streams`) each keep their own
// stream and window. Reads slightly behind a stream (stragglers of its own out-of-order
// requests) belong to it but neither advance it nor prefetch.
//
// A stream may also run backwards: a reader faulting in a mapped file under a large
// memcpy that copies from the end down (glibc's memmove does, for big pieces) reads each
// piece in descending order, every request ending where the previous one began. A read
// ending within two slacks below a stream's lowest read continues it downwards; once the
// reader has come down more than a few requests' worth, in three reads or more (the
// kernel's first requests for a forward reader can arrive highest first), the initial
// window is prefetched below it, each read asking only for what was not yet requested.
// That window never grows: a backward reader is one piece of a larger copy, and past the
// piece's end what was requested is wasted.
//
// Readahead only speaks byte ranges: the caller maps them to blocks, skips blocks the
// cache already holds or is loading, and hands the rest to a ThreadPool. Prefetch is best
// effort: the pool refuses work past a bound instead of queueing without limit, and a
// refused or failed prefetch only means the reader decodes that block itself.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ckptfs {

// A fixed set of worker threads running tasks in submission order.
// Thread safety: TrySubmit may be called from any thread, including from a task.
class ThreadPool {
 public:
  // `threads` workers (0: one per core); at most `max_queued` tasks wait for a worker.
  explicit ThreadPool(size_t threads = 0, size_t max_queued = 64);
  // Stops accepting work, drops the tasks still queued (never run), waits for the tasks
  // already running and joins the workers. Must not be called from a task.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`; false (and `task` is dropped) when `max_queued` tasks are already
  // waiting or the pool is shutting down. A task that throws is abandoned; the worker
  // goes on.
  bool TrySubmit(std::function<void()> task);

  size_t threads() const { return workers_.size(); }
  // Tasks waiting for a worker (not counting running ones).
  size_t queued() const;

 private:
  void WorkerLoop();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> workers_;
};

// Every setting of readahead and prefetch, in one place: ReadOptions::prefetch holds a
// mount's, ReadContext turns them into Readaheads and worker pools, and the defaults of
// Readahead::Options are these.
struct PrefetchSettings {
  // A sequential stream's first window, over local or decoded bytes...
  uint64_t initial_window = uint64_t{4} << 20;
  // ...and over a remote object, where every window is round trips: one block, and a
  // proven stream grows it.
  uint64_t remote_initial_window = uint64_t{1} << 20;
  // The largest window; a mount also keeps it within a quarter of its cache, since a
  // window the cache cannot hold evicts its own prefetched blocks before they are read.
  uint64_t max_window = uint64_t{64} << 20;
  // Readers tracked at once per open file (or per source read without a file).
  int streams = 4;
  // How far past a stream's expected offset a read may start and still continue it: one
  // FUSE request, since the kernel's requests reach worker threads slightly out of order.
  uint64_t slack = uint64_t{1} << 20;
  // One request to load blocks ahead (a window, the rest of a tensor) asks for at most
  // cache / ahead_divisor bytes: prefetched blocks must survive until the reader gets there.
  uint64_t ahead_divisor = 4;
  // Decode workers (CPU work): 0, one per core.
  size_t decode_threads = 0;
  // Fetch workers (waiting on a server): the most range requests readahead may keep in
  // flight. How many it does keep is FetchLimit's rule (core/cache/fetch_limit.h), which
  // follows the link between fetch_limit_min and this (and a quarter of the cache in
  // 1 MiB blocks), starting from fetch_limit_initial.
  size_t fetch_threads = 64;
  size_t fetch_limit_min = 2;
  size_t fetch_limit_initial = 8;  // what a fixed pool of 8 gave: no slower at the start
  // Queued loads per pool beyond which prefetches are dropped: never a backlog.
  size_t max_queued = 256;
};

// Bytes [begin, end) of a source; empty when begin >= end.
struct ByteRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool empty() const { return begin >= end; }
  uint64_t size() const { return empty() ? 0 : end - begin; }
  bool operator==(const ByteRange&) const = default;
};

// Sequential-access detector for one source (see the top of this file).
// Thread safety: OnRead may be called from any thread; calls are serialized internally.
class Readahead {
 public:
  // See PrefetchSettings; stragglers up to 4x `slack` behind still belong to a stream.
  struct Options {
    uint64_t initial_window = PrefetchSettings{}.initial_window;
    uint64_t max_window = PrefetchSettings{}.max_window;
    int streams = PrefetchSettings{}.streams;
    uint64_t slack = PrefetchSettings{}.slack;
    // Size of the source: returned ranges never reach past it.
    uint64_t limit = UINT64_MAX;
    // The window grows to what the reader has read, not half of it (remote sources).
    bool grow_to_read = false;
  };

  Readahead();
  explicit Readahead(Options options);

  // Records a read of [offset, offset + length) and returns the bytes to prefetch next:
  // empty unless the read continues a sequential stream. Ranges returned for one stream
  // never overlap each other, and never reach more than the stream's window past the end
  // of the read: at most one window is ever requested ahead of a reader.
  // `stream_start`, if given, receives where the stream the read belongs to began (the
  // read's own offset for a seek).
  ByteRange OnRead(uint64_t offset, uint64_t length, uint64_t* stream_start = nullptr);

 private:
  struct Stream {
    bool active = false;
    uint64_t start = 0;             // where the reader began
    uint64_t low = 0;               // the lowest offset read: it has read [low, next)
    uint64_t next = 0;              // where a forward reader reads next: the furthest end
    uint64_t prefetched_from = 0;   // start of everything requested below the stream
    uint64_t prefetched_until = 0;  // end of everything requested above it
    uint64_t window = 0;            // 0 until the stream proves sequential
    uint64_t downs = 0;             // reads that moved `low` down
    uint64_t last_used = 0;         // for replacing the least recently used slot
  };

  // A read that moved the stream's end up to `end`, or its lowest read down to `offset`:
  // the bytes to prefetch beyond it, in that direction.
  ByteRange Forward(Stream& stream, uint64_t end);
  ByteRange Backward(Stream& stream, uint64_t offset);

  const Options options_;
  std::mutex mu_;
  std::vector<Stream> streams_;  // guarded by mu_
  uint64_t tick_ = 0;            // guarded by mu_
};

}  // namespace ckptfs
