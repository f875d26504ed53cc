#include "fs/help.h"

#include <CLI/CLI.hpp>
#include <sstream>
#include <vector>

#include "core/format/formats.h"

namespace ckptfs {
namespace {

// The column the text of `line` starts at after its label, or npos.
size_t TextColumn(const std::string& line, size_t indent) {
  const size_t gap = line.find("  ", indent);
  if (gap == std::string::npos) return std::string::npos;
  const size_t text = line.find_first_not_of(' ', gap);
  return text == std::string::npos ? std::string::npos : text;
}

void WrapLine(const std::string& line, size_t width, std::string& out) {
  const size_t indent = line.find_first_not_of(' ');
  if (line.size() <= width || indent == std::string::npos) {
    out += line + "\n";
    return;
  }
  size_t column = TextColumn(line, indent);
  if (column == std::string::npos || column > width / 2) column = std::min(indent, width / 2);
  std::string current = line.substr(0, column);
  bool first_word = true;  // of the current line, after its label or indentation
  std::istringstream words(line.substr(column));
  for (std::string word; words >> word;) {
    if (!first_word && current.size() + 1 + word.size() > width) {
      out += current + "\n";
      current = std::string(column, ' ');
      first_word = true;
    }
    current += (first_word ? "" : " ") + word;
    first_word = false;
  }
  out += current + "\n";
}

class WrappingFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    return WrapHelp(CLI::Formatter::make_help(app, std::move(name), mode));
  }
};

}  // namespace

std::string FormatTitles() {
  std::string titles;
  for (const FormatReader& f : Formats()) {
    titles += (titles.empty() ? "" : ", ") + std::string(f.title);
  }
  return titles;
}

std::string WrapHelp(const std::string& text, size_t width) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) WrapLine(line, width, out);
  if (!text.empty() && text.back() != '\n' && !out.empty()) out.pop_back();
  return out;
}

std::shared_ptr<CLI::Formatter> WrappingHelpFormatter() {
  return std::make_shared<WrappingFormatter>();
}

}  // namespace ckptfs
