// The format table's entries cannot drift from the docs: docs/formats.md's table lists
// every entry by name, in the table's order, and the man page's DESCRIPTION names each by
// its title. A new format adds its line to both (CONTRIBUTING.md, "A new checkpoint
// format").
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/format/formats.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using ckptfs::testing::ReadRepoFile;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The names in the first column of docs/formats.md's "## The formats" table, in order.
std::vector<std::string> DocumentedFormats() {
  const std::string doc = ReadRepoFile("docs/formats.md");
  std::vector<std::string> names;
  const size_t section = doc.find("\n## The formats");
  if (section == std::string::npos) return names;
  std::istringstream lines(doc.substr(section + 1));
  std::string line;
  std::getline(lines, line);  // the heading
  for (; std::getline(lines, line);) {
    if (line.starts_with("## ")) break;
    if (!line.starts_with("| `")) continue;
    const size_t end = line.find('`', 3);
    if (end != std::string::npos) names.push_back(line.substr(3, end - 3));
  }
  return names;
}

TEST(FormatDocsTest, FormatsMdListsEveryEntryInTableOrder) {
  std::vector<std::string> table;
  for (const FormatReader& f : Formats()) table.emplace_back(f.name);
  EXPECT_EQ(DocumentedFormats(), table)
      << "docs/formats.md's \"## The formats\" table must have one row per entry of "
         "Formats() (core/format/formats.cc), in its order";
}

TEST(FormatDocsTest, ManPageNamesEveryEntry) {
  std::string page = ReadRepoFile("docs/ckptfs.1");
  ASSERT_FALSE(page.empty()) << "docs/ckptfs.1";
  // As read: roff's escaped hyphen is a hyphen, and line breaks are spaces.
  for (size_t at; (at = page.find("\\-")) != std::string::npos;) page.erase(at, 1);
  std::replace(page.begin(), page.end(), '\n', ' ');
  page = Lower(page);
  for (const FormatReader& f : Formats()) {
    EXPECT_NE(page.find(Lower(std::string(f.title))), std::string::npos)
        << "docs/ckptfs.1 does not name the format \"" << f.title << "\" (" << f.name << ")";
  }
}

}  // namespace
}  // namespace ckptfs
