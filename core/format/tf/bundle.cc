#include "core/format/tf/bundle.h"

#include <algorithm>
#include <cstdio>

#include "core/checked.h"
#include "core/encoding/shape.h"
#include "core/format/tf/crc32c.h"
#include "core/format/tf/slices.h"
#include "core/format/tf/sstable.h"

namespace ckptfs::tf {
namespace {

Status KeyError(const std::string& file_name, std::string_view key, const std::string& what) {
  return Status::Corruption(file_name + ": \"" + std::string(key) + "\": " + what);
}

// OrderedCode (tensorflow/core/lib/strings/ordered_code.cc), the writers TF's slice keys use.
void WriteNumIncreasing(std::string& out, uint64_t v) {
  char buf[8];
  int len = 0;
  for (; v > 0; v >>= 8) buf[7 - len++] = static_cast<char>(v & 0xff);
  out += static_cast<char>(len);
  out.append(buf + 8 - len, static_cast<size_t>(len));
}

void WriteSignedNumIncreasing(std::string& out, int64_t v) {
  const uint64_t x = v < 0 ? ~static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int bits = 0;
  for (uint64_t y = x; y > 0; y >>= 1) ++bits;
  const int len = std::min(bits / 7 + 1, 10);  // bytes, sign and length bits included
  static constexpr unsigned char kHeader[11][2] = {{0, 0},    {0x80, 0},    {0xc0, 0},   {0xe0, 0},
                                                   {0xf0, 0}, {0xf8, 0},    {0xfc, 0},   {0xfe, 0},
                                                   {0xff, 0}, {0xff, 0x80}, {0xff, 0xc0}};
  unsigned char buf[10];
  const unsigned char sign = v < 0 ? 0xff : 0;
  buf[0] = buf[1] = sign;
  for (int i = 0; i < 8; ++i)
    buf[2 + i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (56 - 8 * i));
  unsigned char* begin = buf + 10 - len;
  begin[0] ^= kHeader[len][0];
  if (len > 1) begin[1] ^= kHeader[len][1];
  out.append(reinterpret_cast<const char*>(begin), static_cast<size_t>(len));
}

Result<TfLocation> LocationOf(const BundleEntry& e, int64_t num_shards,
                              const std::string& file_name, std::string_view key) {
  if (e.shard_id >= num_shards) {
    return KeyError(
        file_name, key,
        "shard_id " + std::to_string(e.shard_id) + " >= num_shards " + std::to_string(num_shards));
  }
  return TfLocation{static_cast<uint32_t>(e.shard_id), e.offset, e.size, e.has_crc32c, e.crc32c};
}

// The size rule for an entry's bytes, by kind: numeric tensors are exact; a string tensor
// holds at least a length byte per element and the 4-byte length checksum.
Status CheckSize(const TfDtype& type, std::span<const uint64_t> shape, uint64_t size,
                 const std::string& file_name, std::string_view key) {
  const uint64_t esize = type.dtype ? DtypeSize(*type.dtype) : 1;
  const auto bytes = ShapeBytes(shape, esize);
  if (!bytes) {
    return KeyError(file_name, key, "shape " + ShapeText(shape) + " has a huge element count");
  }
  if (type.kind == TfKind::kNumeric && *bytes != size) {
    return KeyError(file_name, key,
                    std::string(type.name) + " shape " + ShapeText(shape) + " needs " +
                        std::to_string(*bytes) + " bytes, entry says " + std::to_string(size));
  }
  if (type.kind == TfKind::kString && *bytes > 0 && size < *bytes + 4) {
    return KeyError(
        file_name, key,
        "DT_STRING shape " + ShapeText(shape) + " does not fit " + std::to_string(size) + " bytes");
  }
  return Status::Ok();
}

// A slice entry (its key starts with "\x00"), kept until every tensor entry is parsed.
struct SliceEntry {
  std::string key;
  std::string value;
};

Status AddSlices(const BundleEntry& e, std::span<const SliceEntry> slice_entries,
                 int64_t num_shards, const std::string& file_name, TfTensor& t) {
  for (const TensorSlice& s : e.slices) {
    TfSlicePiece piece{s, {}};
    if (s.size() != t.shape.size()) return KeyError(file_name, t.key, "slice rank differs");
    std::vector<uint64_t> lengths;
    for (size_t a = 0; a < s.size(); ++a) {
      if (!s[a].length && s[a].start != 0) {
        return KeyError(file_name, t.key, "whole-axis slice extent with a start");
      }
      if (s[a].start > t.shape[a] || s[a].length.value_or(0) > t.shape[a] - s[a].start) {
        return KeyError(file_name, t.key, "slice outside the shape on axis " + std::to_string(a));
      }
      piece.slice[a].length = s[a].length.value_or(t.shape[a]);
      lengths.push_back(*piece.slice[a].length);
    }
    const std::string slice_key = EncodeSliceKey(t.key, s);
    const auto it =
        std::lower_bound(slice_entries.begin(), slice_entries.end(), slice_key,
                         [](const SliceEntry& x, const std::string& k) { return x.key < k; });
    if (it == slice_entries.end() || it->key != slice_key) {
      return KeyError(file_name, t.key, "slice entry missing for slice " + ShapeText(lengths));
    }
    auto se = DecodeBundleEntry(it->value);
    if (!se.ok()) return KeyError(file_name, t.key, "slice entry: " + se.status().message());
    if (se->dtype != e.dtype || se->shape != lengths) {
      return KeyError(file_name, t.key, "slice entry dtype or shape differs from its slice");
    }
    CKPTFS_RETURN_IF_ERROR(CheckSize(t.type, lengths, se->size, file_name, t.key));
    CKPTFS_ASSIGN_OR_RETURN(piece.where, LocationOf(*se, num_shards, file_name, t.key));
    t.slices.push_back(std::move(piece));
  }
  if (t.type.kind != TfKind::kNumeric) return Status::Ok();
  return TensorRuns(t, DtypeSize(*t.type.dtype), file_name).status();
}

Result<TfTensor> ParseEntry(std::string_view key, std::string_view value,
                            std::span<const SliceEntry> slice_entries, int64_t num_shards,
                            const std::string& file_name) {
  auto e = DecodeBundleEntry(value, slice_entries.size());
  if (!e.ok()) return KeyError(file_name, key, e.status().message());
  TfTensor t;
  t.key = key;
  t.dtype_code = e->dtype;
  t.type = DescribeTfDtype(e->dtype);
  t.shape = std::move(e->shape);
  if (e->slices.empty()) {
    CKPTFS_RETURN_IF_ERROR(CheckSize(t.type, t.shape, e->size, file_name, t.key));
    CKPTFS_ASSIGN_OR_RETURN(t.where, LocationOf(*e, num_shards, file_name, t.key));
    return t;
  }
  const uint64_t esize = t.type.dtype ? DtypeSize(*t.type.dtype) : 1;
  if (!ShapeBytes(t.shape, esize)) {
    return KeyError(file_name, t.key, "shape " + ShapeText(t.shape) + " has a huge element count");
  }
  CKPTFS_RETURN_IF_ERROR(AddSlices(*e, slice_entries, num_shards, file_name, t));
  return t;
}

Status NoHeader(const std::string& file_name) {
  return Status::Corruption(file_name + ": no bundle header (key \"\")");
}

Result<BundleHeader> ParseHeader(std::string_view value, const std::string& file_name) {
  auto h = DecodeBundleHeader(value);
  if (!h.ok()) return Status::Corruption(file_name + ": header: " + h.status().message());
  if (h->big_endian) {
    return Status::Unsupported(file_name +
                               ": big-endian bundle: ckptfs serves little-endian tensors only");
  }
  if (h->min_consumer > kTensorBundleVersion) {
    return Status::Unsupported(file_name + ": bundle needs a reader of version " +
                               std::to_string(h->min_consumer) + " (ckptfs reads version 1)");
  }
  if (h->num_shards > kMaxTfShards) {
    return Status::Corruption(file_name + ": num_shards " + std::to_string(h->num_shards) +
                              " is over " + std::to_string(kMaxTfShards));
  }
  return h;
}

}  // namespace

std::optional<uint64_t> ShapeBytes(std::span<const uint64_t> shape, uint64_t element_size) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  // A zero anywhere makes it empty, even after dimensions whose product is too large.
  if (std::find(shape.begin(), shape.end(), 0u) != shape.end()) return 0;
  const std::optional<uint64_t> n = CheckedProduct(shape, element_size);
  if (!n || *n > kLimit) return std::nullopt;
  return n;
}

std::string EncodeSliceKey(std::string_view key, const TensorSlice& slice) {
  std::string out;
  WriteNumIncreasing(out, 0);
  for (char c : key) {
    if (c == '\0') {
      out += std::string_view("\x00\xff", 2);
    } else if (c == '\xff') {
      out += std::string_view("\xff\x00", 2);
    } else {
      out += c;
    }
  }
  out += std::string_view("\x00\x01", 2);
  WriteNumIncreasing(out, slice.size());
  for (const SliceExtent& e : slice) {
    WriteSignedNumIncreasing(out, static_cast<int64_t>(e.start));
    WriteSignedNumIncreasing(out, e.length ? static_cast<int64_t>(*e.length) : -1);
  }
  return out;
}

uint64_t TfTensorBytes(const TfTensor& t) {
  uint64_t bytes = 2 * sizeof(TfTensor) + HeapBytes(t.key) + t.shape.capacity() * sizeof(uint64_t) +
                   t.slices.capacity() * sizeof(TfSlicePiece);
  for (const TfSlicePiece& p : t.slices) bytes += p.slice.capacity() * sizeof(SliceExtent);
  return bytes;
}

Result<TensorBundle> ParseTensorBundle(std::string_view bytes, const std::string& file_name) {
  MetadataBudget budget(file_name);
  budget.AddStored(bytes.size());
  return ParseTensorBundle(bytes, file_name, budget);
}

Result<TensorBundle> ParseTensorBundle(std::string_view bytes, const std::string& file_name,
                                       MetadataBudget& budget) {
  TensorBundle bundle;
  bool have_header = false;
  // Slice keys start with "\x00", so they sort right after the header and are all kept by
  // the time the first tensor entry (which may need them) comes.
  std::vector<SliceEntry> slice_entries;
  struct Charged {
    MetadataBudget& budget;
    uint64_t bytes = 0;
    ~Charged() { budget.Release(bytes); }
  } slices_charge{budget};
  auto on_entry = [&](std::string_view key, std::string_view value) -> Status {
    if (!have_header) {
      if (!key.empty()) return NoHeader(file_name);
      CKPTFS_ASSIGN_OR_RETURN(bundle.header, ParseHeader(value, file_name));
      have_header = true;
      return Status::Ok();
    }
    if (key[0] == '\0') {
      const uint64_t cost = 2 * sizeof(SliceEntry) + key.size() + value.size() + 2;
      CKPTFS_RETURN_IF_ERROR(budget.ChargeOrRefuse(cost));
      slices_charge.bytes += cost;
      slice_entries.push_back({std::string(key), std::string(value)});
      return Status::Ok();
    }
    CKPTFS_ASSIGN_OR_RETURN(
        TfTensor t, ParseEntry(key, value, slice_entries, bundle.header.num_shards, file_name));
    CKPTFS_RETURN_IF_ERROR(budget.ChargeOrRefuse(TfTensorBytes(t)));
    bundle.tensors.push_back(std::move(t));
    return Status::Ok();
  };
  CKPTFS_ASSIGN_OR_RETURN(SstStats stats, WalkSstable(bytes, file_name, budget, on_entry));
  if (!have_header) return NoHeader(file_name);
  bundle.index_blocks = stats.data_blocks;
  bundle.snappy_blocks = stats.snappy_blocks;
  return bundle;
}

std::string DataFileName(std::string_view prefix, uint32_t shard_id, int64_t num_shards) {
  char buf[40];
  std::snprintf(buf, sizeof buf, ".data-%05u-of-%05lld", shard_id,
                static_cast<long long>(num_shards));
  return std::string(prefix) + buf;
}

Result<std::vector<uint64_t>> DataFileSizes(
    const TensorBundle& bundle, std::string_view prefix,
    const std::function<std::optional<uint64_t>(const std::string& name)>& size_of) {
  const int64_t n = bundle.header.num_shards;
  std::vector<uint64_t> sizes;
  for (int64_t k = 0; k < n; ++k) {
    const std::string name = DataFileName(prefix, static_cast<uint32_t>(k), n);
    const auto size = size_of(name);
    if (!size) {
      return Status::NotFound(name + ": missing data file (the index names " + std::to_string(n) +
                              " shards)");
    }
    sizes.push_back(*size);
  }
  return sizes;
}

Status CheckDataFileExtents(const TensorBundle& bundle, std::span<const uint64_t> data_sizes,
                            std::string_view prefix) {
  const int64_t n = bundle.header.num_shards;
  if (data_sizes.size() != static_cast<size_t>(n)) {
    return Status::InvalidArgument(std::string(prefix) + ": " + std::to_string(n) +
                                   " data files expected, sizes of " +
                                   std::to_string(data_sizes.size()) + " given");
  }
  auto check = [&](const TfLocation& w, const std::string& key) {
    const uint64_t file_size = data_sizes[w.shard_id];
    if (!RangeWithin(w.offset, w.size, file_size)) {
      return Status::Corruption(DataFileName(prefix, w.shard_id, n) + ": \"" + key +
                                "\" at offset " + std::to_string(w.offset) + " size " +
                                std::to_string(w.size) + " runs past the end of the file (" +
                                std::to_string(file_size) + " bytes)");
    }
    return Status::Ok();
  };
  for (const TfTensor& t : bundle.tensors) {
    if (!t.partitioned()) CKPTFS_RETURN_IF_ERROR(check(t.where, t.key));
    for (const TfSlicePiece& p : t.slices) CKPTFS_RETURN_IF_ERROR(check(p.where, t.key));
  }
  return Status::Ok();
}

bool TensorCrcMatches(const TfLocation& where, std::string_view bytes) {
  return !where.has_crc32c || UnmaskCrc(where.masked_crc32c) == Crc32c(bytes);
}

}  // namespace ckptfs::tf
