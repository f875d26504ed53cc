// Writing torch.save pickles (torch_file.h): a merged checkpoint's data.pkl, whole or one
// entry at a time, torch.save(tensor)'s and torch.save(list of str)'s.
#include <charconv>
#include <memory>
#include <string>
#include <string_view>

#include "core/encoding/torch_file.h"

namespace ckptfs {
namespace {

// Pickle opcodes as torch.save writes them (protocol 2), into a string or only counted.
class PickleWriter {
 public:
  // `count_only`: keep the size, not the bytes (a mount needs data.pkl's size, not it).
  explicit PickleWriter(bool count_only = false) : count_only_(count_only) {}

  void Op(char op) {
    if (count_only_) {
      ++size_;
    } else {
      out_.push_back(op);
    }
  }
  void Raw(std::string_view bytes) {
    if (count_only_) {
      size_ += bytes.size();
    } else {
      out_ += bytes;
    }
  }
  void Le(uint64_t v, int bytes) {
    if (count_only_) {
      size_ += static_cast<uint64_t>(bytes);
      return;
    }
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  void Int(uint64_t v) {
    if (v < 0x100) {
      Op('K');
      Le(v, 1);
    } else if (v < 0x10000) {
      Op('M');
      Le(v, 2);
    } else if (v < 0x80000000) {
      Op('J');
      Le(v, 4);
    } else {
      // LONG1: little-endian two's complement, with a zero byte if the top bit is set.
      int n = 0;
      for (uint64_t x = v; x; x >>= 8) ++n;
      const bool pad = (v >> (8 * n - 1)) & 1;
      Op('\x8a');
      Le(n + pad, 1);
      Le(v, n);
      if (pad) Le(0, 1);
    }
  }
  void Unicode(std::string_view s) {
    Op('X');
    Le(s.size(), 4);
    Raw(s);
  }
  void Global(std::string_view module, std::string_view name) {
    Op('c');
    Raw(module);
    Op('\n');
    Raw(name);
    Op('\n');
  }
  // Memo slots: each shared value is written once, then fetched.
  void Put(uint32_t slot) {
    Op('r');  // LONG_BINPUT
    Le(slot, 4);
  }
  void Get(uint32_t slot) {
    Op('j');  // LONG_BINGET
    Le(slot, 4);
  }
  void Tuple(std::span<const uint64_t> values) {
    static constexpr char kSmall[] = {')', '\x85', '\x86', '\x87'};  // EMPTY_TUPLE, TUPLE1..3
    if (values.size() > 3) Op('(');
    for (uint64_t v : values) Int(v);
    Op(values.size() <= 3 ? kSmall[values.size()] : 't');
  }
  std::string Take() { return std::move(out_); }
  uint64_t size() const { return count_only_ ? size_ : out_.size(); }

 private:
  bool count_only_;
  uint64_t size_ = 0;
  std::string out_;
};

// A storage record's key, as the string torch names its zip record by.
void WriteStorageKey(PickleWriter& w, uint64_t key) {
  char text[24];
  const auto end = std::to_chars(text, text + sizeof(text), key).ptr;
  w.Unicode(std::string_view(text, static_cast<size_t>(end - text)));
}

// From the persistent id's element count to requires_grad: the part of
// _rebuild_tensor_v2's arguments that says which view of the storage the tensor is.
void WriteViewArgs(PickleWriter& w, const TorchPickleEntry& e) {
  w.Int(e.storage_numel);
  w.Op('t');  // TUPLE: the persistent id
  w.Op('Q');  // BINPERSID
  w.Int(e.storage_offset);
  w.Tuple(e.shape);
  w.Tuple(e.stride);
  w.Op('\x89');  // NEWFALSE: requires_grad
}

}  // namespace

class TorchPickleBuilder::Writer : public PickleWriter {
  using PickleWriter::PickleWriter;
};

TorchPickleBuilder::TorchPickleBuilder(bool count_only)
    : writer_(std::make_unique<Writer>(count_only)) {
  PickleWriter& w = *writer_;
  w.Op('\x80');  // PROTO 2
  w.Le(2, 1);
  w.Global("collections", "OrderedDict");
  w.Put(kOrderedDict);
  w.Op(')');  // EMPTY_TUPLE
  w.Op('R');  // REDUCE
}

TorchPickleBuilder::~TorchPickleBuilder() = default;

void TorchPickleBuilder::Add(const TorchPickleEntry& e) {
  PickleWriter& w = *writer_;
  const uint64_t i = count_++;
  if (i % 1000 == 0) w.Op('(');  // MARK: SETITEMS in batches, as pickle does
  w.Unicode(e.name);
  if (i == 0) {
    w.Global("torch._utils", "_rebuild_tensor_v2");
    w.Put(kRebuild);
  } else {
    w.Get(kRebuild);
  }
  w.Op('(');  // args
  w.Op('(');  // the persistent id ('storage', class, key, 'cpu', numel)
  if (i == 0) {
    w.Unicode("storage");
    w.Put(kStorage);
  } else {
    w.Get(kStorage);
  }
  const std::string_view cls = *TorchStorageClass(e.dtype);
  auto [slot, added] =
      class_slots_.emplace(cls, kFirstClass + static_cast<uint32_t>(class_slots_.size()));
  if (added) {
    w.Global("torch", cls);
    w.Put(slot->second);
  } else {
    w.Get(slot->second);
  }
  WriteStorageKey(w, e.key);
  if (i == 0) {
    w.Unicode("cpu");
    w.Put(kCpu);
  } else {
    w.Get(kCpu);
  }
  WriteViewArgs(w, e);
  w.Get(kOrderedDict);
  w.Op(')');
  w.Op('R');  // backward hooks: OrderedDict()
  w.Op('t');
  w.Op('R');
  if (i % 1000 == 999) w.Op('u');  // SETITEMS
}

uint64_t TorchPickleBuilder::Finish() {
  if (count_ % 1000 != 0) writer_->Op('u');  // SETITEMS of the last, partial batch
  writer_->Op('.');                          // STOP
  return writer_->size();
}

std::string TorchPickleBuilder::Take() { return writer_->Take(); }

namespace {

// torch.save(tensor)'s pickle: _rebuild_tensor_v2 called on storage record `key`, as the
// root; the writer may only count.
void WriteTensorPickle(PickleWriter& w, const TorchPickleEntry& e) {
  w.Op('\x80');  // PROTO 2
  w.Le(2, 1);
  w.Global("torch._utils", "_rebuild_tensor_v2");
  w.Op('(');  // args
  w.Op('(');  // the persistent id ('storage', class, key, 'cpu', numel)
  w.Unicode("storage");
  w.Global("torch", *TorchStorageClass(e.dtype));
  WriteStorageKey(w, e.key);
  w.Unicode("cpu");
  WriteViewArgs(w, e);
  w.Global("collections", "OrderedDict");
  w.Op(')');
  w.Op('R');  // backward hooks: OrderedDict()
  w.Op('t');
  w.Op('R');
  w.Op('.');  // STOP
}

}  // namespace

std::string BuildTorchTensorPickle(const TorchPickleEntry& entry) {
  PickleWriter w;
  WriteTensorPickle(w, entry);
  return w.Take();
}

uint64_t TorchTensorPickleSize(const TorchPickleEntry& entry) {
  PickleWriter w(/*count_only=*/true);
  WriteTensorPickle(w, entry);
  return w.size();
}

std::string BuildTorchStringListPickle(std::span<const std::string_view> items) {
  PickleWriter w;
  w.Op('\x80');  // PROTO 2
  w.Le(2, 1);
  w.Op(']');  // EMPTY_LIST
  // APPENDS in batches of 1000, as pickle does.
  for (size_t i = 0; i < items.size(); ++i) {
    if (i % 1000 == 0) w.Op('(');
    w.Unicode(items[i]);
    if (i % 1000 == 999 || i + 1 == items.size()) w.Op('e');
  }
  w.Op('.');
  return w.Take();
}

std::string BuildTorchPickle(std::span<const TorchPickleEntry> entries) {
  TorchPickleBuilder builder;
  for (const TorchPickleEntry& e : entries) builder.Add(e);
  builder.Finish();
  return builder.Take();
}

}  // namespace ckptfs
