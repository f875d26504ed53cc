#include "core/checkpoint/natural_order.h"

#include <iterator>
#include <regex>

#include "core/checkpoint/assembly.h"

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

std::optional<uint64_t> StepInName(const std::string& name) {
  static const std::regex kStep(R"(step[=_-]?(\d+))");
  // HF Trainer's `checkpoint-N`, TF's `ckpt-N` / `model.ckpt-N`.
  static const std::regex kCheckpoint(R"((?:checkpoint|ckpt)[=_-]?(\d+))");
  static const std::regex kEpoch(R"(epoch[=_-]?(\d+))");
  static const std::regex kNumber(R"(\d+)");
  // Lightning's version counter (ModelCheckpoint: CHECKPOINT_JOIN_CHAR + "v" + N) says
  // which save of that name it is, never a step.
  static const std::regex kVersion(R"(-v\d+$)");
  std::string stem(StripZst(name));
  for (std::string_view ext : {".ckpt", ".pt", ".pth", ".bin", ".safetensors"}) {
    if (EndsWith(stem, ext)) stem.resize(stem.size() - ext.size());
  }
  stem = std::regex_replace(stem, kVersion, "");
  std::smatch m;
  std::string digits;
  std::string rest = stem;
  while (std::regex_search(rest, m, kStep)) {
    digits = m[1];
    rest = m.suffix();
  }
  if (digits.empty() && std::regex_search(stem, m, kCheckpoint)) digits = m[1];
  if (digits.empty() && std::regex_search(stem, m, kEpoch)) digits = m[1];
  // Otherwise a number is a step only when it is the name's one number and the name has no
  // `key=value` parts (`model_00010.pt`, TF Serving's `00000123`): a name of metrics
  // (`val_loss=0.25`, `model_loss0.123.pt`, Keras' `weights.05-0.43`) or of a model
  // (`llama2-7b`) orders nothing by its digits (the run orders it by time).
  if (digits.empty() && stem.find('=') == std::string::npos &&
      std::distance(std::sregex_iterator(stem.begin(), stem.end(), kNumber),
                    std::sregex_iterator()) == 1 &&
      std::regex_search(stem, m, kNumber)) {
    digits = m[0];
  }
  if (digits.empty()) return std::nullopt;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  if (digits.size() > 19) return std::nullopt;  // beyond uint64: no step
  return std::stoull(digits);
}

}  // namespace ckptfs
