// README's install command installs what CMakeLists.txt requires: every pkg_check_modules
// and find_package(... REQUIRED) of the build maps to a Debian package (the table below),
// and that package is in the one list (scripts/packages.sh build) that README's command,
// setup.sh, demo.sh, test.sh and CI install. A requirement added to CMake without its
// package, or a README that lists packages by hand and misses one, fails here.

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace ckptfs {
namespace {

const std::string kSource = CKPTFS_SOURCE_DIR;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> Words(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

// The Debian package providing each requirement of the build; "" where the C library or
// CMake itself does. GTest is the tests' own (scripts/test.sh installs it).
const std::map<std::string, std::string> kProviders = {
    {"fuse3", "libfuse3-dev"},
    {"libzstd", "libzstd-dev"},
    {"libxxhash", "libxxhash-dev"},
    {"libcurl", "libcurl4-openssl-dev"},
    {"tinyxml2", "libtinyxml2-dev"},
    {"snappy", "libsnappy-dev"},
    {"hdf5", "libhdf5-dev"},
    {"ZLIB", "zlib1g-dev"},
    {"nlohmann_json", "nlohmann-json3-dev"},
    {"CLI11", "libcli11-dev"},
    {"PkgConfig", "pkg-config"},
    {"Threads", ""},
};

TEST(SetupTest, ReadmeInstallCommandCoversCMakeRequirements) {
  const std::string cmake = ReadText(kSource + "/CMakeLists.txt");
  ASSERT_FALSE(cmake.empty());
  std::set<std::string> required;
  const std::regex pkg(R"(pkg_check_modules\(\w+\s+REQUIRED(?:\s+IMPORTED_TARGET)?\s+([\w.+-]+))");
  for (std::sregex_iterator it(cmake.begin(), cmake.end(), pkg), end; it != end; ++it) {
    required.insert((*it)[1]);
  }
  const std::regex find(R"(find_package\((\w+)[^)]*\bREQUIRED\b)");
  for (std::sregex_iterator it(cmake.begin(), cmake.end(), find), end; it != end; ++it) {
    if ((*it)[1] != "GTest") required.insert((*it)[1]);
  }
  ASSERT_TRUE(required.count("snappy")) << "the regexes no longer see CMake's requirements";

  FILE* p = popen(("bash '" + kSource + "/scripts/packages.sh' build").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string listed;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) listed.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << "scripts/packages.sh build failed";
  const std::set<std::string> packages = Words(listed);

  // README's install command: the package list itself, or what it names literally.
  const std::string readme = ReadText(kSource + "/README.md");
  const std::regex install(R"(apt-get install -y ([^\n]*))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, install)) << "README has no apt-get install command";
  const std::string command = m[1];
  const bool uses_list = command.find("$(scripts/packages.sh build)") != std::string::npos;
  const std::set<std::string> readme_packages = uses_list ? packages : Words(command);

  for (const std::string& r : required) {
    SCOPED_TRACE(r);
    auto provider = kProviders.find(r);
    ASSERT_NE(provider, kProviders.end())
        << "CMakeLists.txt requires " << r << ": add its Debian package to kProviders and to "
        << "scripts/packages.sh";
    if (provider->second.empty()) continue;
    EXPECT_TRUE(packages.count(provider->second))
        << "scripts/packages.sh lacks " << provider->second;
    EXPECT_TRUE(readme_packages.count(provider->second))
        << "README's install command lacks " << provider->second;
  }
  for (const char* tool : {"cmake", "g++", "make", "fuse3"}) {
    EXPECT_TRUE(readme_packages.count(tool)) << "README's install command lacks " << tool;
  }
}

}  // namespace
}  // namespace ckptfs
