// JsonScan: a cursor over the plain JSON that checkpoint headers and indexes almost always
// are, for parsers' fast paths.
//
// It reads only a subset of JSON: strings of printable ASCII without escapes, unsigned
// integers that fit 64 bits, true/false/null, objects and arrays. Everything it accepts is
// valid JSON meaning what nlohmann's parser would make of it, so a fast path built on it
// gives the same result as the full parser. It never reports an error: on anything else
// (an escape, a non-ASCII byte, a float, a syntax error) it returns false and the caller
// parses the text again with the full, strict parser, which finds and words the problem.
// Not thread-safe; holds a view of the text, which must outlive it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/checked.h"

namespace ckptfs {

class JsonScan {
 public:
  explicit JsonScan(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  // Skips whitespace, then consumes `c` if it is next.
  bool Consume(char c) {
    SkipSpace();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  // Skips whitespace; true if `c` is next (not consumed).
  bool Peek(char c) {
    SkipSpace();
    return p_ != end_ && *p_ == c;
  }
  // True at the end of the text, whitespace aside.
  bool AtEnd() {
    SkipSpace();
    return p_ == end_;
  }

  // A string in the subset; `out` views the text.
  bool String(std::string_view& out) {
    if (!Consume('"')) return false;
    const char* start = p_;
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c < 0x20 || c >= 0x7f || c == '\\') return false;
      ++p_;
    }
    return false;
  }

  // An unsigned integer as JSON writes it (no sign, no leading zero, no fraction or
  // exponent) that fits 64 bits.
  bool Unsigned(uint64_t& out) {
    SkipSpace();
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
    if (*p_ == '0') {
      ++p_;
      out = 0;
      return EndOfNumber();
    }
    uint64_t v = 0;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      const auto digit = static_cast<uint64_t>(*p_ - '0');
      const std::optional<uint64_t> tens = CheckedMul(v, 10);
      const std::optional<uint64_t> next = tens ? CheckedAdd(*tens, digit) : std::nullopt;
      if (!next) return false;  // nlohmann makes it a float
      v = *next;
      ++p_;
    }
    out = v;
    return EndOfNumber();
  }

  // Any value in the subset, skipped; `depth` bounds nesting.
  bool SkipValue(int depth = 0) {
    if (depth > 64) return false;
    SkipSpace();
    if (p_ == end_) return false;
    std::string_view s;
    uint64_t n;
    switch (*p_) {
      case '"':
        return String(s);
      case '{':
        ++p_;
        if (Consume('}')) return true;
        do {
          if (!String(s) || !Consume(':') || !SkipValue(depth + 1)) return false;
        } while (Consume(','));
        return Consume('}');
      case '[':
        ++p_;
        if (Consume(']')) return true;
        do {
          if (!SkipValue(depth + 1)) return false;
        } while (Consume(','));
        return Consume(']');
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Unsigned(n);
    }
  }

 private:
  void SkipSpace() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  // A number ends where a delimiter or whitespace starts ("12a" or "1.5" are not ours).
  bool EndOfNumber() const {
    if (p_ == end_) return true;
    const char c = *p_;
    return c == ',' || c == ']' || c == '}' || c == ' ' || c == '\n' || c == '\r' || c == '\t';
  }
  bool Literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) {
      return false;
    }
    p_ += word.size();
    return p_ == end_ || EndOfNumber();
  }

  const char* p_;
  const char* end_;
};

}  // namespace ckptfs
