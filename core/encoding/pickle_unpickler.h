// pickle_unpickler: the machine behind Unpickle (core/encoding/pickle.h), shared by its two
// files. Internal: pickle.h is the contract (what is refused, the limits, the messages);
// nothing outside core/encoding/pickle*.cc includes this.
//
// Three parts:
//   - here, inline: the byte reader, the stack with its MARK fences, the memory budget
//     every allocation is charged to first, and pushing a new value. Every opcode uses
//     them, so they stay inline in both files, as when the unpickler was one file;
//   - pickle.cc: the value builders (number and string decoding, globals and the denylist,
//     calls, containers and their keys, the memo);
//   - pickle_ops.cc: Run's loop, and Step, which hands each opcode to its family, a member
//     that reads the opcode's argument and drives the builders.
//
// Thread safety: an Unpickler is used by one thread, once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/encoding/metadata_budget.h"
#include "core/encoding/pickle.h"

namespace ckptfs::pickle_internal {

// clang-format off
enum Op : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kFloat = 'F', kInt = 'I',
  kBinInt = 'J', kBinInt1 = 'K', kLong = 'L', kBinInt2 = 'M', kNone = 'N', kPersId = 'P',
  kBinPersId = 'Q', kReduce = 'R', kString = 'S', kBinString = 'T', kShortBinString = 'U',
  kUnicode = 'V', kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobal = 'c', kDict = 'd',
  kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h', kInst = 'i', kLongBinGet = 'j',
  kList = 'l', kEmptyList = ']', kObj = 'o', kPut = 'p', kBinPut = 'q', kLongBinPut = 'r',
  kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G',
  kProto = 0x80, kNewObj = 0x81, kExt1 = 0x82, kExt2 = 0x83, kExt4 = 0x84, kTuple1 = 0x85,
  kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a,
  kLong4 = 0x8b, kBinBytes = 'B', kShortBinBytes = 'C', kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e, kEmptySet = 0x8f, kAddItems = 0x90,
  kFrozenSet = 0x91, kNewObjEx = 0x92, kStackGlobal = 0x93, kMemoize = 0x94, kFrame = 0x95,
  kByteArray8 = 0x96, kNextBuffer = 0x97, kReadonlyBuffer = 0x98,
};
// clang-format on

// "None", "dict", ...: the kind as an error message names it.
std::string_view KindName(PickleKind kind);

// Orders the values that compare by value as dict and set keys (kind, then number, then
// text), so equal keys meet; see pickle.cc's ByValue for which those are.
struct KeyLess {
  const std::vector<PickleValue>* values;
  bool operator()(uint32_t a, uint32_t b) const;
};

class Unpickler {
 public:
  Unpickler(std::string_view data, const std::string& file, std::string_view record)
      : data_(data),
        prefix_(record.empty() ? file + ": " : file + ": " + std::string(record) + ": "),
        budget_(data.size()),
        keys_(KeyLess{&values_}) {}

  // Runs the opcodes to the STOP (pickle_ops.cc): Unpickle's result (pickle.h).
  Result<PickleTree> Run();

 private:
  static constexpr uint32_t kNoValue = UINT32_MAX;
  static constexpr size_t kStepValues = 3;

  // The opcodes (pickle_ops.cc). Step runs one opcode other than STOP (which is Run's),
  // handing it to its family; a family handed an opcode not its own refuses it as RefuseOp.
  // Inline, defined and called in pickle_ops.cc only (inlined into Run: see there).
  inline Status Step(uint8_t op);
  inline Status ProtocolOp(uint8_t op);   // PROTO, FRAME
  inline Status StackOp(uint8_t op);      // MARK, POP, POP_MARK, DUP
  inline Status MemoOp(uint8_t op);       // PUT, GET and their binary forms, MEMOIZE
  inline Status NumberOp(uint8_t op);     // NONE, the bool, int and float forms
  inline Status StringOp(uint8_t op);     // STRING, UNICODE, and the counted str / bytes opcodes
  inline Status ContainerOp(uint8_t op);  // tuple, list, dict, set builders, APPEND(S), SETITEM(S)
  inline Status CallOp(uint8_t op);       // GLOBAL, STACK_GLOBAL, REDUCE, NEWOBJ(_EX), INST, OBJ,
                                          // BUILD, BINPERSID
  Status RefuseOp(uint8_t op);            // anything else: Unsupported, naming the opcode

  Status Fail(Status (*make)(std::string), std::string_view what) const {
    return make(prefix_ + std::string(what) + " (byte " + std::to_string(op_pos_) + ")");
  }
  Status Error(std::string_view what) const { return Fail(&Status::Corruption, what); }
  Status Refuse(std::string_view what) const { return Fail(&Status::Unsupported, what); }

  // Charges `bytes` to the budget (metadata_budget.h), before they are allocated.
  Status Charge(uint64_t bytes) {
    if (budget_.Charge(bytes)) return Status::Ok();
    return Refuse("unpickling " + budget_.Exceeded());
  }
  // A step adds at most three values (INST: global, args, call), three stack slots and
  // one memo entry: room for them is
  // made here, charged first, so no vector grows uncounted inside a step. Growth is
  // geometric (half the capacity), as push_back's would be; the new buffer is charged
  // while the old one is still held, which is then given back.
  template <typename T>
  Status Grow(std::vector<T>& v, uint64_t extra_per_item = 0) {
    if (v.size() + kStepValues <= v.capacity()) return Status::Ok();
    const uint64_t item = sizeof(T) + extra_per_item;
    const size_t old = v.capacity(), grown = old + std::max<size_t>(old / 2, 256);
    CKPTFS_RETURN_IF_ERROR(Charge(grown * item));
    v.reserve(grown);
    budget_.Release(old * item);
    return Status::Ok();
  }
  Status RoomForOneMore() {
    // canonical_ (KeyOf) grows with values_, up to twice over: charged with it.
    CKPTFS_RETURN_IF_ERROR(Grow(values_, 2 * sizeof(uint32_t)));
    CKPTFS_RETURN_IF_ERROR(Grow(stack_));
    return Grow(memo_);
  }

  // Every length comes from the file: compared with what is left, never added to pos_ first.
  Result<std::string_view> Take(uint64_t n) {
    if (!RangeWithin(pos_, n, data_.size())) {
      return Error("truncated: needs " + std::to_string(n) + " bytes, " +
                   std::to_string(data_.size() - pos_) + " left");
    }
    std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  Result<uint64_t> Le(size_t n) {
    CKPTFS_ASSIGN_OR_RETURN(std::string_view b, Take(n));
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
    return v;
  }
  Result<std::string_view> Line() {
    const size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos) return Error("truncated: line without a newline");
    std::string_view out = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }

  // No opcode adds more values than it and its MARK take bytes, so values_ never outgrows
  // the input.
  PickleValue& PushNew(PickleKind kind) {
    stack_.push_back(static_cast<uint32_t>(values_.size()));
    PickleValue& v = values_.emplace_back();
    v.kind = kind;
    return v;
  }
  Status Push(PickleKind kind) {
    PushNew(kind);
    return Status::Ok();
  }
  Status PushInt(int64_t v, PickleKind kind = PickleKind::kInt) {
    PushNew(kind).int_value = v;
    return Status::Ok();
  }
  Status PushFloat(double v) {
    PushNew(PickleKind::kFloat).float_value = v;
    return Status::Ok();
  }
  Status PushText(PickleKind kind, std::string text) {
    if (text.capacity() > std::string().capacity()) CKPTFS_RETURN_IF_ERROR(Charge(text.capacity()));
    PushNew(kind).text = std::move(text);
    return Status::Ok();
  }
  Status PushItems(PickleKind kind, std::vector<uint32_t> items) {
    CKPTFS_RETURN_IF_ERROR(Charge(items.capacity() * sizeof(uint32_t)));
    PushNew(kind).items = std::move(items);
    return Status::Ok();
  }

  // A MARK fences the stack: nothing under it may be popped until the mark is consumed.
  size_t Fence() const { return marks_.empty() ? 0 : marks_.back(); }
  Result<uint32_t> Top() {
    if (stack_.size() <= Fence()) return Error("stack underflow");
    return stack_.back();
  }
  Result<uint32_t> Pop() {
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t top, Top());
    stack_.pop_back();
    return top;
  }
  Result<std::vector<uint32_t>> PopMark() {
    if (marks_.empty()) return Error("MARK missing");
    std::vector<uint32_t> items(stack_.begin() + static_cast<ptrdiff_t>(marks_.back()),
                                stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  // The value builders (pickle.cc), each explained where it is defined.
  Result<int64_t> ParseInt(std::string_view s);
  Status PushLong(std::string_view b);
  Status PushString(PickleKind kind, uint64_t length);
  Status PushQuoted(std::string_view line);
  Status PushRawUnicode(std::string_view s);
  Status PushGlobal(std::string_view module, std::string_view name);
  Status PushCall(std::string_view op, uint32_t callable, uint32_t args);
  uint32_t KeyOf(uint32_t v);
  void Insert(uint32_t container, uint32_t key, uint32_t value);
  Status Fill(uint32_t container, std::span<const uint32_t> items);
  Status AddTo(PickleKind want, std::string_view op, std::span<const uint32_t> items);
  Status PushContainer(PickleKind kind, std::span<const uint32_t> items);
  Status Memo(uint64_t index);
  Status Get(uint64_t index);

  std::string_view data_;
  const std::string prefix_;  // "FILE: data.pkl: " (or "FILE: " for a bare pickle file)
  MetadataBudget budget_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::vector<PickleValue> values_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;  // stack heights at each open MARK
  std::vector<uint32_t> memo_;
  std::map<uint64_t, uint32_t> sparse_memo_;
  std::vector<uint32_t> canonical_;  // KeyOf cache, by value index
  std::set<uint32_t, KeyLess> keys_;
  std::unordered_map<uint64_t, uint32_t> slots_;  // (container, KeyOf(key)) -> items index
  uint32_t protocol_ = 0;                         // as python's Unpickler: 0 until a PROTO opcode
  PickleNames names_;
  std::set<std::pair<std::string, std::string>> named_;  // names_.globals, for lookup
};

}  // namespace ckptfs::pickle_internal
