// Fuzz target: any bytes as the start of a GGUF file (the whole file, or the prefix of a
// larger one) must parse (a header, or nullopt: read more) or be refused, never crash. An
// accepted header must keep gguf_file.h's promises: a power-of-two alignment, data_start
// aligned, every tensor's data aligned, inside the file and disjoint from every other's,
// names and keys unique, each key-value record inside kv_bytes, end to end. BuildHeader of
// an accepted header must parse again, to the same tensors at the offsets it gave.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/format/gguf/gguf_file.h"

namespace {

using ckptfs::gguf::Header;
using ckptfs::gguf::KeyValue;
using ckptfs::gguf::TensorInfo;

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckHeader(const Header& h, uint64_t file_size) {
  Check(h.version == 2 || h.version == 3);
  Check(h.alignment != 0 && (h.alignment & (h.alignment - 1)) == 0);
  Check(h.data_start % h.alignment == 0 && h.data_start >= 24);
  uint64_t at = 0;
  std::set<std::string> keys;
  for (const KeyValue& kv : h.kv) {
    Check(kv.begin == at && kv.begin <= kv.end && kv.end <= h.kv_bytes.size());
    Check(keys.insert(kv.key).second);
    at = kv.end;
  }
  Check(at == h.kv_bytes.size());
  if (h.tensors.empty()) return;
  Check(h.data_start <= file_size);
  const uint64_t data_size = file_size - h.data_start;
  std::set<std::string> names;
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : h.tensors) {
    Check(names.insert(t.name).second);
    Check(t.type != nullptr && t.ne.size() <= ckptfs::gguf::kMaxDims);
    Check(t.offset % h.alignment == 0);
    Check(t.offset <= data_size && t.bytes <= data_size - t.offset);
    // bytes = elements / block_elements * block_bytes, whole blocks per row; bytes fits in
    // the file, so no product wraps unless a dimension is 0 (then there are none).
    const uint64_t row = t.ne.empty() ? 1 : t.ne[0];
    Check(row % t.type->block_elements == 0);
    uint64_t elements = 1;
    bool wrapped = false;
    for (uint64_t n : t.ne) wrapped |= __builtin_mul_overflow(elements, n, &elements);
    if (std::find(t.ne.begin(), t.ne.end(), 0) != t.ne.end()) {
      elements = 0;
      wrapped = false;
    }
    uint64_t bytes = 0;
    wrapped |= __builtin_mul_overflow(elements / t.type->block_elements,
                                      uint64_t{t.type->block_bytes}, &bytes);
    Check(!wrapped && bytes == t.bytes);
    if (t.bytes != 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  // Disjoint: each one ends before the next begins (zero-byte tensors left out).
  for (size_t i = 1; i < by_offset.size(); ++i) {
    Check(by_offset[i - 1]->offset + by_offset[i - 1]->bytes <= by_offset[i]->offset);
  }
}

// BuildHeader of `h` parses again (the header whole, its data taken to be there): the same
// key-value records and tensors, at the offsets BuildHeader gave.
void CheckRebuilt(const Header& h) {
  std::vector<uint64_t> offsets;
  const std::string built =
      ckptfs::gguf::BuildHeader(h.kv, h.kv_bytes, h.tensors, h.alignment, offsets);
  Check(offsets.size() == h.tensors.size());
  uint64_t data_size = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    data_size = std::max(data_size, offsets[i] + h.tensors[i].bytes);
  }
  auto again = ckptfs::gguf::ParseHeader(
      std::span(reinterpret_cast<const uint8_t*>(built.data()), built.size()),
      built.size() + data_size, "rebuilt.gguf");
  Check(again.ok() && again->has_value());
  const Header& r = **again;
  Check(r.version == 3 && r.data_start == built.size() && r.kv_bytes == h.kv_bytes);
  Check(r.kv.size() == h.kv.size() && r.tensors.size() == h.tensors.size());
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    Check(r.tensors[i].name == h.tensors[i].name && r.tensors[i].ne == h.tensors[i].ne);
    Check(r.tensors[i].type == h.tensors[i].type && r.tensors[i].bytes == h.tensors[i].bytes);
    Check(r.tensors[i].offset == offsets[i]);
  }
  CheckHeader(r, built.size() + data_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  // The whole file: a header or a refusal, never "read more".
  auto whole = ckptfs::gguf::ParseHeader(bytes, size, "fuzz.gguf");
  if (whole.ok()) {
    Check(whole->has_value());
    CheckHeader(**whole, size);
    CheckRebuilt(**whole);
  }
  // The start of a larger file.
  const uint64_t file_size = size + 4096;
  auto prefix = ckptfs::gguf::ParseHeader(bytes, file_size, "fuzz.gguf");
  if (prefix.ok() && prefix->has_value()) {
    CheckHeader(**prefix, file_size);
    CheckRebuilt(**prefix);
  }
  return 0;
}
