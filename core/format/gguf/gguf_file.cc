#include "core/format/gguf/gguf_file.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>

namespace ckptfs::gguf {
namespace {

// ggml/src/ggml.c type_traits, by code; the removed codes (4, 5: Q4_2, Q4_3; 31-33 and
// 36-38: the repacked Q4_0_4_4... that gguf files no longer hold) have none.
constexpr GgmlType kTypes[] = {
    {0, "F32", "f32", 1, 4, Dtype::kF32},     {1, "F16", "f16", 1, 2, Dtype::kF16},
    {2, "Q4_0", "q4_0", 32, 18, {}},          {3, "Q4_1", "q4_1", 32, 20, {}},
    {6, "Q5_0", "q5_0", 32, 22, {}},          {7, "Q5_1", "q5_1", 32, 24, {}},
    {8, "Q8_0", "q8_0", 32, 34, {}},          {9, "Q8_1", "q8_1", 32, 36, {}},
    {10, "Q2_K", "q2_k", 256, 84, {}},        {11, "Q3_K", "q3_k", 256, 110, {}},
    {12, "Q4_K", "q4_k", 256, 144, {}},       {13, "Q5_K", "q5_k", 256, 176, {}},
    {14, "Q6_K", "q6_k", 256, 210, {}},       {15, "Q8_K", "q8_k", 256, 292, {}},
    {16, "IQ2_XXS", "iq2_xxs", 256, 66, {}},  {17, "IQ2_XS", "iq2_xs", 256, 74, {}},
    {18, "IQ3_XXS", "iq3_xxs", 256, 98, {}},  {19, "IQ1_S", "iq1_s", 256, 50, {}},
    {20, "IQ4_NL", "iq4_nl", 32, 18, {}},     {21, "IQ3_S", "iq3_s", 256, 110, {}},
    {22, "IQ2_S", "iq2_s", 256, 82, {}},      {23, "IQ4_XS", "iq4_xs", 256, 136, {}},
    {24, "I8", "i8", 1, 1, Dtype::kI8},       {25, "I16", "i16", 1, 2, Dtype::kI16},
    {26, "I32", "i32", 1, 4, Dtype::kI32},    {27, "I64", "i64", 1, 8, Dtype::kI64},
    {28, "F64", "f64", 1, 8, Dtype::kF64},    {29, "IQ1_M", "iq1_m", 256, 56, {}},
    {30, "BF16", "bf16", 1, 2, Dtype::kBF16}, {34, "TQ1_0", "tq1_0", 256, 54, {}},
    {35, "TQ2_0", "tq2_0", 256, 66, {}},      {39, "MXFP4", "mxfp4", 32, 17, {}},
    {40, "NVFP4", "nvfp4", 64, 36, {}},       {41, "Q1_0", "q1_0", 128, 18, {}},
};

constexpr std::array<std::string_view, 13> kValueTypeNames = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};

// Bytes of a scalar value type; 0 for a string or an array.
uint64_t ScalarSize(ValueType type) {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;  // GGUF is little-endian, as is every host ckptfs builds for
}

nlohmann::ordered_json ScalarJson(ValueType type, const uint8_t* p) {
  switch (type) {
    case ValueType::kU8:
      return Load<uint8_t>(p);
    case ValueType::kI8:
      return Load<int8_t>(p);
    case ValueType::kU16:
      return Load<uint16_t>(p);
    case ValueType::kI16:
      return Load<int16_t>(p);
    case ValueType::kU32:
      return Load<uint32_t>(p);
    case ValueType::kI32:
      return Load<int32_t>(p);
    case ValueType::kF32:
      return static_cast<double>(Load<float>(p));
    case ValueType::kBool:
      return p[0] != 0;
    case ValueType::kU64:
      return Load<uint64_t>(p);
    case ValueType::kI64:
      return Load<int64_t>(p);
    case ValueType::kF64:
      return Load<double>(p);
    case ValueType::kString:
    case ValueType::kArray:
      break;
  }
  return nullptr;
}

// Reads the header's fields in order from a prefix of the file. Running past the prefix
// while the file goes on sets `short_` (read more and parse again); running past the file
// is a refusal naming it.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, uint64_t file_size, const std::string& shown)
      : bytes_(bytes), file_size_(file_size), shown_(shown) {}

  uint64_t pos() const { return pos_; }
  bool is_short() const { return short_; }
  const uint8_t* at(uint64_t pos) const { return bytes_.data() + pos; }
  Status Bad(const std::string& what) const {
    return Status::Corruption(shown_ + ": not a valid GGUF file: " + what);
  }

  // Whether `n` more bytes are there; false with the refusal in `status_` or short_ set.
  bool Need(uint64_t n, const char* what) {
    if (n > file_size_ || pos_ > file_size_ - n) {
      status_ = Bad(std::string(what) + " at offset " + std::to_string(pos_) +
                    " runs past the end of the file (" + std::to_string(file_size_) + " bytes)");
      return false;
    }
    if (pos_ + n > bytes_.size()) {
      short_ = true;
      return false;
    }
    return true;
  }
  bool Skip(uint64_t n, const char* what) {
    if (!Need(n, what)) return false;
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Read(T& out, const char* what) {
    if (!Need(sizeof(T), what)) return false;
    out = Load<T>(at(pos_));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string_view& out, const char* what) {
    uint64_t n = 0;
    if (!Read(n, what) || !Need(n, what)) return false;
    out = std::string_view(reinterpret_cast<const char*>(at(pos_)), n);
    pos_ += n;
    return true;
  }
  // The refusal a failed read left, or Ok when it only ran short.
  Status status() const { return status_; }
  void Fail(Status s) { status_ = std::move(s); }
  uint64_t Left() const { return file_size_ - std::min(pos_, file_size_); }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t file_size_;
  const std::string& shown_;
  uint64_t pos_ = 0;
  bool short_ = false;
  Status status_ = Status::Ok();
};

bool KnownValueType(uint32_t type) { return type <= static_cast<uint32_t>(ValueType::kF64); }

// One value of `type` at the cursor into `out` (when `out` is not null).
bool ReadValue(Cursor& c, ValueType type, nlohmann::ordered_json* out) {
  if (type == ValueType::kString) {
    std::string_view s;
    if (!c.ReadString(s, "a string value")) return false;
    if (out) *out = std::string(s);
    return true;
  }
  const uint64_t size = ScalarSize(type);
  if (!c.Need(size, "a value")) return false;
  if (out) *out = ScalarJson(type, c.at(c.pos()));
  return c.Skip(size, "a value");
}

// An array's items after its type and count: listed into `out`, or only walked past
// (strings) or skipped whole (scalars) when longer than kListedArrayItems.
bool ReadArray(Cursor& c, KeyValue& kv) {
  const bool listed = kv.count <= kListedArrayItems;
  if (listed) kv.value = nlohmann::ordered_json::array();
  if (kv.item_type != ValueType::kString && !listed) {
    const uint64_t size = ScalarSize(kv.item_type);
    if (kv.count > c.Left() / size) {
      c.Fail(c.Bad("array \"" + kv.key + "\" of " + std::to_string(kv.count) +
                   " items runs past the end of the file"));
      return false;
    }
    kv.value = {{"type", "ARRAY[" + std::string(ValueTypeName(kv.item_type)) + "]"},
                {"length", kv.count}};
    return c.Skip(kv.count * size, "an array");
  }
  // Each string takes 8 bytes at least: a count the file cannot hold is refused first.
  if (kv.item_type == ValueType::kString && kv.count > c.Left() / 8) {
    c.Fail(c.Bad("array \"" + kv.key + "\" of " + std::to_string(kv.count) +
                 " strings runs past the end of the file"));
    return false;
  }
  for (uint64_t i = 0; i < kv.count; ++i) {
    nlohmann::ordered_json item;
    if (!ReadValue(c, kv.item_type, listed ? &item : nullptr)) return false;
    if (listed) kv.value.push_back(std::move(item));
  }
  if (!listed) {
    kv.value = {{"type", "ARRAY[" + std::string(ValueTypeName(kv.item_type)) + "]"},
                {"length", kv.count}};
  }
  return true;
}

bool ReadKeyValue(Cursor& c, Header& h, std::unordered_set<std::string_view>& keys) {
  KeyValue kv;
  kv.begin = c.pos();
  std::string_view key;
  uint32_t type = 0;
  if (!c.ReadString(key, "a key") || !c.Read(type, "a value type")) return false;
  kv.key = std::string(key);
  if (!keys.insert(key).second) {
    c.Fail(c.Bad("key \"" + kv.key + "\" appears twice"));
    return false;
  }
  if (!KnownValueType(type)) {
    c.Fail(c.Bad("key \"" + kv.key + "\" has unknown value type " + std::to_string(type)));
    return false;
  }
  kv.type = static_cast<ValueType>(type);
  if (kv.type == ValueType::kArray) {
    uint32_t item = 0;
    if (!c.Read(item, "an array type") || !c.Read(kv.count, "an array count")) return false;
    if (!KnownValueType(item) || item == static_cast<uint32_t>(ValueType::kArray)) {
      c.Fail(c.Bad("array \"" + kv.key + "\" has " +
                   (item == 9 ? std::string("arrays as items (ggml reads none)")
                              : "unknown item type " + std::to_string(item))));
      return false;
    }
    kv.item_type = static_cast<ValueType>(item);
    if (!ReadArray(c, kv)) return false;
  } else if (!ReadValue(c, kv.type, &kv.value)) {
    return false;
  }
  kv.end = c.pos();
  h.kv.push_back(std::move(kv));
  return true;
}

// ne[0] * ... * ne[n-1] elements, and their bytes; false when either overflows (ggml
// checks the same: INT64_MAX elements and bytes at most).
bool TensorBytes(const TensorInfo& t, uint64_t& bytes) {
  uint64_t elements = 1;
  for (uint64_t n : t.ne) {
    if (n > INT64_MAX || (n != 0 && elements > INT64_MAX / n)) return false;
    elements *= n;
  }
  const uint64_t blocks = elements / t.type->block_elements;
  if (blocks > INT64_MAX / t.type->block_bytes) return false;
  bytes = blocks * t.type->block_bytes;
  return true;
}

bool ReadTensorInfo(Cursor& c, Header& h) {
  TensorInfo t;
  std::string_view name;
  uint32_t n_dims = 0;
  if (!c.ReadString(name, "a tensor name") || !c.Read(n_dims, "a tensor's dimension count")) {
    return false;
  }
  t.name = std::string(name);
  if (n_dims > kMaxDims) {
    c.Fail(c.Bad("tensor \"" + t.name + "\" has " + std::to_string(n_dims) +
                 " dimensions (ggml has at most " + std::to_string(kMaxDims) + ")"));
    return false;
  }
  t.ne.resize(n_dims);
  for (uint64_t& n : t.ne) {
    if (!c.Read(n, "a tensor dimension")) return false;
  }
  uint32_t code = 0;
  if (!c.Read(code, "a tensor type") || !c.Read(t.offset, "a tensor offset")) return false;
  t.type = GgmlTypeOf(code);
  if (!t.type) {
    c.Fail(c.Bad("tensor \"" + t.name + "\" has unknown ggml type " + std::to_string(code)));
    return false;
  }
  const uint64_t row = t.ne.empty() ? 1 : t.ne[0];
  if (row % t.type->block_elements != 0) {
    c.Fail(c.Bad("tensor \"" + t.name + "\" has rows of " + std::to_string(row) + " " +
                 std::string(t.type->name) + " elements, not whole blocks of " +
                 std::to_string(t.type->block_elements)));
    return false;
  }
  if (!TensorBytes(t, t.bytes)) {
    c.Fail(c.Bad("tensor \"" + t.name + "\" has a shape too large to hold"));
    return false;
  }
  h.tensors.push_back(std::move(t));
  return true;
}

// The alignment general.alignment sets: a u32, a power of two (gguf_init_from_file_impl).
Status ReadAlignment(Header& h, const Cursor& c) {
  const KeyValue* kv = h.Find("general.alignment");
  if (!kv) return Status::Ok();
  if (kv->type != ValueType::kU32) return c.Bad("general.alignment is not a UINT32");
  const uint64_t a = kv->value.get<uint64_t>();
  if (a == 0 || (a & (a - 1)) != 0) {
    return c.Bad("general.alignment " + std::to_string(a) + " is not a power of two");
  }
  h.alignment = a;
  return Status::Ok();
}

// Every tensor's data aligned, inside the file, and overlapping no other's.
Status CheckData(const Header& h, uint64_t file_size, const Cursor& c) {
  const uint64_t data_size = file_size - std::min(file_size, h.data_start);
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(h.tensors.size());
  for (const TensorInfo& t : h.tensors) {
    if (t.offset % h.alignment != 0) {
      return c.Bad("tensor \"" + t.name + "\" data offset " + std::to_string(t.offset) +
                   " is not a multiple of the alignment " + std::to_string(h.alignment));
    }
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return c.Bad("tensor \"" + t.name + "\" data (" + std::to_string(t.bytes) +
                   " bytes at offset " + std::to_string(h.data_start + t.offset) +
                   ") runs past the end of the file (" + std::to_string(file_size) + " bytes)");
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  // Against the furthest end so far, not only the neighbour: an empty tensor between two
  // others would hide their overlap.
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->bytes == 0) continue;
    if (furthest && furthest->offset + furthest->bytes > t->offset) {
      return c.Bad("tensors \"" + furthest->name + "\" and \"" + t->name + "\" overlap");
    }
    if (!furthest || t->offset + t->bytes > furthest->offset + furthest->bytes) furthest = t;
  }
  return Status::Ok();
}

// Magic, version and counts; Ok(false) when the prefix is too short.
Result<bool> ReadPreamble(Cursor& c, Header& h, uint64_t& tensors, uint64_t& kvs,
                          const std::string& shown) {
  uint32_t magic = 0;
  if (!c.Read(magic, "the magic") || !c.Read(h.version, "the version") ||
      !c.Read(tensors, "the tensor count") || !c.Read(kvs, "the key-value count")) {
    if (!c.status().ok()) return c.status();
    return false;
  }
  if (magic == 0x47475546u) {  // "FUGG": big-endian, as gguf_convert_endian writes
    return Status::Unsupported(shown +
                               ": a big-endian GGUF file; ckptfs reads little-endian "
                               "ones (convert it with gguf_convert_endian.py)");
  }
  if (magic != 0x46554747u) return c.Bad("no GGUF magic");
  if ((h.version & 0xffff) == 0 && h.version != 0) {
    return Status::Unsupported(shown +
                               ": a big-endian GGUF file; ckptfs reads little-endian "
                               "ones (convert it with gguf_convert_endian.py)");
  }
  if (h.version != 2 && h.version != 3) {
    return Status::Unsupported(shown + ": GGUF version " + std::to_string(h.version) +
                               " (ckptfs reads versions 2 and 3, as ggml does)");
  }
  // A key-value takes 13 bytes at least, a tensor info 24: counts the file cannot hold
  // are refused before anything is reserved for them.
  if (kvs > c.Left() / 13) return c.Bad("key-value count " + std::to_string(kvs) + " is too large");
  if (tensors > c.Left() / 24) {
    return c.Bad("tensor count " + std::to_string(tensors) + " is too large");
  }
  return true;
}

}  // namespace

const GgmlType* GgmlTypeOf(uint32_t code) {
  for (const GgmlType& t : kTypes) {
    if (t.code == code) return &t;
  }
  return nullptr;
}

std::string_view ValueTypeName(ValueType type) {
  const auto i = static_cast<size_t>(type);
  return i < kValueTypeNames.size() ? kValueTypeNames[i] : "?";
}

const KeyValue* Header::Find(std::string_view key) const {
  for (const KeyValue& k : kv) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::optional<uint64_t> Header::Unsigned(std::string_view key) const {
  const KeyValue* found = Find(key);
  if (!found || found->type == ValueType::kArray || !found->value.is_number_integer())
    return std::nullopt;
  if (found->value.is_number_unsigned()) return found->value.get<uint64_t>();
  const int64_t v = found->value.get<int64_t>();
  return v < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(v));
}

std::optional<std::string> Header::String(std::string_view key) const {
  const KeyValue* found = Find(key);
  if (!found || found->type != ValueType::kString) return std::nullopt;
  return found->value.get<std::string>();
}

Result<std::optional<Header>> ParseHeader(std::span<const uint8_t> bytes, uint64_t file_size,
                                          const std::string& shown) {
  if (bytes.size() > file_size) bytes = bytes.first(file_size);
  Cursor c(bytes, file_size, shown);
  Header h;
  uint64_t tensors = 0, kvs = 0;
  CKPTFS_ASSIGN_OR_RETURN(const bool whole, ReadPreamble(c, h, tensors, kvs, shown));
  if (!whole) return std::optional<Header>();
  const uint64_t kv_start = c.pos();
  std::unordered_set<std::string_view> keys;
  h.kv.reserve(kvs);
  for (uint64_t i = 0; i < kvs; ++i) {
    if (!ReadKeyValue(c, h, keys)) {
      if (!c.status().ok()) return c.status();
      return std::optional<Header>();
    }
  }
  const uint64_t kv_end = c.pos();
  std::unordered_set<std::string_view> names;
  h.tensors.reserve(tensors);
  for (uint64_t i = 0; i < tensors; ++i) {
    if (!ReadTensorInfo(c, h)) {
      if (!c.status().ok()) return c.status();
      return std::optional<Header>();
    }
  }
  for (const TensorInfo& t : h.tensors) {
    if (!names.insert(t.name).second) return c.Bad("tensor \"" + t.name + "\" appears twice");
  }
  CKPTFS_RETURN_IF_ERROR(ReadAlignment(h, c));
  h.data_start = AlignUp(c.pos(), h.alignment);
  if (h.data_start > file_size && !h.tensors.empty()) {
    return c.Bad("the data section starts past the end of the file");
  }
  CKPTFS_RETURN_IF_ERROR(CheckData(h, file_size, c));
  h.kv_bytes.assign(reinterpret_cast<const char*>(c.at(kv_start)), kv_end - kv_start);
  for (KeyValue& kv : h.kv) {
    kv.begin -= kv_start;
    kv.end -= kv_start;
  }
  return std::optional<Header>(std::move(h));
}

Result<Header> ReadHeader(const ByteSource& file, const std::string& shown) {
  const uint64_t size = file.Size();
  std::vector<uint8_t> head;
  for (uint64_t want = std::min<uint64_t>(size, 1 << 20);;) {
    // Only the bytes past those already read: a remote header is fetched once.
    const size_t have = head.size();
    head.resize(want);
    CKPTFS_RETURN_IF_ERROR(file.ReadAt(have, std::span(head).subspan(have)));
    CKPTFS_ASSIGN_OR_RETURN(std::optional<Header> header, ParseHeader(head, size, shown));
    if (header) return std::move(*header);
    if (want >= size) return Status::Corruption(shown + ": not a valid GGUF file: truncated");
    if (want >= kMaxHeaderBytes) {
      return Status::Unsupported(shown + ": a GGUF header larger than " +
                                 std::to_string(kMaxHeaderBytes >> 20) + " MiB");
    }
    want = std::min({size, want * 4, kMaxHeaderBytes});
  }
}

std::vector<uint64_t> NumpyShape(const TensorInfo& t) { return {t.ne.rbegin(), t.ne.rend()}; }

namespace {

template <typename T>
void Put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

}  // namespace

std::string BuildHeader(std::span<const KeyValue> kv, std::string_view kv_bytes,
                        std::span<const TensorInfo> tensors, uint64_t alignment,
                        std::vector<uint64_t>& offsets) {
  std::string out = "GGUF";
  Put<uint32_t>(out, 3);
  Put<uint64_t>(out, tensors.size());
  Put<uint64_t>(out, kv.size());
  for (const KeyValue& k : kv) out.append(kv_bytes.substr(k.begin, k.end - k.begin));
  offsets.clear();
  offsets.reserve(tensors.size());
  uint64_t offset = 0;
  for (const TensorInfo& t : tensors) {
    Put<uint64_t>(out, t.name.size());
    out += t.name;
    Put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) Put<uint64_t>(out, n);
    Put<uint32_t>(out, t.type->code);
    Put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset += AlignUp(t.bytes, alignment);
  }
  out.resize(AlignUp(out.size(), alignment), '\0');
  return out;
}

}  // namespace ckptfs::gguf
