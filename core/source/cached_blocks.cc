#include "core/source/cached_blocks.h"

#include <algorithm>
#include <cstring>

namespace ckptfs {

CachedBlocks::CachedBlocks(const BlockSet& blocks, ReadContext& context, Workers workers)
    : blocks_(blocks),
      context_(context),
      workers_(workers),
      cache_id_(context.cache().NewSourceId()),
      queued_(new std::atomic<bool>[blocks.BlockCount()]()),
      consumed_(new std::atomic<uint64_t>[blocks.BlockCount()]()) {}

Result<BlockCache::Handle> CachedBlocks::Get(size_t block) const {
  bool publish = false;
  auto handle = context_.cache().GetOrLoad(
      BlockKey{cache_id_, block}, blocks_.BlockRange(block).size(), [&](std::span<uint8_t> out) {
        consumed_[block].store(0, std::memory_order_relaxed);
        return blocks_.LoadBlock(block, out, &publish);
      });
  // Only now that the block is published: readers waiting for it have their bytes.
  if (publish && handle.ok()) blocks_.Published(block, handle->data());
  return handle;
}

void CachedBlocks::Queue(uint64_t begin, uint64_t end, bool ahead) const {
  if (begin >= end || blocks_.BlockCount() == 0) return;
  uint64_t budget = context_.AheadBudget();
  std::atomic<uint64_t>& counter =
      workers_ == Workers::kDecode ? context_.prefetches : context_.remote_prefetches;
  for (size_t b = blocks_.BlockAt(begin); b < blocks_.BlockCount(); ++b) {
    const ByteRange range = blocks_.BlockRange(b);
    if (range.begin >= end || range.size() > budget) break;
    budget -= range.size();
    // One queued task per block: a block queued but not yet loading is not in the cache,
    // and overlapping windows would otherwise queue it again and again.
    if (queued_[b].exchange(true, std::memory_order_acq_rel)) continue;
    if (context_.cache().ContainsOrLoading(BlockKey{cache_id_, b})) {
      queued_[b].store(false, std::memory_order_release);
      continue;
    }
    // The flag clears when the task is gone, run or dropped (a refused submit, or
    // ReadContext::DropPending when another checkpoint of a run closes).
    auto unqueue = std::shared_ptr<void>(
        nullptr, [this, b](void*) { queued_[b].store(false, std::memory_order_release); });
    // A failure is the reader's to report when it loads the block itself.
    // The load is charged to the read that asked for it (stats.json "views").
    WorkCounters* counters = current_work_counters;
    if (!context_.TrySubmit(workers_, [this, b, unqueue, counters] {
          ScopedWorkCounters charge(counters);
          (void)Get(b);
        })) {
      return;
    }
    if (ahead) counter.fetch_add(1, std::memory_order_relaxed);
  }
}

bool CachedBlocks::Holds(size_t block) const {
  return context_.cache().ContainsOrLoading(BlockKey{cache_id_, block});
}

Status CachedBlocks::ForEach(
    uint64_t offset, uint64_t length,
    const std::function<void(BlockCache::Handle&, std::span<const uint8_t>)>& fn) const {
  if (length == 0) return Status::Ok();
  const size_t first = blocks_.BlockAt(offset);
  // Load the later blocks in parallel while this thread loads the first.
  if (blocks_.BlockRange(first).end < offset + length) {
    Queue(blocks_.BlockRange(first).end, offset + length, false);
  }
  uint64_t done = 0;
  for (size_t b = first; done < length; ++b) {
    CKPTFS_ASSIGN_OR_RETURN(BlockCache::Handle handle, Get(b));
    const uint64_t from = offset + done - blocks_.BlockRange(b).begin;
    const uint64_t n = std::min<uint64_t>(length - done, handle.data().size() - from);
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

Status CachedBlocks::Read(uint64_t offset, std::span<uint8_t> out) const {
  uint8_t* dest = out.data();
  return ForEach(offset, out.size(), [&](BlockCache::Handle&, std::span<const uint8_t> bytes) {
    std::memcpy(dest, bytes.data(), bytes.size());
    dest += bytes.size();
  });
}

Status CachedBlocks::Lend(uint64_t offset, uint64_t length, std::vector<LentBytes>* out) const {
  return ForEach(offset, length, [&](BlockCache::Handle& block, std::span<const uint8_t> bytes) {
    out->push_back({bytes, std::make_shared<BlockCache::Handle>(std::move(block))});
  });
}

}  // namespace ckptfs
