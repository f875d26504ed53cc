#include "core/encoding/pickle.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "core/encoding/pickle_unpickler.h"

namespace ckptfs {
namespace pickle_internal {
namespace {

constexpr std::string_view kZeroStageEnum = "deepspeed.runtime.zero.config.ZeroStageEnum";
// TensorProperties.memory_format in a DCP .metadata (core/format/dcp/metadata.h).
constexpr std::string_view kMemFormatEnum =
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING";

bool IsGetattr(std::string_view global) {
  return global == "builtins.getattr" || global == "__builtin__.getattr";
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

}  // namespace

std::string_view KindName(PickleKind kind) {
  static constexpr std::array<std::string_view, 13> kNames = {
      "None", "bool", "int",  "float",  "str",  "bytes",        "tuple",
      "list", "set",  "dict", "global", "call", "persistent id"};
  return kNames[static_cast<size_t>(kind)];
}

// Orders the keys ByValue compares: kind, then number, then text. An ordered set rather
// than a hash, so crafted keys cannot make lookups quadratic.
bool KeyLess::operator()(uint32_t a, uint32_t b) const {
  const PickleValue& x = (*values)[a];
  const PickleValue& y = (*values)[b];
  // A kBytes int_value is where its bytes lie, not part of its value.
  const int64_t xi = x.kind == PickleKind::kBytes ? 0 : x.int_value;
  const int64_t yi = y.kind == PickleKind::kBytes ? 0 : y.int_value;
  return std::tie(x.kind, xi, x.float_value, x.text) < std::tie(y.kind, yi, y.float_value, y.text);
}

Result<int64_t> Unpickler::ParseInt(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) return Error("integer too large");
  if (ec != std::errc() || end != s.data() + s.size()) return Error("malformed integer");
  return v;
}

// LONG1 / LONG4: little-endian two's complement of any width, python's arbitrary ints.
Status Unpickler::PushLong(std::string_view b) {
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

Status Unpickler::PushString(PickleKind kind, uint64_t length) {
  CKPTFS_ASSIGN_OR_RETURN(std::string_view s, Take(length));
  if (kind == PickleKind::kString && !IsUtf8(s)) return Error("string is not valid UTF-8");
  CKPTFS_RETURN_IF_ERROR(PushText(kind, std::string(s)));
  // Where the bytes lie, so a numpy array's data can be served from the pickle in place.
  if (kind == PickleKind::kBytes)
    values_.back().int_value = static_cast<int64_t>(pos_ - length) + 1;
  return Status::Ok();
}

// STRING (protocol 0 bytes): a quoted repr() with python's string escapes.
Status Unpickler::PushQuoted(std::string_view line) {
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
Status Unpickler::PushRawUnicode(std::string_view s) {
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
Status Unpickler::PushGlobal(std::string_view module, std::string_view name) {
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
Status Unpickler::PushCall(std::string_view op, uint32_t callable, uint32_t args) {
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
uint32_t Unpickler::KeyOf(uint32_t v) {
  if (canonical_.size() <= v) canonical_.resize(values_.size(), kNoValue);
  if (canonical_[v] == kNoValue) canonical_[v] = ByValue(values_[v]) ? *keys_.insert(v).first : v;
  return canonical_[v];
}

// Adds `key` (and in a dict its value) as python does: an equal key already present
// keeps its position and takes the new value.
void Unpickler::Insert(uint32_t container, uint32_t key, uint32_t value) {
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
Status Unpickler::Fill(uint32_t container, std::span<const uint32_t> items) {
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
Status Unpickler::AddTo(PickleKind want, std::string_view op, std::span<const uint32_t> items) {
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

Status Unpickler::PushContainer(PickleKind kind, std::span<const uint32_t> items) {
  CKPTFS_RETURN_IF_ERROR(Push(kind));
  return Fill(stack_.back(), items);
}

// Picklers number memo entries 0, 1, 2, ...: those go in a vector. Any other index goes
// in an ordered map, which crafted indices cannot slow down. At most one entry per byte.
Status Unpickler::Memo(uint64_t index) {
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

Status Unpickler::Get(uint64_t index) {
  auto it = sparse_memo_.find(index);
  if (index >= memo_.size() && it == sparse_memo_.end()) {
    return Error("memo entry " + std::to_string(index) + " was never set");
  }
  // A reference, never a copy: python objects are shared.
  stack_.push_back(index < memo_.size() ? memo_[index] : it->second);
  return Status::Ok();
}

}  // namespace pickle_internal

Result<PickleTree> Unpickle(std::string_view data, const std::string& file_name,
                            PickleGlobals globals, std::string_view record) {
  (void)globals;  // the denylist is the same for every file (pickle.h)
  return pickle_internal::Unpickler(data, file_name, record).Run();
}

}  // namespace ckptfs