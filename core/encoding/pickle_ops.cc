// The opcodes of the unpickler (pickle_unpickler.h): Run's loop, Step's dispatch and
// one member per family of opcodes, each reading its opcode's argument and driving the
// machine (pickle.cc).
#include <array>
#include <bit>
#include <charconv>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/encoding/pickle_unpickler.h"

namespace ckptfs::pickle_internal {

// Step and the families are inlined into Run, as Step was when the unpickler was one file
// (its members then had internal linkage, and GCC inlined what was called once). Left to
// itself GCC calls each family out of line: 6% more instructions unpickling a torch pickle.
#define CKPTFS_PICKLE_OP __attribute__((always_inline)) inline

namespace {

// Names for the opcodes that exist but are refused, so the error says what the file wanted.
std::string_view RefusedName(uint8_t op) {
  static constexpr std::pair<uint8_t, std::string_view> kNames[] = {
      {kPersId, "PERSID"},
      {kExt1, "EXT1"},
      {kExt2, "EXT2"},
      {kExt4, "EXT4"},
      {kNextBuffer, "NEXT_BUFFER"},
      {kReadonlyBuffer, "READONLY_BUFFER"}};
  for (auto [code, name] : kNames) {
    if (code == op) return name;
  }
  return "unknown";
}

}  // namespace

Result<PickleTree> Unpickler::Run() {
  if (data_.size() >= UINT32_MAX / 2) return Refuse("record too large to index");
  while (pos_ < data_.size()) {
    op_pos_ = pos_;
    const auto op = static_cast<uint8_t>(data_[pos_++]);
    names_.opcodes.set(op);
    if (op != kStop) {
      CKPTFS_RETURN_IF_ERROR(RoomForOneMore());
      CKPTFS_RETURN_IF_ERROR(Step(op));
      if (values_.size() > kMaxPickleValues) return Error("more than 4M values");
      continue;
    }
    if (!marks_.empty()) return Error("STOP inside an unclosed MARK");
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t root, Top());
    op_pos_ = pos_;
    if (pos_ != data_.size()) return Error("trailing bytes after STOP");
    return PickleTree{std::move(values_), root, std::move(names_)};
  }
  op_pos_ = pos_;
  return Error("truncated: no STOP");
}

// The opcode table: one line per family, so a reader sees the whole instruction set here
// and its meaning in the family's member below.
CKPTFS_PICKLE_OP Status Unpickler::Step(uint8_t op) {
  switch (op) {
    case kProto:
    case kFrame:
      return ProtocolOp(op);
    case kMark:
    case kPop:
    case kPopMark:
    case kDup:
      return StackOp(op);
    case kPut:
    case kBinPut:
    case kLongBinPut:
    case kMemoize:
    case kGet:
    case kBinGet:
    case kLongBinGet:
      return MemoOp(op);
    case kNone:
    case kNewTrue:
    case kNewFalse:
    case kInt:
    case kLong:
    case kBinInt:
    case kBinInt1:
    case kBinInt2:
    case kLong1:
    case kLong4:
    case kFloat:
    case kBinFloat:
      return NumberOp(op);
    case kString:
    case kUnicode:
    case kBinString:
    case kShortBinString:
    case kShortBinBytes:
    case kBinBytes:
    case kBinBytes8:
    case kByteArray8:
    case kShortBinUnicode:
    case kBinUnicode:
    case kBinUnicode8:
      return StringOp(op);
    case kEmptyTuple:
    case kTuple1:
    case kTuple2:
    case kTuple3:
    case kTuple:
    case kList:
    case kDict:
    case kFrozenSet:
    case kEmptyList:
    case kEmptyDict:
    case kEmptySet:
    case kAppend:
    case kSetItem:
    case kAppends:
    case kSetItems:
    case kAddItems:
      return ContainerOp(op);
    case kGlobal:
    case kStackGlobal:
    case kReduce:
    case kNewObj:
    case kNewObjEx:
    case kInst:
    case kObj:
    case kBuild:
    case kBinPersId:
      return CallOp(op);
    default:
      return RefuseOp(op);
  }
}

// The stream's own bookkeeping: which protocol find_class resolves globals at, and frames,
// which only need to fit.
CKPTFS_PICKLE_OP Status Unpickler::ProtocolOp(uint8_t op) {
  switch (op) {
    case kProto: {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t version, Le(1));
      if (version > 5) return Refuse("pickle protocol " + std::to_string(version));
      protocol_ = static_cast<uint32_t>(version);  // find_class reads the latest PROTO
      return Status::Ok();
    }
    case kFrame: {  // protocol 4 framing is a read-ahead hint; the frame must still fit
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t length, Le(8));
      if (!RangeWithin(pos_, length, data_.size())) return Error("frame runs past the end");
      return Status::Ok();
    }
    default:
      return RefuseOp(op);
  }
}

// The stack itself: MARKs (bounded by kMaxPickleDepth) and moving values, making none.
CKPTFS_PICKLE_OP Status Unpickler::StackOp(uint8_t op) {
  switch (op) {
    case kMark:
      if (marks_.size() >= kMaxPickleDepth) return Error("MARKs nested too deep");
      marks_.push_back(stack_.size());
      return Status::Ok();
    case kPop:  // python lets POP with nothing above the mark drop the mark itself
      if (stack_.size() > Fence()) {
        stack_.pop_back();
      } else if (!marks_.empty()) {
        marks_.pop_back();
      } else {
        return Error("stack underflow");
      }
      return Status::Ok();
    case kPopMark:
      return PopMark().status();
    case kDup: {
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t top, Top());
      stack_.push_back(top);
      return Status::Ok();
    }
    default:
      return RefuseOp(op);
  }
}

// The memo's opcodes, text (protocol 0) and binary: its index read, then Memo or Get.
CKPTFS_PICKLE_OP Status Unpickler::MemoOp(uint8_t op) {
  switch (op) {
    case kPut:
    case kGet: {
      CKPTFS_ASSIGN_OR_RETURN(std::string_view line, Line());
      uint64_t index = 0;
      auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), index);
      if (ec != std::errc() || end != line.data() + line.size()) return Error("bad memo index");
      return op == kPut ? Memo(index) : Get(index);
    }
    case kBinPut:
    case kLongBinPut: {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t index, Le(op == kBinPut ? 1 : 4));
      return Memo(index);
    }
    case kMemoize:
      return Memo(memo_.size() + sparse_memo_.size());
    case kBinGet:
    case kLongBinGet: {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t index, Le(op == kBinGet ? 1 : 4));
      return Get(index);
    }
    default:
      return RefuseOp(op);
  }
}

// None, booleans, ints and floats, in every spelling the protocols have had; ints beyond
// 64 bits are refused by ParseInt and PushLong.
CKPTFS_PICKLE_OP Status Unpickler::NumberOp(uint8_t op) {
  switch (op) {
    case kNone:
      return Push(PickleKind::kNone);
    case kNewTrue:
    case kNewFalse:
      return PushInt(op == kNewTrue, PickleKind::kBool);
    case kInt: {  // protocol 0 spells booleans as "01" and "00"
      CKPTFS_ASSIGN_OR_RETURN(std::string_view line, Line());
      if (line == "00" || line == "01") {
        return PushInt(line == "01", PickleKind::kBool);
      }
      CKPTFS_ASSIGN_OR_RETURN(const int64_t v, ParseInt(line));
      return PushInt(v);
    }
    case kLong: {
      CKPTFS_ASSIGN_OR_RETURN(std::string_view line, Line());
      if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
      CKPTFS_ASSIGN_OR_RETURN(const int64_t v, ParseInt(line));
      return PushInt(v);
    }
    case kBinInt: {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t v, Le(4));
      return PushInt(static_cast<int32_t>(static_cast<uint32_t>(v)));
    }
    case kBinInt1:
    case kBinInt2: {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t v, Le(op == kBinInt1 ? 1 : 2));
      return PushInt(static_cast<int64_t>(v));
    }
    case kLong1:
    case kLong4: {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t n, Le(op == kLong1 ? 1 : 4));
      if (op == kLong4 && n >= 0x80000000u) return Error("LONG4 has a negative length");
      CKPTFS_ASSIGN_OR_RETURN(std::string_view bytes, Take(n));
      return PushLong(bytes);
    }
    case kFloat: {
      CKPTFS_ASSIGN_OR_RETURN(std::string_view line, Line());
      double v = 0;
      auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
      if (ec != std::errc() || end != line.data() + line.size()) return Error("malformed FLOAT");
      return PushFloat(v);
    }
    case kBinFloat: {  // the one big-endian field in pickle
      CKPTFS_ASSIGN_OR_RETURN(std::string_view b, Take(8));
      uint64_t bits = 0;
      for (char c : b) bits = (bits << 8) | static_cast<uint8_t>(c);
      return PushFloat(std::bit_cast<double>(bits));
    }
    default:
      return RefuseOp(op);
  }
}

// str and bytes: the quoted and escaped text of protocol 0, and the counted forms, copied
// out of the input (a bytes value remembers where it lay: PushString).
CKPTFS_PICKLE_OP Status Unpickler::StringOp(uint8_t op) {
  switch (op) {
    case kString: {
      CKPTFS_ASSIGN_OR_RETURN(std::string_view line, Line());
      return PushQuoted(line);
    }
    case kUnicode: {
      CKPTFS_ASSIGN_OR_RETURN(std::string_view line, Line());
      return PushRawUnicode(line);
    }
    case kBinString: {
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t n, Le(4));
      if (n >= 0x80000000u) return Error("BINSTRING has a negative length");
      return PushString(PickleKind::kBytes, n);
    }
    case kShortBinString:
    case kShortBinBytes:
    case kBinBytes:
    case kBinBytes8:
    case kByteArray8: {
      const size_t width = op == kBinBytes ? 4 : (op == kBinBytes8 || op == kByteArray8) ? 8 : 1;
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t n, Le(width));
      return PushString(PickleKind::kBytes, n);
    }
    case kShortBinUnicode:
    case kBinUnicode:
    case kBinUnicode8: {
      const size_t width = op == kShortBinUnicode ? 1 : op == kBinUnicode ? 4 : 8;
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t n, Le(width));
      return PushString(PickleKind::kString, n);
    }
    default:
      return RefuseOp(op);
  }
}

// Tuples, lists, dicts and sets, made whole (from a MARK or the top items) or filled
// afterwards (APPEND(S), SETITEM(S), ADDITEMS, onto a container or an object's contents).
CKPTFS_PICKLE_OP Status Unpickler::ContainerOp(uint8_t op) {
  switch (op) {
    case kEmptyTuple:
      return Push(PickleKind::kTuple);
    case kTuple1:
    case kTuple2:
    case kTuple3: {
      std::array<uint32_t, 3> items{};
      const size_t n = op - kTuple1 + 1u;
      for (size_t i = n; i-- > 0;) {
        CKPTFS_ASSIGN_OR_RETURN(items[i], Pop());
      }
      return PushContainer(PickleKind::kTuple, std::span(items).first(n));
    }
    case kTuple:
    case kList:
    case kDict:
    case kFrozenSet: {
      CKPTFS_ASSIGN_OR_RETURN(const std::vector<uint32_t> items, PopMark());
      const PickleKind kind = op == kTuple  ? PickleKind::kTuple
                              : op == kList ? PickleKind::kList
                              : op == kDict ? PickleKind::kDict
                                            : PickleKind::kSet;
      return PushContainer(kind, items);
    }
    case kEmptyList:
      return Push(PickleKind::kList);
    case kEmptyDict:
      return Push(PickleKind::kDict);
    case kEmptySet:
      return Push(PickleKind::kSet);
    case kAppend: {
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t item, Pop());
      return AddTo(PickleKind::kList, "APPEND", std::span(&item, 1));
    }
    case kSetItem: {
      std::array<uint32_t, 2> pair{};
      CKPTFS_ASSIGN_OR_RETURN(pair[1], Pop());
      CKPTFS_ASSIGN_OR_RETURN(pair[0], Pop());
      return AddTo(PickleKind::kDict, "SETITEM", pair);
    }
    case kAppends:
    case kSetItems:
    case kAddItems: {
      CKPTFS_ASSIGN_OR_RETURN(const std::vector<uint32_t> items, PopMark());
      if (op == kAppends) return AddTo(PickleKind::kList, "APPENDS", items);
      if (op == kSetItems) return AddTo(PickleKind::kDict, "SETITEMS", items);
      return AddTo(PickleKind::kSet, "ADDITEMS", items);
    }
    default:
      return RefuseOp(op);
  }
}

// Globals and what is done with them: named (the denylist, in PushGlobal), called (inert
// kCall nodes, in PushCall), given state, and persistent ids. Nothing here runs.
CKPTFS_PICKLE_OP Status Unpickler::CallOp(uint8_t op) {
  switch (op) {
    case kGlobal: {
      CKPTFS_ASSIGN_OR_RETURN(std::string_view module, Line());
      CKPTFS_ASSIGN_OR_RETURN(std::string_view name, Line());
      return PushGlobal(module, name);
    }
    case kStackGlobal: {
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t name, Pop());
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t module, Pop());
      if (values_[module].kind != PickleKind::kString ||
          values_[name].kind != PickleKind::kString) {
        return Error("STACK_GLOBAL needs two str values");
      }
      return PushGlobal(values_[module].text, values_[name].text);
    }
    case kReduce:
    case kNewObj: {
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t args, Pop());
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t callable, Pop());
      return PushCall(op == kReduce ? "REDUCE" : "NEWOBJ", callable, args);
    }
    case kNewObjEx: {  // cls, args, kwargs
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t kwargs, Pop());
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t args, Pop());
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t callable, Pop());
      if (values_[kwargs].kind != PickleKind::kDict) return Error("NEWOBJ_EX needs a kwargs dict");
      CKPTFS_RETURN_IF_ERROR(PushCall("NEWOBJ_EX", callable, args));
      if (values_[stack_.back()].kind == PickleKind::kCall) {
        CKPTFS_RETURN_IF_ERROR(Charge(sizeof(uint32_t)));
        values_[stack_.back()].items.push_back(kwargs);
      }
      return Status::Ok();
    }
    case kInst: {  // INST module\nname\n: the class called with the items above the MARK
      CKPTFS_ASSIGN_OR_RETURN(std::string_view module, Line());
      CKPTFS_ASSIGN_OR_RETURN(std::string_view name, Line());
      CKPTFS_ASSIGN_OR_RETURN(const std::vector<uint32_t> items, PopMark());
      CKPTFS_RETURN_IF_ERROR(PushGlobal(module, name));
      const uint32_t callable = stack_.back();
      stack_.pop_back();
      CKPTFS_RETURN_IF_ERROR(PushContainer(PickleKind::kTuple, items));
      const uint32_t args = stack_.back();
      stack_.pop_back();
      return PushCall("INST", callable, args);
    }
    case kObj: {  // OBJ: MARK cls args... OBJ
      CKPTFS_ASSIGN_OR_RETURN(const std::vector<uint32_t> items, PopMark());
      if (items.empty()) return Error("OBJ without a class");
      CKPTFS_RETURN_IF_ERROR(PushContainer(PickleKind::kTuple, std::span(items).subspan(1)));
      const uint32_t args = stack_.back();
      stack_.pop_back();
      return PushCall("OBJ", items[0], args);
    }
    case kBuild: {
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t state, Pop());
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t target, Top());
      // Any object; a container too (python sets a subclass's attributes). A number,
      // string or class has no state to set.
      const PickleKind kind = values_[target].kind;
      if (kind != PickleKind::kCall && kind != PickleKind::kDict && kind != PickleKind::kList &&
          kind != PickleKind::kSet) {
        return Error("BUILD on " + std::string(KindName(kind)));
      }
      values_[target].state = state;
      return Status::Ok();
    }
    case kBinPersId: {
      CKPTFS_ASSIGN_OR_RETURN(const uint32_t pid, Pop());
      return PushItems(PickleKind::kPersistent, {pid});
    }
    default:
      return RefuseOp(op);
  }
}

// An opcode that exists but is refused (PERSID, EXT1/2/4, protocol 5's buffers) or never
// existed: Unsupported, naming it.
Status Unpickler::RefuseOp(uint8_t op) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string code = {'0', 'x', kHex[op >> 4], kHex[op & 15]};
  return Refuse("opcode " + code + " (" + std::string(RefusedName(op)) + ") is not supported");
}

#undef CKPTFS_PICKLE_OP

}  // namespace ckptfs::pickle_internal
