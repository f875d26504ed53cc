// sstable: a strict reader of the LevelDB table format that a TensorBundle `.index` is.
//
// File layout (LevelDB's table_format.md): data blocks, a metaindex block, an index block,
// then a 48-byte footer: the metaindex and index BlockHandles (varint64 offset, size),
// zero padding to 40 bytes, and the magic 0xdb4775248b80fb57 (little-endian). Each block
// is followed by a 5-byte trailer: compression type (0 none, 1 snappy) and the masked
// CRC32C of the stored block bytes plus that type byte. A block holds prefix-compressed
// entries (varint32 shared, non_shared, value_length; key suffix; value), then a restart
// array of uint32 offsets and its count.
//
// Why not libleveldb's leveldb::Table: it allocates a buffer of the size a block handle
// states before reading (and the size a snappy block states before decoding), so a hostile
// index makes it allocate up to what a varint can say; its errors do not say which block;
// and it cannot go on past one bad block to report the next, which `verify` needs.
//
// The reader treats the bytes as untrusted: every handle is checked against the file,
// every varint for truncation and overflow, restart points must mark entries with no
// shared prefix, a snappy block must decode to exactly its stated size (at most
// kMaxSstBlock), keys must be strictly ascending across the whole table, and each index
// separator must lie between its block's last key and the next block's first. Every error
// is one line starting with the file's name. Pure functions over bytes; thread-safe.
//
// Memory: the table is walked, not kept. One decoded snappy block lives at a time, while
// its entries are handed to the caller, and is charged to the caller's MetadataBudget
// (metadata_budget.h) meanwhile, as are the index block's separators; a table whose
// blocks decode to more than its budget allows is refused before the block is allocated.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/metadata_budget.h"
#include "core/status.h"

namespace ckptfs::tf {

inline constexpr uint64_t kSstMagic = 0xdb4775248b80fb57ull;
inline constexpr size_t kSstFooterSize = 48;
inline constexpr size_t kSstTrailerSize = 5;
inline constexpr uint64_t kMaxSstBlock = 64ull << 20;  // decoded bytes of one block

// One entry as the walk hands it over: `key` and `value` are valid during the call only
// (value points into the table's bytes or the decoded block being walked).
using SstEntryFn = std::function<Status(std::string_view key, std::string_view value)>;

struct SstStats {
  uint64_t entries = 0;
  uint64_t data_blocks = 0;
  uint64_t snappy_blocks = 0;
};

// Walks every entry of the table in `bytes` in key order, calling `fn` for each; the
// first error (the table's or fn's) ends the walk. Checks every block's CRC unless
// `verify_checksums` is false.
Result<SstStats> WalkSstable(std::string_view bytes, const std::string& file_name,
                             MetadataBudget& budget, const SstEntryFn& fn,
                             bool verify_checksums = true);

// For `verify`: checks the footer, the index block and then every data block's trailer
// CRC and contents, going on past a bad data block. Returns one message per problem
// found (empty when the table is sound); a bad footer or index block ends the walk.
std::vector<std::string> CheckSstableBlocks(std::string_view bytes, const std::string& file_name);

}  // namespace ckptfs::tf
