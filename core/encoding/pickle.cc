#include "core/encoding/pickle.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/checked.h"
#include "core/encoding/metadata_budget.h"

namespace ckptfs {
namespace {

constexpr std::string_view kZeroStageEnum = "deepspeed.runtime.zero.config.ZeroStageEnum";
// TensorProperties.memory_format in a DCP .metadata (core/format/dcp/metadata.h).
constexpr std::string_view kMemFormatEnum =
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING";

bool IsGetattr(std::string_view global) {
  return global == "builtins.getattr" || global == "__builtin__.getattr";
}

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

std::string_view KindName(PickleKind kind) {
  static constexpr std::array<std::string_view, 13> kNames = {
      "None", "bool", "int",  "float",  "str",  "bytes",        "tuple",
      "list", "set",  "dict", "global", "call", "persistent id"};
  return kNames[static_cast<size_t>(kind)];
}

// Untrusted text quoted in an error message: bounded, and no control bytes in logs.
std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 80 ? out + "..." : out;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  auto put = [&](uint32_t b) { out += static_cast<char>(b); };
  if (cp < 0x80) {
    put(cp);
  } else if (cp < 0x800) {
    put(0xc0 | (cp >> 6)), put(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    put(0xe0 | (cp >> 12)), put(0x80 | ((cp >> 6) & 0x3f)), put(0x80 | (cp & 0x3f));
  } else {
    put(0xf0 | (cp >> 18)), put(0x80 | ((cp >> 12) & 0x3f));
    put(0x80 | ((cp >> 6) & 0x3f)), put(0x80 | (cp & 0x3f));
  }
}

// Strict UTF-8: no overlong forms, no surrogates (python's pickler can write them with
// "surrogatepass", but they cannot be UTF-8 text for our callers), nothing above U+10FFFF.
bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : 4;
    if (b >= 0xf8 || (b >= 0x80 && b < 0xc0) || n > s.size() - i) return false;
    uint32_t cp = n == 1 ? b : b & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return false;
    i += n;
  }
  return true;
}

bool ParseHex(std::string_view s, uint32_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && end == s.data() + s.size();
}

// Dict and set keys compare as the brief of PickleKind allows: scalars by value, everything
// else (containers, calls) by identity. NaN is never equal to itself, so it is identity too.
bool ByValue(const PickleValue& v) {
  switch (v.kind) {
    case PickleKind::kFloat:
      return v.float_value == v.float_value;
    case PickleKind::kNone:
    case PickleKind::kBool:
    case PickleKind::kInt:
    case PickleKind::kString:
    case PickleKind::kBytes:
    case PickleKind::kGlobal:
      return true;
    default:
      return false;
  }
}

// Orders the keys ByValue compares: kind, then number, then text. An ordered set rather
// than a hash, so crafted keys cannot make lookups quadratic.
struct KeyLess {
  const std::vector<PickleValue>* values;
  bool operator()(uint32_t a, uint32_t b) const {
    const PickleValue& x = (*values)[a];
    const PickleValue& y = (*values)[b];
    // A kBytes int_value is where its bytes lie, not part of its value.
    const int64_t xi = x.kind == PickleKind::kBytes ? 0 : x.int_value;
    const int64_t yi = y.kind == PickleKind::kBytes ? 0 : y.int_value;
    return std::tie(x.kind, xi, x.float_value, x.text) <
           std::tie(y.kind, yi, y.float_value, y.text);
  }
};

class Unpickler {
 public:
  Unpickler(std::string_view data, const std::string& file, std::string_view record)
      : data_(data),
        prefix_(record.empty() ? file + ": " : file + ": " + std::string(record) + ": "),
        budget_(data.size()),
        keys_(KeyLess{&values_}) {}

  Result<PickleTree> Run() {
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

 private:
  static constexpr uint32_t kNoValue = UINT32_MAX;
  static constexpr size_t kStepValues = 3;

  Status Step(uint8_t op);

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

  Result<int64_t> ParseInt(std::string_view s) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) return Error("integer too large");
    if (ec != std::errc() || end != s.data() + s.size()) return Error("malformed integer");
    return v;
  }

  // LONG1 / LONG4: little-endian two's complement of any width, python's arbitrary ints.
  Status PushLong(std::string_view b) {
    const bool negative = !b.empty() && (static_cast<uint8_t>(b.back()) & 0x80);
    uint64_t u = negative ? ~uint64_t{0} : 0;
    for (size_t i = std::min<size_t>(b.size(), 8); i-- > 0;) {
      u = (u << 8) | static_cast<uint8_t>(b[i]);
    }
    // Bytes past the eighth may only repeat the sign, and bit 63 must agree with it.
    const char fill = negative ? '\xff' : '\0';
    const bool extra_ok = b.size() <= 8 || (b.find_first_not_of(fill, 8) == b.npos &&
                                            (u >> 63) == static_cast<uint64_t>(negative));
    if (!extra_ok) return Error("integer too large");
    return PushInt(std::bit_cast<int64_t>(u));
  }

  Status PushString(PickleKind kind, uint64_t length) {
    CKPTFS_ASSIGN_OR_RETURN(std::string_view s, Take(length));
    if (kind == PickleKind::kString && !IsUtf8(s)) return Error("string is not valid UTF-8");
    CKPTFS_RETURN_IF_ERROR(PushText(kind, std::string(s)));
    // Where the bytes lie, so a numpy array's data can be served from the pickle in place.
    if (kind == PickleKind::kBytes)
      values_.back().int_value = static_cast<int64_t>(pos_ - length) + 1;
    return Status::Ok();
  }

  // STRING (protocol 0 bytes): a quoted repr() with python's string escapes.
  Status PushQuoted(std::string_view line) {
    if (line.size() < 2 || line.front() != line.back() || (line[0] != '\'' && line[0] != '"')) {
      return Error("STRING argument is not quoted");
    }
    static constexpr std::string_view kEscapes = "\\'\"abfnrtv", kMeanings = "\\'\"\a\b\f\n\r\t\v";
    const std::string_view s = line.substr(1, line.size() - 2);
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\') {
        out += s[i];
      } else if (++i == s.size()) {
        return Error("STRING ends with a backslash");
      } else if (const size_t e = kEscapes.find(s[i]); e != kEscapes.npos) {
        out += kMeanings[e];
      } else if (s[i] == 'x' || (s[i] >= '0' && s[i] <= '7')) {
        // \xhh takes exactly two hex digits, an octal escape one to three digits.
        const bool hex = s[i] == 'x';
        const size_t first = hex ? i + 1 : i;
        const size_t digits = hex ? 2 : std::min(s.find_first_not_of("01234567", i), s.size()) - i;
        uint32_t v = 0;
        auto [end, ec] = std::from_chars(
            s.data() + first, s.data() + std::min(first + std::min<size_t>(digits, 3), s.size()), v,
            hex ? 16 : 8);
        if (ec != std::errc() || (hex && end != s.data() + first + 2)) {
          return Error("bad \\x escape");
        }
        out += static_cast<char>(v & 0xff);
        i = static_cast<size_t>(end - s.data()) - 1;
      } else {
        out += '\\', out += s[i];  // python keeps unknown escapes as written
      }
    }
    return PushText(PickleKind::kBytes, std::move(out));
  }

  // UNICODE (protocol 0 str): raw-unicode-escape, i.e. latin-1 bytes plus \uXXXX and
  // \UXXXXXXXX; a backslash before anything else stands for itself, with its follower.
  Status PushRawUnicode(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<uint8_t>(s[i]);
      if (c != '\\' || i + 1 == s.size()) {
        AppendUtf8(out, c);
      } else if (s[i + 1] != 'u' && s[i + 1] != 'U') {
        AppendUtf8(out, c), AppendUtf8(out, static_cast<uint8_t>(s[++i]));
      } else {
        const size_t n = s[i + 1] == 'u' ? 4 : 8;
        uint32_t cp = 0;
        if (s.size() - i - 2 < n || !ParseHex(s.substr(i + 2, n), cp)) {
          return Error("truncated \\uXXXX escape");
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) {
          return Refuse("UNICODE escape of a surrogate or beyond U+10FFFF");
        }
        AppendUtf8(out, cp), i += n + 1;
      }
    }
    return PushText(PickleKind::kString, std::move(out));
  }

  // getattr passes here and is checked where it is called (PushCall).
  Status PushGlobal(std::string_view module, std::string_view name) {
    if (IsDeniedPickleGlobal(module, name, protocol_) &&
        !IsGetattr(std::string(module) + "." + std::string(name))) {
      return Refuse("global " + Printable(module) + "." + Printable(name) + " is not allowed");
    }
    // Each distinct pair once, for the weights_only verdict (weights_only.h).
    std::pair<std::string, std::string> pair(module, name);
    if (!named_.contains(pair)) {
      CKPTFS_RETURN_IF_ERROR(Charge(2 * (module.size() + name.size()) + 192));
      named_.insert(pair);
      names_.globals.push_back(std::move(pair));
    }
    return PushText(PickleKind::kGlobal, std::string(module) + "." + std::string(name));
  }

  // REDUCE / NEWOBJ. collections.OrderedDict() becomes an empty dict: torch.save writes
  // every state dict as OrderedDict() followed by SETITEMS (and a BUILD for _metadata), so
  // the items have to land in a container.
  Status PushCall(std::string_view op, uint32_t callable, uint32_t args) {
    if (values_[callable].kind != PickleKind::kGlobal) {
      return Refuse(std::string(op) + " of " + std::string(KindName(values_[callable].kind)) +
                    " (only globals are called)");
    }
    if (values_[args].kind != PickleKind::kTuple) return Error(std::string(op) + " needs a tuple");
    // getattr reaches any attribute of anything: only an enum member, of ZeroStageEnum or
    // _MEM_FORMAT_ENCODING, or in capitals (a dict key: core/encoding/pickle_key.h).
    if (IsGetattr(values_[callable].text)) {
      const std::vector<uint32_t>& a = values_[args].items;
      if (a.size() != 2 || values_[a[0]].kind != PickleKind::kGlobal ||
          values_[a[1]].kind != PickleKind::kString ||
          (values_[a[0]].text != kZeroStageEnum && values_[a[0]].text != kMemFormatEnum &&
           !IsEnumMemberGetattr(values_[a[0]].text, values_[a[1]].text))) {
        return Refuse(values_[callable].text + " is allowed only as getattr(" +
                      std::string(kZeroStageEnum) + ", 'name') or getattr(CLASS, 'NAME')");
      }
    }
    if (values_[callable].text == "collections.OrderedDict" && values_[args].items.empty()) {
      return Push(PickleKind::kDict);
    }
    return PushItems(PickleKind::kCall, {callable, args});
  }

  // The first value equal to `v` as a key; each value is looked up once however often it is
  // used as a key, so a big string fetched again and again from the memo costs nothing.
  uint32_t KeyOf(uint32_t v) {
    if (canonical_.size() <= v) canonical_.resize(values_.size(), kNoValue);
    if (canonical_[v] == kNoValue) canonical_[v] = ByValue(values_[v]) ? *keys_.insert(v).first : v;
    return canonical_[v];
  }

  // Adds `key` (and in a dict its value) as python does: an equal key already present
  // keeps its position and takes the new value.
  void Insert(uint32_t container, uint32_t key, uint32_t value) {
    const uint64_t slot = (uint64_t{container} << 32) | KeyOf(key);
    std::vector<uint32_t>& items = values_[container].items;
    auto [it, fresh] = slots_.try_emplace(slot, static_cast<uint32_t>(items.size()));
    if (fresh) items.push_back(key);
    if (value == kNoValue) return;
    if (fresh) {
      items.push_back(value);
    } else {
      items[it->second + 1] = value;
    }
  }

  // Puts `items` into `container` (list, tuple: appended; dict: key/value pairs; set: keys).
  Status Fill(uint32_t container, std::span<const uint32_t> items) {
    const PickleKind kind = values_[container].kind;
    // An item slot, with its vector's growth (up to twice over); a dict or set entry also
    // its key's tree node and hash slot (kKeyBytes).
    constexpr uint64_t kItemBytes = 2 * sizeof(uint32_t), kKeyBytes = 96;
    const bool keyed = kind != PickleKind::kList && kind != PickleKind::kTuple;
    CKPTFS_RETURN_IF_ERROR(Charge(items.size() * (kItemBytes + (keyed ? kKeyBytes : 0))));
    if (kind == PickleKind::kList || kind == PickleKind::kTuple) {
      values_[container].items.insert(values_[container].items.end(), items.begin(), items.end());
    } else if (kind == PickleKind::kDict) {
      if (items.size() % 2 != 0) return Error("dict items are not key/value pairs");
      for (size_t i = 0; i < items.size(); i += 2) Insert(container, items[i], items[i + 1]);
    } else {
      for (uint32_t item : items) Insert(container, item, kNoValue);
    }
    return Status::Ok();
  }

  // APPEND(S) / SETITEM(S) / ADDITEMS: the container is the value under the items.
  // Onto an object (a kCall: a dict or list subclass), into its `contents`, made on first use.
  Status AddTo(PickleKind want, std::string_view op, std::span<const uint32_t> items) {
    CKPTFS_ASSIGN_OR_RETURN(uint32_t target, Top());
    if (values_[target].kind == PickleKind::kCall && want != PickleKind::kSet) {
      if (values_[target].contents == kNoValue) {
        const uint32_t contents = static_cast<uint32_t>(values_.size());
        CKPTFS_RETURN_IF_ERROR(Push(want));
        stack_.pop_back();  // not on the stack: reached through the call only
        values_[target].contents = contents;
      }
      target = values_[target].contents;
    }
    if (values_[target].kind != want) {
      return Error(std::string(op) + " onto " + std::string(KindName(values_[target].kind)));
    }
    return Fill(target, items);
  }

  Status PushContainer(PickleKind kind, std::span<const uint32_t> items) {
    CKPTFS_RETURN_IF_ERROR(Push(kind));
    return Fill(stack_.back(), items);
  }

  // Picklers number memo entries 0, 1, 2, ...: those go in a vector. Any other index goes
  // in an ordered map, which crafted indices cannot slow down. At most one entry per byte.
  Status Memo(uint64_t index) {
    CKPTFS_ASSIGN_OR_RETURN(const uint32_t top, Top());
    if (index < memo_.size()) {
      memo_[index] = top;
    } else if (index == memo_.size() && !sparse_memo_.contains(index)) {
      memo_.push_back(top);
    } else {
      CKPTFS_RETURN_IF_ERROR(Charge(64));  // a map node
      sparse_memo_[index] = top;
    }
    return Status::Ok();
  }
  Status Get(uint64_t index) {
    auto it = sparse_memo_.find(index);
    if (index >= memo_.size() && it == sparse_memo_.end()) {
      return Error("memo entry " + std::to_string(index) + " was never set");
    }
    // A reference, never a copy: python objects are shared.
    stack_.push_back(index < memo_.size() ? memo_[index] : it->second);
    return Status::Ok();
  }

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

Status Unpickler::Step(uint8_t op) {
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
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      const std::string code = {'0', 'x', kHex[op >> 4], kHex[op & 15]};
      return Refuse("opcode " + code + " (" + std::string(RefusedName(op)) + ") is not supported");
    }
  }
}

}  // namespace

Result<PickleTree> Unpickle(std::string_view data, const std::string& file_name,
                            PickleGlobals globals, std::string_view record) {
  (void)globals;  // the denylist is the same for every file (pickle.h)
  return Unpickler(data, file_name, record).Run();
}

}  // namespace ckptfs
