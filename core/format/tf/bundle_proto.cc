#include "core/format/tf/bundle_proto.h"

#include <array>
#include <string>

#include "core/format/tf/varint.h"

namespace ckptfs::tf {
namespace {

constexpr int64_t kMaxDims = 64;  // TF's TensorShape limit (kMaxDims = 254) is looser

// One field of a message: its number, wire type and payload.
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t varint = 0;     // wire type 0
  uint32_t fixed32 = 0;    // wire type 5
  std::string_view bytes;  // wire type 2
};

// Reads fields one at a time from a message's bytes.
class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}
  bool done() const { return in_.empty(); }

  Result<Field> Next() {
    VarintError error{};
    const auto tag = ReadVarint64(in_, &error);
    if (!tag) return Status::Corruption(std::string("field tag: ") + VarintErrorText(error));
    Field f;
    f.wire_type = static_cast<uint32_t>(*tag & 7);
    if (*tag >> 3 == 0 || *tag >> 3 > UINT32_MAX >> 3) {
      return Status::Corruption("bad field number " + std::to_string(*tag >> 3));
    }
    f.number = static_cast<uint32_t>(*tag >> 3);
    const std::string where = "field " + std::to_string(f.number) + ": ";
    switch (f.wire_type) {
      case 0: {
        const auto v = ReadVarint64(in_, &error);
        if (!v) return Status::Corruption(where + VarintErrorText(error));
        f.varint = *v;
        return f;
      }
      case 1:
      case 5: {
        const size_t n = f.wire_type == 1 ? 8 : 4;
        if (in_.size() < n) return Status::Corruption(where + "truncated fixed-width value");
        if (n == 4) f.fixed32 = LoadLe32(in_.data());
        in_.remove_prefix(n);
        return f;
      }
      case 2: {
        const auto len = ReadVarint64(in_, &error);
        if (!len) return Status::Corruption(where + "length: " + VarintErrorText(error));
        if (*len > in_.size()) {
          return Status::Corruption(where + "length " + std::to_string(*len) +
                                    " runs past the message");
        }
        f.bytes = in_.substr(0, *len);
        in_.remove_prefix(*len);
        return f;
      }
      default:
        return Status::Corruption(where + "unsupported wire type " + std::to_string(f.wire_type));
    }
  }

 private:
  std::string_view in_;
};

Status WrongType(const Field& f, const char* name) {
  return Status::Corruption(std::string(name) + ": wrong wire type " + std::to_string(f.wire_type));
}

// An int32 field: protobuf writes negatives sign-extended to 64 bits.
Result<int64_t> Int32Of(const Field& f, const char* name) {
  if (f.wire_type != 0) return WrongType(f, name);
  const auto v = static_cast<int64_t>(f.varint);
  if (v < INT32_MIN || v > INT32_MAX) {
    return Status::Corruption(std::string(name) + ": value out of int32 range");
  }
  return v;
}

// An int64 field that must not be negative.
Result<uint64_t> NonNegative(const Field& f, const char* name) {
  if (f.wire_type != 0) return WrongType(f, name);
  if (f.varint > static_cast<uint64_t>(INT64_MAX)) {
    return Status::Corruption(std::string(name) + ": negative value");
  }
  return f.varint;
}

Status DecodeVersion(std::string_view bytes, BundleHeader& out) {
  WireReader r(bytes);
  while (!r.done()) {
    CKPTFS_ASSIGN_OR_RETURN(Field f, r.Next());
    if (f.number == 1) {
      CKPTFS_ASSIGN_OR_RETURN(out.producer, Int32Of(f, "version.producer"));
    } else if (f.number == 2) {
      CKPTFS_ASSIGN_OR_RETURN(out.min_consumer, Int32Of(f, "version.min_consumer"));
    }
  }
  return Status::Ok();
}

Status DecodeShape(std::string_view bytes, std::vector<uint64_t>& shape) {
  WireReader r(bytes);
  while (!r.done()) {
    CKPTFS_ASSIGN_OR_RETURN(Field f, r.Next());
    if (f.number == 3 && f.wire_type == 0 && f.varint != 0) {
      return Status::Corruption("shape: unknown rank");
    }
    if (f.number != 2) continue;
    if (f.wire_type != 2) return WrongType(f, "shape.dim");
    if (static_cast<int64_t>(shape.size()) == kMaxDims) {
      return Status::Corruption("shape: more than " + std::to_string(kMaxDims) + " dims");
    }
    WireReader dim(f.bytes);
    uint64_t size = 0;
    while (!dim.done()) {
      CKPTFS_ASSIGN_OR_RETURN(Field d, dim.Next());
      if (d.number != 1) continue;
      CKPTFS_ASSIGN_OR_RETURN(size, NonNegative(d, "shape.dim.size"));
    }
    shape.push_back(size);
  }
  return Status::Ok();
}

Result<TensorSlice> DecodeSlice(std::string_view bytes) {
  TensorSlice slice;
  WireReader r(bytes);
  while (!r.done()) {
    CKPTFS_ASSIGN_OR_RETURN(Field f, r.Next());
    if (f.number != 1) continue;
    if (f.wire_type != 2) return WrongType(f, "slice.extent");
    if (static_cast<int64_t>(slice.size()) == kMaxDims) {
      return Status::Corruption("slice: more than " + std::to_string(kMaxDims) + " extents");
    }
    SliceExtent e;
    WireReader er(f.bytes);
    while (!er.done()) {
      CKPTFS_ASSIGN_OR_RETURN(Field x, er.Next());
      if (x.number == 1) {
        CKPTFS_ASSIGN_OR_RETURN(e.start, NonNegative(x, "slice.extent.start"));
      } else if (x.number == 2) {
        CKPTFS_ASSIGN_OR_RETURN(e.length, NonNegative(x, "slice.extent.length"));
      }
    }
    slice.push_back(e);
  }
  return slice;
}

Status DecodeEntryField(const Field& f, size_t max_slices, BundleEntry& e) {
  switch (f.number) {
    case 1:
      if (f.wire_type != 0) return WrongType(f, "dtype");
      e.dtype = static_cast<int64_t>(f.varint);
      return Status::Ok();
    case 2:
      if (f.wire_type != 2) return WrongType(f, "shape");
      return DecodeShape(f.bytes, e.shape);
    case 3: {
      CKPTFS_ASSIGN_OR_RETURN(e.shard_id, Int32Of(f, "shard_id"));
      if (e.shard_id < 0) return Status::Corruption("shard_id: negative value");
      return Status::Ok();
    }
    case 4: {
      CKPTFS_ASSIGN_OR_RETURN(e.offset, NonNegative(f, "offset"));
      return Status::Ok();
    }
    case 5: {
      CKPTFS_ASSIGN_OR_RETURN(e.size, NonNegative(f, "size"));
      return Status::Ok();
    }
    case 6:
      if (f.wire_type != 5) return WrongType(f, "crc32c");
      e.has_crc32c = true;
      e.crc32c = f.fixed32;
      return Status::Ok();
    case 7: {
      if (f.wire_type != 2) return WrongType(f, "slices");
      if (e.slices.size() >= max_slices) {
        return Status::Corruption("more than " + std::to_string(max_slices) +
                                  " slices (one per slice entry of the index)");
      }
      CKPTFS_ASSIGN_OR_RETURN(TensorSlice s, DecodeSlice(f.bytes));
      e.slices.push_back(std::move(s));
      return Status::Ok();
    }
    default:
      return Status::Ok();
  }
}

}  // namespace

Result<BundleHeader> DecodeBundleHeader(std::string_view bytes) {
  BundleHeader h;
  WireReader r(bytes);
  while (!r.done()) {
    CKPTFS_ASSIGN_OR_RETURN(Field f, r.Next());
    if (f.number == 1) {
      CKPTFS_ASSIGN_OR_RETURN(h.num_shards, Int32Of(f, "num_shards"));
    } else if (f.number == 2) {
      if (f.wire_type != 0) return WrongType(f, "endianness");
      if (f.varint > 1) return Status::Corruption("endianness: unknown value");
      h.big_endian = f.varint == 1;
    } else if (f.number == 3) {
      if (f.wire_type != 2) return WrongType(f, "version");
      CKPTFS_RETURN_IF_ERROR(DecodeVersion(f.bytes, h));
    }
  }
  if (h.num_shards < 1) {
    return Status::Corruption("num_shards " + std::to_string(h.num_shards) + " is not positive");
  }
  return h;
}

Result<BundleEntry> DecodeBundleEntry(std::string_view bytes, size_t max_slices) {
  BundleEntry e;
  WireReader r(bytes);
  while (!r.done()) {
    CKPTFS_ASSIGN_OR_RETURN(Field f, r.Next());
    CKPTFS_RETURN_IF_ERROR(DecodeEntryField(f, max_slices, e));
  }
  return e;
}

TfDtype DescribeTfDtype(int64_t code) {
  struct Row {
    int64_t code;
    TfKind kind;
    std::optional<Dtype> dtype;
    std::string_view name;
  };
  static constexpr std::array<Row, 30> kRows = {{
      {1, TfKind::kNumeric, Dtype::kF32, "DT_FLOAT"},
      {2, TfKind::kNumeric, Dtype::kF64, "DT_DOUBLE"},
      {3, TfKind::kNumeric, Dtype::kI32, "DT_INT32"},
      {4, TfKind::kNumeric, Dtype::kU8, "DT_UINT8"},
      {5, TfKind::kNumeric, Dtype::kI16, "DT_INT16"},
      {6, TfKind::kNumeric, Dtype::kI8, "DT_INT8"},
      {7, TfKind::kString, std::nullopt, "DT_STRING"},
      {8, TfKind::kUnsupported, std::nullopt, "DT_COMPLEX64"},
      {9, TfKind::kNumeric, Dtype::kI64, "DT_INT64"},
      {10, TfKind::kNumeric, Dtype::kBool, "DT_BOOL"},
      {11, TfKind::kUnsupported, std::nullopt, "DT_QINT8"},
      {12, TfKind::kUnsupported, std::nullopt, "DT_QUINT8"},
      {13, TfKind::kUnsupported, std::nullopt, "DT_QINT32"},
      {14, TfKind::kNumeric, Dtype::kBF16, "DT_BFLOAT16"},
      {15, TfKind::kUnsupported, std::nullopt, "DT_QINT16"},
      {16, TfKind::kUnsupported, std::nullopt, "DT_QUINT16"},
      {17, TfKind::kNumeric, Dtype::kU16, "DT_UINT16"},
      {18, TfKind::kUnsupported, std::nullopt, "DT_COMPLEX128"},
      {19, TfKind::kNumeric, Dtype::kF16, "DT_HALF"},
      {20, TfKind::kResource, std::nullopt, "DT_RESOURCE"},
      {21, TfKind::kVariant, std::nullopt, "DT_VARIANT"},
      {22, TfKind::kNumeric, Dtype::kU32, "DT_UINT32"},
      {23, TfKind::kNumeric, Dtype::kU64, "DT_UINT64"},
      {24, TfKind::kNumeric, Dtype::kF8E5M2, "DT_FLOAT8_E5M2"},
      {25, TfKind::kNumeric, Dtype::kF8E4M3, "DT_FLOAT8_E4M3FN"},
      {26, TfKind::kUnsupported, std::nullopt, "DT_FLOAT8_E4M3FNUZ"},
      {27, TfKind::kUnsupported, std::nullopt, "DT_FLOAT8_E4M3B11FNUZ"},
      {28, TfKind::kUnsupported, std::nullopt, "DT_FLOAT8_E5M2FNUZ"},
      {29, TfKind::kUnsupported, std::nullopt, "DT_INT4"},
      {30, TfKind::kUnsupported, std::nullopt, "DT_UINT4"},
  }};
  for (const Row& row : kRows) {
    if (row.code == code) return {row.kind, row.dtype, row.name};
  }
  if (code > 100 && code <= 130)
    return {TfKind::kUnsupported, std::nullopt, "a reference DataType"};
  return {TfKind::kUnsupported, std::nullopt, "an unknown DataType"};
}

}  // namespace ckptfs::tf
