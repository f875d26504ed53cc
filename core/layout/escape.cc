#include "core/layout/escape.h"

#include <utility>

namespace ckptfs {

std::string EscapeComponent(std::string_view component) {
  if (component.empty()) return "%";
  if (component == ".") return "%2E";
  if (component == "..") return "%2E%2E";
  return PercentEscapeSlash(component);
}

std::vector<std::string> TensorPathComponents(std::string_view tensor_name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = tensor_name.find('.', start);
    parts.push_back(EscapeComponent(tensor_name.substr(start, dot - start)));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::vector<std::string> KeyPathComponents(std::vector<std::string> segments) {
  std::vector<std::string> parts = std::move(segments);
  for (std::string& part : parts) part = EscapeComponent(part);
  if (parts.empty()) parts.emplace_back("%");  // never: a key has at least one segment
  return parts;
}

}  // namespace ckptfs
