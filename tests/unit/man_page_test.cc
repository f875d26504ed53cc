// The man page (docs/ckptfs.1, configured by the build) without FUSE or the binary:
// it renders at 80 columns with no warning, has the peers' sections, and its FILES names
// the paths the code uses (fs/log.h's FallbackLogPath, core/crc/zip_crc.h's
// CrcSidecarDir), so a moved file cannot leave the page behind. CliTest.ManPage checks
// the page against the options `ckptfs CMD --help` lists.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "core/crc/zip_crc.h"
#include "fs/log.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;

struct Rendered {
  int exit_code = -1;
  std::string out;
  std::string err;
};

bool HaveProgram(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

// Runs `command` under sh; stdout and stderr apart.
Rendered Run(const std::string& command) {
  char err_path[] = "/tmp/ckptfs-man-page-test.XXXXXX";
  const int err_fd = ::mkstemp(err_path);
  if (err_fd < 0) return {};
  ::close(err_fd);
  Rendered r;
  FILE* p = ::popen((command + " 2>'" + err_path + "'").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  fs::remove(err_path);
  return r;
}

// The page as a reader sees it at 80 columns, with warnings on stderr: man(1) as users run
// it, else groff (what man runs) with the same line length and no bold or underline.
std::optional<Rendered> Render(const std::string& page) {
  if (HaveProgram("man")) {
    return Run("MANWIDTH=80 MANPAGER=cat man --warnings -l '" + page + "'");
  }
  if (HaveProgram("groff")) {
    return Run("groff -man -Tutf8 -rLL=80n -ww -P-cbou '" + page + "'");
  }
  return std::nullopt;
}

class ManPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(CKPTFS_MAN_PAGE)) << CKPTFS_MAN_PAGE << " (configured by cmake)";
    std::optional<Rendered> r = Render(CKPTFS_MAN_PAGE);
    if (!r) GTEST_SKIP() << "neither man(1) nor groff(1) to render the page (man-db, groff)";
    ASSERT_EQ(r->exit_code, 0) << r->err;
    rendered_ = *r;
  }
  Rendered rendered_;
};

TEST_F(ManPageTest, RendersAt80ColumnsWithoutWarningsWithEverySection) {
  EXPECT_EQ(rendered_.err, "") << "the renderer warned";
  std::istringstream lines(rendered_.out);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    // Columns, not bytes: the renderer writes a few UTF-8 characters (hyphens, quotes).
    size_t columns = 0;
    for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
    EXPECT_LE(columns, 80u) << "line " << number << " is wider than 80 columns: " << line;
  }
  for (const char* section :
       {"NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "MOUNT OPTIONS", "ENVIRONMENT",
        "FILES", "EXIT STATUS", "EXAMPLES", "FSTAB", "SYSTEMD", "SEE ALSO"}) {
    EXPECT_NE(rendered_.out.find(std::string("\n") + section + "\n"), std::string::npos)
        << "no section " << section;
  }
  // Every subcommand, and the form mount(8) runs, in the SYNOPSIS.
  const std::string synopsis = rendered_.out.substr(0, rendered_.out.find("\nDESCRIPTION\n"));
  for (const char* form : {"ckptfs mount ", "ckptfs SOURCE MOUNTPOINT", "ckptfs umount ",
                           "ckptfs inspect ", "ckptfs verify ", "ckptfs pack "}) {
    EXPECT_NE(synopsis.find(form), std::string::npos) << "SYNOPSIS lacks " << form;
  }
  // Configured: no @VAR@ left for the reader.
  EXPECT_EQ(rendered_.out.find("@CMAKE_"), std::string::npos);
  EXPECT_EQ(rendered_.out.find("@CKPTFS_"), std::string::npos);
}

// The FILES section, from its heading to the next (a line starting with a capital letter:
// the body is indented).
std::string FilesSection(const std::string& page) {
  const size_t start = page.find("\nFILES\n");
  if (start == std::string::npos) return "";
  size_t nl = page.find('\n', start + 1);
  while (nl != std::string::npos && nl + 1 < page.size() &&
         !(page[nl + 1] >= 'A' && page[nl + 1] <= 'Z')) {
    nl = page.find('\n', nl + 1);
  }
  return page.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
}

// Replaces the first `from` in `s` with `to`.
std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST_F(ManPageTest, FilesNamesTheLogFilesTheDaemonFallsBackTo) {
  const std::string files = FilesSection(rendered_.out);
  ASSERT_FALSE(files.empty());
  // Placeholders the page spells as a reader would type them.
  const std::string xdg = Replace(FallbackLogPath(0, "/home/u", "/XDG"), "/XDG", "$XDG_STATE_HOME");
  const std::string user = Replace(FallbackLogPath(1000, "/home/u", std::nullopt), "/home/u", "~");
  const std::string root = FallbackLogPath(0, "/root", std::nullopt);
  for (const std::string& path : {xdg, user, root}) {
    EXPECT_NE(files.find(path), std::string::npos) << "FILES lacks the log file " << path;
  }
}

// Sets an environment variable for the life of the object, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(ManPageTest, FilesNamesTheCrcSidecarDirectories) {
  const std::string files = FilesSection(rendered_.out);
  ASSERT_FALSE(files.empty());
  EXPECT_NE(files.find(CrcSidecarDir("DIR")), std::string::npos) << "FILES lacks DIR/crc";
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/XDG");
    const std::string path = Replace(CrcSidecarDir(""), "/XDG", "$XDG_CACHE_HOME");
    EXPECT_NE(files.find(path), std::string::npos) << "FILES lacks " << path;
  }
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  {
    // Without a home, as for root: the system cache.
    ScopedEnv home("HOME", nullptr);
    const std::string path = CrcSidecarDir("");
    EXPECT_NE(files.find(path), std::string::npos) << "FILES lacks " << path;
  }
  if (::geteuid() != 0) {
    ScopedEnv home("HOME", "/home/u");
    const std::string path = Replace(CrcSidecarDir(""), "/home/u", "~");
    EXPECT_NE(files.find(path), std::string::npos) << "FILES lacks " << path;
  } else {
    EXPECT_NE(files.find("~/.cache/ckptfs/crc"), std::string::npos)
        << "FILES lacks ~/.cache/ckptfs/crc (a user's; this test runs as root)";
  }
}

}  // namespace
}  // namespace ckptfs
