// hf:// URLs and the token lookup (core/source/hf_hub.h). The Hub itself is met in the mount
// tests (tests/mount/hf_mount_test.cc), through scripts/wan_server.py.
#include "core/source/hf_hub.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace ckptfs {
namespace {

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "hf_hub_test.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(HfUrlTest, RepoRevisionAndPath) {
  auto url = ParseHfUrl("hf://acme/llama-3.1_8B");
  ASSERT_TRUE(url.ok()) << url.status().message();
  EXPECT_EQ(url->repo, "acme/llama-3.1_8B");
  EXPECT_EQ(url->revision, "main");
  EXPECT_EQ(url->path, "");
  EXPECT_EQ(url->Shown(), "hf://acme/llama-3.1_8B");

  url = ParseHfUrl("hf://acme/run@refs%2Fpr%2F3/checkpoint-500/");
  ASSERT_TRUE(url.ok()) << url.status().message();
  EXPECT_EQ(url->revision, "refs/pr/3");
  EXPECT_EQ(url->path, "checkpoint-500");
  EXPECT_EQ(url->Shown(), "hf://acme/run@refs%2Fpr%2F3/checkpoint-500");
  EXPECT_EQ(url->Shown("0123456789abcdef0123456789abcdef01234567"),
            "hf://acme/run@0123456789abcdef0123456789abcdef01234567/checkpoint-500");

  url = ParseHfUrl("hf://acme/m/sub/model.safetensors");
  ASSERT_TRUE(url.ok()) << url.status().message();
  EXPECT_EQ(url->revision, "main");
  EXPECT_EQ(url->path, "sub/model.safetensors");
}

TEST(HfUrlTest, RefusesWhatIsNoRepoOrPath) {
  for (const char* bad :
       {"hf://", "hf://acme", "hf://acme/", "hf://../x", "hf://acme/x y", "hf://acme/m@",
        "hf://acme/m@a%0Ab", "hf://acme/m/../etc", "hf://acme/m/a//b", "hf://acme/m/%2E%2E/x",
        "hf://acme/m@v%ZZ", "http://acme/m"}) {
    auto url = ParseHfUrl(bad);
    EXPECT_FALSE(url.ok()) << bad;
    if (!url.ok()) {
      EXPECT_EQ(url.status().code(), Status::Code::kInvalidArgument) << bad;
      EXPECT_EQ(url.status().message().find('\n'), std::string::npos) << bad;
    }
  }
}

// The order huggingface_hub's get_token reads them in, and nothing else in the process's
// environment leaks in.
class HfTokenTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HOME"}) {
      ::unsetenv(name);
    }
    home_ = dir_.path() + "/home";
    std::filesystem::create_directories(home_ + "/.cache/huggingface");
    const char* old_home = std::getenv("HOME");
    saved_home_ = old_home ? old_home : "";
    ::setenv("HOME", home_.c_str(), 1);
  }
  void TearDown() override {
    for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HOME"}) {
      ::unsetenv(name);
    }
    ::setenv("HOME", saved_home_.c_str(), 1);
  }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  TempDir dir_;
  std::string home_, saved_home_;
};

TEST_F(HfTokenTest, EnvironmentThenTokenPathThenHfHomeThenHome) {
  EXPECT_EQ(FindHfToken().value(), "");  // none: anonymous
  Write(home_ + "/.cache/huggingface/token", "hf_home\n");
  EXPECT_EQ(FindHfToken().value(), "hf_home");
  ::setenv("HF_HOME", dir_.path().c_str(), 1);
  Write(dir_.path() + "/token", "  hf_hfhome  \n");
  EXPECT_EQ(FindHfToken().value(), "hf_hfhome");
  ::setenv("HF_TOKEN_PATH", (dir_.path() + "/elsewhere").c_str(), 1);
  EXPECT_EQ(FindHfToken().value(), "") << "HF_TOKEN_PATH names the file, even a missing one";
  Write(dir_.path() + "/elsewhere", "hf_path");
  EXPECT_EQ(FindHfToken().value(), "hf_path");
  ::setenv("HUGGING_FACE_HUB_TOKEN", "hf_old", 1);
  EXPECT_EQ(FindHfToken().value(), "hf_old");
  ::setenv("HF_TOKEN", "hf_env", 1);
  EXPECT_EQ(FindHfToken().value(), "hf_env");
}

TEST_F(HfTokenTest, ATokenThatWouldBreakAHeaderIsRefusedWithoutShowingIt) {
  ::setenv("HF_TOKEN", "hf_abc\r\nX-Evil: 1", 1);
  auto token = FindHfToken();
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().message().find("hf_abc"), std::string::npos) << token.status().message();
  ::unsetenv("HF_TOKEN");
  Write(home_ + "/.cache/huggingface/token", "hf a b\n");
  token = FindHfToken();
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("/.cache/huggingface/token"), std::string::npos);
}

TEST(HfEndpointTest, FlagThenEnvironmentThenTheHub) {
  ::unsetenv("HF_ENDPOINT");
  EXPECT_EQ(HfEndpoint({}), "https://huggingface.co");
  ::setenv("HF_ENDPOINT", "https://hub.example.com/", 1);
  EXPECT_EQ(HfEndpoint({}), "https://hub.example.com");
  EXPECT_EQ(HfEndpoint({"http://127.0.0.1:8080"}), "http://127.0.0.1:8080");
  ::unsetenv("HF_ENDPOINT");
}

}  // namespace
}  // namespace ckptfs
