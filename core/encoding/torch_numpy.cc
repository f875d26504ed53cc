// numpy values in a torch.save pickle: the part of TorchInterpreter (torch_interpreter.h) that
// serves numpy arrays as tensors, with the latin-1 data protocol 2 writes, and reads numpy
// dtypes and scalars as values.
#include <cstring>
#include <string>
#include <tuple>

#include "core/checked.h"
#include "core/encoding/torch_interpreter.h"

namespace ckptfs {
namespace {

using json = nlohmann::ordered_json;

// The bytes latin-1 text stands for: UTF-8 of code points below 256, each back to its
// byte. nullopt, with the offending byte of `text` in *bad, where a code point is 256
// or more or the UTF-8 is malformed.
std::optional<std::string> Latin1Bytes(const std::string& text, size_t* bad) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      continue;
    }
    const auto next = i + 1 < text.size() ? static_cast<uint8_t>(text[i + 1]) : 0;
    if ((c & 0xfe) != 0xc2 || (next & 0xc0) != 0x80) {
      *bad = i;
      return std::nullopt;
    }
    out += static_cast<char>(((c & 0x03) << 6) | (next & 0x3f));
    ++i;
  }
  return out;
}

// The Dtype of a numpy descriptor ("<f4", "|u1"), little-endian or byte-sized only.
std::optional<Dtype> DtypeOfNumpy(std::string_view descr) {
  static constexpr std::pair<std::string_view, Dtype> kDescrs[] = {
      {"<f8", Dtype::kF64}, {"<f4", Dtype::kF32},  {"<f2", Dtype::kF16}, {"<i8", Dtype::kI64},
      {"<i4", Dtype::kI32}, {"<i2", Dtype::kI16},  {"|i1", Dtype::kI8},  {"<u8", Dtype::kU64},
      {"<u4", Dtype::kU32}, {"<u2", Dtype::kU16},  {"|u1", Dtype::kU8},  {"|b1", Dtype::kBool},
      {"<c8", Dtype::kC64}, {"<c16", Dtype::kC128}};
  for (auto [d, dtype] : kDescrs) {
    if (d == descr) return dtype;
  }
  return std::nullopt;
}

// Bytes of a dense tensor, nullopt on overflow.
std::optional<uint64_t> TensorBytes(Dtype dtype, std::span<const uint64_t> shape) {
  return CheckedProduct(shape, DtypeSize(dtype));
}

}  // namespace

bool IsNumpyReconstruct(std::string_view fn) {
  return fn == "numpy.core.multiarray._reconstruct" || fn == "numpy._core.multiarray._reconstruct";
}

json NumpyScalar(const std::string& dtype, const std::string& bytes) {
  auto load = [&](auto zero) -> json {
    decltype(zero) v{};
    if (bytes.size() != sizeof(v)) return json{{"numpy_scalar", dtype}};
    std::memcpy(&v, bytes.data(), sizeof(v));
    return v;
  };
  if (dtype == "<f8") return load(double{});
  if (dtype == "<f4") return load(float{});
  if (dtype == "<i8") return load(int64_t{});
  if (dtype == "<i4") return load(int32_t{});
  if (dtype == "<u8") return load(uint64_t{});
  if (dtype == "<u4") return load(uint32_t{});
  if (dtype == "|b1" && bytes.size() == 1) return bytes[0] != 0;
  return json{{"numpy_scalar", dtype}};
}

const std::string* TorchInterpreter::Latin1Text(uint32_t v) const {
  const PickleValue& p = At(v);
  const PickleValue* args = p.kind == PickleKind::kCall ? Args(p) : nullptr;
  if (!args || !IsGlobal(p.items[0], "_codecs.encode") || args->items.size() != 2 ||
      At(args->items[0]).kind != PickleKind::kString || At(args->items[1]).text != "latin1") {
    return nullptr;
  }
  return &At(args->items[0]).text;
}

std::optional<std::string> TorchInterpreter::BytesOf(uint32_t v) const {
  const PickleValue& p = At(v);
  if (p.kind == PickleKind::kBytes) return p.text;
  const std::string* text = Latin1Text(v);
  size_t bad = 0;
  return text ? Latin1Bytes(*text, &bad) : std::nullopt;
}

std::optional<std::string> TorchInterpreter::NumpyDtype(uint32_t v) const {
  const PickleValue& p = At(v);
  const PickleValue* args = p.kind == PickleKind::kCall ? Args(p) : nullptr;
  if (!args || !IsGlobal(p.items[0], "numpy.dtype") || args->items.empty() ||
      At(args->items[0]).kind != PickleKind::kString) {
    return std::nullopt;
  }
  std::string order = "|";
  if (p.state != PickleValue::kNoState && At(p.state).kind == PickleKind::kTuple &&
      At(p.state).items.size() > 1 && At(At(p.state).items[1]).kind == PickleKind::kString) {
    order = At(At(p.state).items[1]).text;
  }
  return order + At(args->items[0]).text;
}

// Decoded once per pickle value: arrays may share one through the memo, and decoding it
// again for each would let a small pickle spend a long time.
Result<std::pair<uint64_t, uint64_t>> TorchInterpreter::DecodeOnce(uint32_t raw_value,
                                                                   const std::string* latin1,
                                                                   bool escaped,
                                                                   const std::string& name) {
  auto done = decoded_at_.find(raw_value);
  if (done == decoded_at_.end()) {
    std::string data;
    if (latin1) {
      size_t bad = 0;
      std::optional<std::string> text = Latin1Bytes(*latin1, &bad);
      if (!text) {
        return Bad("numpy array \"" + name + "\": its data is not latin-1 text (byte " +
                   std::to_string(bad) + " of the string starts a code point of 256 or more)");
      }
      data = std::move(*text);
    } else if (escaped) {
      data = At(raw_value).text;  // the unpickler already undid the escapes
    }
    // At most the pickle's own size in all (each byte took at least one byte of text),
    // and the pickle is capped (kMaxTorchPickle); charged to its budget all the same.
    CKPTFS_RETURN_IF_ERROR(budget_.ChargeOrRefuse(data.size()));
    done = decoded_at_.emplace(raw_value, std::pair{out_.decoded.size(), data.size()}).first;
    out_.decoded += data;
  }
  return done->second;
}

Status TorchInterpreter::MaybeNumpyTensor(const PickleValue& call, const std::string& name,
                                          bool* is_tensor) {
  const PickleValue* st = call.state == PickleValue::kNoState ? nullptr : &At(call.state);
  if (!st || st->kind != PickleKind::kTuple || st->items.size() != 5) return Status::Ok();
  const std::optional<std::string> descr = NumpyDtype(st->items[2]);
  if (!descr) return Status::Ok();
  // A plain Dtype, not an optional: GCC sees the optional's flag as maybe-uninitialized.
  const std::optional<Dtype> known = DtypeOfNumpy(*descr);
  if (!known) return Status::Ok();
  const Dtype dtype = *known;
  const uint32_t raw_value = st->items[4];
  const PickleValue& raw = At(raw_value);
  const std::string* latin1 = Latin1Text(raw_value);
  const bool verbatim = raw.kind == PickleKind::kBytes && raw.int_value > 0;
  const bool empty_bytes =
      raw.kind == PickleKind::kCall && Args(raw) && Args(raw)->items.empty() &&
      (IsGlobal(raw.items[0], "__builtin__.bytes") || IsGlobal(raw.items[0], "builtins.bytes"));
  const bool escaped = raw.kind == PickleKind::kBytes && !verbatim;  // protocol 0's STRING
  if (!(verbatim || latin1 || empty_bytes || escaped)) return Status::Ok();
  if (At(st->items[3]).kind != PickleKind::kBool) return Status::Ok();
  const bool fortran = At(st->items[3]).int_value != 0;
  CKPTFS_ASSIGN_OR_RETURN(std::vector<uint64_t> shape,
                          Sizes(st->items[1], "numpy array \"" + name + "\" shape"));
  CKPTFS_RETURN_IF_ERROR(CheckTensorName(name));
  uint64_t data_size = raw.text.size();
  uint64_t decoded_offset = 0;
  if (!verbatim) {
    CKPTFS_ASSIGN_OR_RETURN(std::tie(decoded_offset, data_size),
                            DecodeOnce(raw_value, latin1, escaped, name));
  }
  const std::optional<uint64_t> bytes = TensorBytes(dtype, shape);
  if (!bytes || *bytes != data_size) {
    return Bad("numpy array \"" + name + "\": " + std::to_string(data_size) +
               " bytes of data for shape and dtype " + *descr);
  }
  *is_tensor = true;
  // Keyed by dtype too: two arrays over one bytes object (a memo reference) may read it
  // as different types, and a tensor takes its storage's. Decoded data is keyed by the
  // value it came from, so a memo reference decodes it once.
  const std::string key =
      (!verbatim ? std::string("decoded@") + std::to_string(raw_value)
                 : std::string(kTorchPickleRecord) + "@" + std::to_string(raw.int_value - 1)) +
      ":" + std::string(DtypeName(dtype));
  uint32_t storage = 0;
  if (auto seen = keys_.find(key); seen != keys_.end()) {
    storage = seen->second;  // the same bytes object twice: one storage
  } else if (!verbatim) {
    TorchStorage s{key, dtype, decoded_offset, data_size, 0, false};
    s.decoded = true;
    storage = AddStorage(std::move(s));
  } else {
    const uint64_t offset = static_cast<uint64_t>(raw.int_value - 1);
    storage =
        AddStorage(TorchStorage{key, dtype, pickle_offset_ + offset, raw.text.size(), 0, false});
  }
  TorchTensor t = NewTensor(name);
  t.storage = storage;
  t.stride = RowMajorStrides(shape);
  if (fortran) {  // column-major: the first dimension is the densest
    uint64_t step = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      t.stride[i] = step;
      step *= std::max<uint64_t>(shape[i], 1);
    }
  }
  t.shape = std::move(shape);
  out_.tensors.push_back(std::move(t));
  return Status::Ok();
}

}  // namespace ckptfs
