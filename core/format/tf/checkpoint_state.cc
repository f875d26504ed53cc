#include "core/format/tf/checkpoint_state.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace ckptfs::tf {
namespace {

bool IsIdent(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A quoted string at the front of `in` (quote included), C escapes undone.
std::optional<std::string> ReadQuoted(std::string_view& in) {
  const char quote = in[0];
  std::string out;
  size_t i = 1;
  while (i < in.size() && in[i] != quote) {
    char c = in[i++];
    if (c == '\n') return std::nullopt;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (i == in.size()) return std::nullopt;
    c = in[i++];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
      case '\'':
      case '"':
        out += c;
        break;
      case 'x': {
        int v = 0, digits = 0;
        for (; digits < 2 && i < in.size() && HexValue(in[i]) >= 0; ++digits)
          v = v * 16 + HexValue(in[i++]);
        if (digits == 0) return std::nullopt;
        out += static_cast<char>(v);
        break;
      }
      default: {
        if (c < '0' || c > '7') return std::nullopt;
        int v = c - '0';
        for (int d = 1; d < 3 && i < in.size() && in[i] >= '0' && in[i] <= '7'; ++d)
          v = v * 8 + (in[i++] - '0');
        out += static_cast<char>(v & 0xff);
      }
    }
  }
  if (i == in.size()) return std::nullopt;
  in.remove_prefix(i + 1);
  return out;
}

void SkipSpaceAndComments(std::string_view& in) {
  while (!in.empty()) {
    if (std::isspace(static_cast<unsigned char>(in[0]))) {
      in.remove_prefix(1);
    } else if (in[0] == '#') {
      const size_t nl = in.find('\n');
      in.remove_prefix(nl == std::string_view::npos ? in.size() : nl);
    } else {
      break;
    }
  }
}

}  // namespace

Result<CheckpointState> ParseCheckpointState(std::string_view text, const std::string& file_name) {
  CheckpointState state;
  std::string_view in = text;
  auto bad = [&](const std::string& what) {
    const size_t line =
        1 + static_cast<size_t>(std::count(
                text.begin(), text.end() - static_cast<std::ptrdiff_t>(in.size()), '\n'));
    return Status::Corruption(file_name + ": line " + std::to_string(line) + ": " + what);
  };
  for (SkipSpaceAndComments(in); !in.empty(); SkipSpaceAndComments(in)) {
    size_t n = 0;
    while (n < in.size() && IsIdent(in[n])) ++n;
    if (n == 0) return bad("expected a field name");
    const std::string_view field = in.substr(0, n);
    in.remove_prefix(n);
    SkipSpaceAndComments(in);
    if (in.empty() || in[0] != ':') return bad("expected ':' after " + std::string(field));
    in.remove_prefix(1);
    while (!in.empty() && (in[0] == ' ' || in[0] == '\t')) in.remove_prefix(1);
    if (in.empty()) return bad("missing value");
    if (in[0] == '"' || in[0] == '\'') {
      auto value = ReadQuoted(in);
      if (!value) return bad("malformed string");
      if (field == "model_checkpoint_path") state.model_checkpoint_path = std::move(*value);
      if (field == "all_model_checkpoint_paths") {
        state.all_model_checkpoint_paths.push_back(std::move(*value));
      }
      continue;
    }
    size_t m = 0;
    while (m < in.size() && (std::isalnum(static_cast<unsigned char>(in[m])) || in[m] == '.' ||
                             in[m] == '-' || in[m] == '+')) {
      ++m;
    }
    if (m == 0) return bad("malformed value");
    in.remove_prefix(m);
  }
  return state;
}

Result<std::string> StatePathInSource(std::string_view path, const std::string& file_name) {
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Status::InvalidArgument(file_name + ": checkpoint path holds a control character");
    }
  }
  std::vector<std::string_view> parts;
  bool escapes = !path.empty() && path[0] == '/';
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t slash = path.find('/', begin);
    if (slash == std::string_view::npos) slash = path.size();
    const std::string_view part = path.substr(begin, slash - begin);
    if (part == "..") escapes = true;
    if (!part.empty() && part != "." && part != "..") parts.push_back(part);
    begin = slash + 1;
  }
  if (parts.empty()) {
    return Status::InvalidArgument(file_name + ": checkpoint path \"" + std::string(path) +
                                   "\" names no file");
  }
  if (escapes) return std::string(parts.back());
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += '/';
    out += parts[i];
  }
  return out;
}

Result<std::string> LatestCheckpointPrefix(std::string_view text, const std::string& file_name) {
  CKPTFS_ASSIGN_OR_RETURN(CheckpointState state, ParseCheckpointState(text, file_name));
  if (state.model_checkpoint_path.empty()) {
    return Status::NotFound(file_name + ": names no checkpoint (no model_checkpoint_path)");
  }
  return StatePathInSource(state.model_checkpoint_path, file_name);
}

}  // namespace ckptfs::tf
