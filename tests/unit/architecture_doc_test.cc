// docs/architecture.md cannot drift from the build: its layer line names every layer
// library core/CMakeLists.txt makes, each after every layer it links (CONTRIBUTING.md's
// the same), and every repository path it names exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

namespace {

using ckptfs::testing::ReadRepoFile;

// ckptfs_layer(NAME BELOW...) lines of core/CMakeLists.txt: each layer and what it links.
std::vector<std::pair<std::string, std::vector<std::string>>> BuildLayers() {
  std::vector<std::pair<std::string, std::vector<std::string>>> layers;
  std::istringstream lines(ReadRepoFile("core/CMakeLists.txt"));
  const std::regex call(R"(^ckptfs_layer\((\w+)((?: \w+)*)\)\s*$)");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, call)) continue;
    std::vector<std::string> below;
    std::istringstream words(m[2].str());
    for (std::string w; words >> w;) below.push_back(w);
    layers.emplace_back(m[1].str(), below);
  }
  return layers;
}

// The layer line of architecture.md's "## Layers" ("cache  <  source  <  codec, format ..."):
// each name's position, names joined by ',' sharing one.
std::map<std::string, int> DocumentedOrder(const std::string& doc,
                                           const std::string& heading = "## Layers") {
  std::map<std::string, int> order;
  const size_t section = doc.find("\n" + heading);
  if (section == std::string::npos) return order;
  std::istringstream lines(doc.substr(section));
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" < ") == std::string::npos) continue;
    int level = 0;
    std::stringstream groups(line);
    for (std::string group; std::getline(groups, group, '<'); ++level) {
      std::stringstream names(group);
      for (std::string name; std::getline(names, name, ',');) {
        name.erase(0, name.find_first_not_of(' '));
        name.erase(name.find_last_not_of(' ') + 1);
        if (!name.empty()) order[name] = level;
      }
    }
    break;
  }
  return order;
}

TEST(ArchitectureDocTest, LayerLineFollowsTheBuild) {
  const auto layers = BuildLayers();
  ASSERT_GE(layers.size(), 5u) << "core/CMakeLists.txt lost its ckptfs_layer lines";
  const std::map<std::string, int> order = DocumentedOrder(ReadRepoFile("docs/architecture.md"));
  ASSERT_FALSE(order.empty()) << "docs/architecture.md has no layer line under ## Layers";
  for (const auto& [name, below] : layers) {
    ASSERT_TRUE(order.count(name)) << "docs/architecture.md's layer line leaves out " << name;
    for (const std::string& b : below) {
      ASSERT_TRUE(order.count(b)) << b;
      EXPECT_LT(order.at(b), order.at(name))
          << name << " links " << b << ", so the layer line must put " << b << " before it";
    }
  }
  EXPECT_EQ(order.size(), layers.size()) << "the layer line names a layer the build does not make";
}

// CONTRIBUTING.md repeats the line for contributors: the same order, whole.
TEST(ArchitectureDocTest, ContributingStatesTheSameLayerLine) {
  const std::map<std::string, int> documented =
      DocumentedOrder(ReadRepoFile("docs/architecture.md"));
  const std::map<std::string, int> contributing =
      DocumentedOrder(ReadRepoFile("CONTRIBUTING.md"), "## The layering rule");
  ASSERT_FALSE(contributing.empty()) << "CONTRIBUTING.md has no layer line under its rule";
  EXPECT_EQ(contributing, documented) << "CONTRIBUTING.md's layer line differs from the docs'";
}

TEST(ArchitectureDocTest, EveryRepositoryPathItNamesExists) {
  const std::string doc = ReadRepoFile("docs/architecture.md");
  const std::regex quoted("`([^`]+)`");
  const std::set<std::string> roots = {"core", "fs",      "tests", "scripts",
                                       "docs", "systemd", "cmake"};
  int checked = 0;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("```", 0) == 0) continue;  // a fence, not a quote
    for (auto it = std::sregex_iterator(line.begin(), line.end(), quoted);
         it != std::sregex_iterator(); ++it) {
      const std::string path = (*it)[1].str();
      const size_t slash = path.find('/');
      if (slash == std::string::npos || !roots.count(path.substr(0, slash))) continue;
      if (path.find_first_of(" *<>{}") != std::string::npos) continue;  // a pattern
      ++checked;
      EXPECT_TRUE(std::filesystem::exists(std::string(CKPTFS_SOURCE_DIR) + "/" + path))
          << "docs/architecture.md names " << path << ", which does not exist";
    }
  }
  EXPECT_GT(checked, 10) << "docs/architecture.md should name the files it describes";
}

}  // namespace
