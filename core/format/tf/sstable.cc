#include "core/format/tf/sstable.h"

#include <snappy-c.h>

#include <cstdio>
#include <functional>
#include <memory>

#include "core/checked.h"
#include "core/format/tf/crc32c.h"
#include "core/format/tf/varint.h"

namespace ckptfs::tf {
namespace {

struct BlockHandle {
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct Footer {
  BlockHandle metaindex;
  BlockHandle index;
};

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

Status Corrupt(const std::string& file_name, const std::string& what) {
  return Status::Corruption(file_name + ": " + what);
}

// A handle read from `in`, checked to lie (with its trailer) before the footer.
Result<BlockHandle> ReadHandle(std::string_view& in, uint64_t limit, const std::string& file_name,
                               const std::string& where) {
  VarintError error{};
  const auto offset = ReadVarint64(in, &error);
  const auto size = offset ? ReadVarint64(in, &error) : std::nullopt;
  if (!size) return Corrupt(file_name, where + ": block handle: " + VarintErrorText(error));
  // The block and its trailer lie within the table.
  const std::optional<uint64_t> stored = CheckedAdd(*size, kSstTrailerSize);
  if (!stored || !RangeWithin(*offset, *stored, limit)) {
    return Corrupt(file_name, where + ": block at offset " + std::to_string(*offset) + " of " +
                                  std::to_string(*size) + " bytes runs past the table (" +
                                  std::to_string(limit) + " bytes before the footer)");
  }
  return BlockHandle{*offset, *size};
}

Result<Footer> ReadFooter(std::string_view bytes, const std::string& file_name) {
  if (bytes.size() < kSstFooterSize) {
    return Corrupt(file_name, "truncated footer: file is " + std::to_string(bytes.size()) +
                                  " bytes, a table footer needs 48");
  }
  const std::string_view footer = bytes.substr(bytes.size() - kSstFooterSize);
  if (LoadLe64(footer.data() + 40) != kSstMagic) {
    return Corrupt(file_name, "bad magic: not a LevelDB table (TensorBundle index)");
  }
  const uint64_t limit = bytes.size() - kSstFooterSize;
  std::string_view in = footer.substr(0, 40);
  Footer out;
  CKPTFS_ASSIGN_OR_RETURN(out.metaindex, ReadHandle(in, limit, file_name, "footer"));
  CKPTFS_ASSIGN_OR_RETURN(out.index, ReadHandle(in, limit, file_name, "footer"));
  return out;
}

std::string BlockName(const BlockHandle& h) {
  return "block at offset " + std::to_string(h.offset);
}

// A decoded snappy block, charged to the budget for as long as it lives.
class DecodedBlock {
 public:
  explicit DecodedBlock(MetadataBudget& budget) : budget_(budget) {}
  DecodedBlock(const DecodedBlock&) = delete;
  DecodedBlock& operator=(const DecodedBlock&) = delete;
  ~DecodedBlock() { Reset(); }

  Result<char*> Allocate(uint64_t length) {
    Reset();
    CKPTFS_RETURN_IF_ERROR(budget_.ChargeOrRefuse(length));
    charged_ = length;
    data_ = std::make_unique<char[]>(length ? length : 1);
    return data_.get();
  }
  void Reset() {
    data_.reset();
    budget_.Release(charged_);
    charged_ = 0;
  }

 private:
  MetadataBudget& budget_;
  std::unique_ptr<char[]> data_;
  uint64_t charged_ = 0;
};

// The block's contents after its trailer is checked and snappy undone; a decoded block
// lives in `decoded` (until its next use).
Result<std::string_view> ReadBlock(std::string_view bytes, const BlockHandle& h,
                                   const std::string& file_name, bool verify,
                                   DecodedBlock& decoded) {
  const std::string_view stored = bytes.substr(h.offset, h.size);
  const char* trailer = bytes.data() + h.offset + h.size;
  const auto type = static_cast<uint8_t>(trailer[0]);
  if (verify) {
    const uint32_t want = UnmaskCrc(LoadLe32(trailer + 1));
    const uint32_t got = Crc32cExtend(Crc32c(stored), std::string_view(trailer, 1));
    if (want != got) {
      return Corrupt(file_name, BlockName(h) + ": block checksum mismatch (stored " + Hex32(want) +
                                    ", computed " + Hex32(got) + ")");
    }
  }
  if (type == 0) return stored;
  if (type != 1) {
    return Corrupt(file_name, BlockName(h) + ": unknown compression type " + std::to_string(type));
  }
  size_t length = 0;
  if (snappy_uncompressed_length(stored.data(), stored.size(), &length) != SNAPPY_OK) {
    return Corrupt(file_name, BlockName(h) + ": snappy block has no valid length");
  }
  if (length > kMaxSstBlock) {
    return Corrupt(file_name, BlockName(h) + ": snappy block states " + std::to_string(length) +
                                  " bytes, over the " + std::to_string(kMaxSstBlock) +
                                  "-byte limit");
  }
  CKPTFS_ASSIGN_OR_RETURN(char* out, decoded.Allocate(length));
  size_t out_length = length;
  if (snappy_uncompress(stored.data(), stored.size(), out, &out_length) != SNAPPY_OK ||
      out_length != length) {
    return Corrupt(file_name, BlockName(h) + ": snappy block does not decode to its stated " +
                                  std::to_string(length) + " bytes");
  }
  return std::string_view(out, length);
}

using EntryFn = std::function<Status(const std::string& key, std::string_view value)>;

// Walks the entries of a block's contents in order, checking the restart array.
Status WalkBlock(std::string_view block, const BlockHandle& h, const std::string& file_name,
                 const EntryFn& fn) {
  auto bad = [&](const std::string& what) {
    return Corrupt(file_name, BlockName(h) + ": " + what);
  };
  if (block.size() < 4) return bad("too short for a restart count");
  const uint32_t restarts = LoadLe32(block.data() + block.size() - 4);
  if (restarts == 0 || restarts > (block.size() - 4) / 4) {
    return bad("restart count " + std::to_string(restarts) + " does not fit the block");
  }
  const size_t data_end = block.size() - 4 - size_t{restarts} * 4;
  const char* restart_array = block.data() + data_end;
  std::string key;
  size_t next_restart = 0;
  std::string_view in = block.substr(0, data_end);
  while (!in.empty()) {
    const size_t at = data_end - in.size();
    const bool is_restart =
        next_restart < restarts && LoadLe32(restart_array + 4 * next_restart) == at;
    VarintError error{};
    const auto shared = ReadVarint32(in, &error);
    const auto non_shared = shared ? ReadVarint32(in, &error) : std::nullopt;
    const auto value_length = non_shared ? ReadVarint32(in, &error) : std::nullopt;
    if (!value_length) return bad("entry at " + std::to_string(at) + ": " + VarintErrorText(error));
    if (*shared > key.size() || (is_restart && *shared != 0) || (at == 0 && !is_restart)) {
      return bad("entry at " + std::to_string(at) + ": bad shared prefix or restart point");
    }
    if (in.size() < uint64_t{*non_shared} + *value_length) {
      return bad("entry at " + std::to_string(at) + " runs past the block");
    }
    key.resize(*shared);
    key.append(in.substr(0, *non_shared));
    CKPTFS_RETURN_IF_ERROR(fn(key, in.substr(*non_shared, *value_length)));
    in.remove_prefix(*non_shared + *value_length);
    next_restart += is_restart ? 1 : 0;
  }
  // An empty block (TF's metaindex) holds one restart point at 0 and no entries.
  const bool empty_ok = data_end == 0 && restarts == 1 && LoadLe32(restart_array) == 0;
  if (next_restart != restarts && !empty_ok) {
    return bad("restart array does not match the entries");
  }
  return Status::Ok();
}

Result<BlockHandle> HandleFromValue(std::string_view value, uint64_t limit,
                                    const std::string& file_name) {
  std::string_view in = value;
  CKPTFS_ASSIGN_OR_RETURN(BlockHandle h, ReadHandle(in, limit, file_name, "index block"));
  if (!in.empty()) return Corrupt(file_name, "index block: trailing bytes after a block handle");
  return h;
}

struct IndexEntry {
  std::string separator;
  BlockHandle handle;
};

// The index block's separators, charged to `budget` (the caller releases `*charged`).
Result<std::vector<IndexEntry>> ReadIndex(std::string_view bytes, const Footer& footer,
                                          const std::string& file_name, bool verify,
                                          MetadataBudget& budget, uint64_t* charged) {
  const uint64_t limit = bytes.size() - kSstFooterSize;
  DecodedBlock decoded(budget);
  // The metaindex is read for its checksum and shape; TF writes it empty (no filters).
  CKPTFS_ASSIGN_OR_RETURN(std::string_view meta,
                          ReadBlock(bytes, footer.metaindex, file_name, verify, decoded));
  CKPTFS_RETURN_IF_ERROR(WalkBlock(meta, footer.metaindex, file_name,
                                   [](const std::string&, std::string_view) { return Status(); }));
  CKPTFS_ASSIGN_OR_RETURN(std::string_view index,
                          ReadBlock(bytes, footer.index, file_name, verify, decoded));
  std::vector<IndexEntry> out;
  CKPTFS_RETURN_IF_ERROR(
      WalkBlock(index, footer.index, file_name, [&](const std::string& key, std::string_view v) {
        CKPTFS_ASSIGN_OR_RETURN(BlockHandle h, HandleFromValue(v, limit, file_name));
        if (!out.empty() && key <= out.back().separator) {
          return Corrupt(file_name, "index block: separators not strictly ascending");
        }
        // Twice the entry: the vector holds up to double its size while it grows.
        const uint64_t cost = 2 * sizeof(IndexEntry) + (key.size() > 15 ? key.size() + 1 : 0);
        Status charge = budget.ChargeOrRefuse(cost);
        if (!charge.ok()) return charge;
        *charged += cost;
        out.push_back({key, h});
        return Status::Ok();
      }));
  return out;
}

// Releases what ReadIndex charged when the walk ends, however it ends.
struct IndexCharge {
  MetadataBudget& budget;
  uint64_t bytes = 0;
  ~IndexCharge() { budget.Release(bytes); }
};

}  // namespace

Result<SstStats> WalkSstable(std::string_view bytes, const std::string& file_name,
                             MetadataBudget& budget, const SstEntryFn& fn, bool verify_checksums) {
  CKPTFS_ASSIGN_OR_RETURN(Footer footer, ReadFooter(bytes, file_name));
  IndexCharge index_charge{budget};
  CKPTFS_ASSIGN_OR_RETURN(
      std::vector<IndexEntry> index,
      ReadIndex(bytes, footer, file_name, verify_checksums, budget, &index_charge.bytes));
  SstStats stats;
  std::string last_key;  // the previous entry's, for the strictly-ascending check
  DecodedBlock decoded(budget);
  for (const IndexEntry& ie : index) {
    CKPTFS_ASSIGN_OR_RETURN(std::string_view block,
                            ReadBlock(bytes, ie.handle, file_name, verify_checksums, decoded));
    const uint64_t before = stats.entries;
    CKPTFS_RETURN_IF_ERROR(
        WalkBlock(block, ie.handle, file_name, [&](const std::string& key, std::string_view v) {
          if (stats.entries > 0 && key <= last_key) {
            return Corrupt(file_name, "keys not strictly ascending: \"" + key + "\" after \"" +
                                          last_key + "\"");
          }
          ++stats.entries;
          last_key.assign(key);
          return fn(key, v);
        }));
    if (stats.entries == before) {
      return Corrupt(file_name, BlockName(ie.handle) + ": empty data block");
    }
    if (last_key > ie.separator) {
      return Corrupt(file_name, BlockName(ie.handle) + ": key \"" + last_key +
                                    "\" is past its index separator");
    }
    stats.data_blocks++;
    stats.snappy_blocks += bytes[ie.handle.offset + ie.handle.size] == 1 ? 1 : 0;
  }
  return stats;
}

std::vector<std::string> CheckSstableBlocks(std::string_view bytes, const std::string& file_name) {
  auto footer = ReadFooter(bytes, file_name);
  if (!footer.ok()) return {footer.status().message()};
  MetadataBudget budget(file_name);
  budget.AddStored(bytes.size());
  IndexCharge index_charge{budget};
  auto index = ReadIndex(bytes, *footer, file_name, true, budget, &index_charge.bytes);
  if (!index.ok()) return {index.status().message()};
  std::vector<std::string> problems;
  DecodedBlock decoded(budget);
  for (const IndexEntry& ie : *index) {
    auto block = ReadBlock(bytes, ie.handle, file_name, true, decoded);
    Status s = block.status();
    if (s.ok()) {
      s = WalkBlock(*block, ie.handle, file_name,
                    [](const std::string&, std::string_view) { return Status(); });
    }
    if (!s.ok()) problems.push_back(s.message());
  }
  return problems;
}

}  // namespace ckptfs::tf
