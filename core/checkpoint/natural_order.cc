#include "core/checkpoint/natural_order.h"

namespace ckptfs {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The run of digits at `s[i]`, leading zeros dropped (one zero is kept for "000").
std::string_view DigitRun(std::string_view s, size_t& i) {
  const size_t start = i;
  while (i < s.size() && IsDigit(s[i])) ++i;
  size_t first = start;
  while (first + 1 < i && s[first] == '0') ++first;
  return s.substr(first, i - first);
}

}  // namespace

bool NaturalLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (IsDigit(a[i]) && IsDigit(b[j])) {
      const std::string_view x = DigitRun(a, i);
      const std::string_view y = DigitRun(b, j);
      // Without leading zeros, the shorter run is the smaller number.
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i, ++j;
  }
  if (i < a.size() || j < b.size()) return i == a.size();  // a prefix comes first
  // Equal as numbers and text ("a01" vs "a1"): byte order keeps the order strict.
  return a < b;
}

}  // namespace ckptfs
