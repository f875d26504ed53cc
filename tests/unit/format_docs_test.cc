// The format table's entries cannot drift from the docs: docs/formats.md's table lists
// every entry by name, in the table's order, and the man page's DESCRIPTION sends the
// reader to the table (`ckptfs --help` prints its titles) rather than keeping a list of
// its own. A new format adds its line to formats.md (CONTRIBUTING.md, "A new checkpoint
// format").
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/format/formats.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using ckptfs::testing::ReadRepoFile;

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

TEST(FormatDocsTest, ManPagePointsAtTheTable) {
  std::string page = ReadRepoFile("docs/ckptfs.1");
  ASSERT_FALSE(page.empty()) << "docs/ckptfs.1";
  const size_t description = page.find(".SH DESCRIPTION");
  ASSERT_NE(description, std::string::npos) << "docs/ckptfs.1 has no DESCRIPTION";
  page = page.substr(description, page.find(".SH ", description + 1) - description);
  EXPECT_NE(page.find("ckptfs \\-\\-help"), std::string::npos)
      << "the man page's DESCRIPTION must send the reader to `ckptfs --help` for the formats";
  EXPECT_NE(page.find("docs/formats.md"), std::string::npos)
      << "the man page's DESCRIPTION must name docs/formats.md";
}

}  // namespace
}  // namespace ckptfs
