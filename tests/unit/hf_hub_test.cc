// hf:// URLs and the token lookup (core/source/hf_hub.h). The Hub itself is met in the mount
// tests (tests/mount/hf_mount_test.cc), through scripts/wan_server.py.
#include "core/source/hf_hub.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/source/hf_api.h"

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

TEST(HfTreeTest, APageOfTheListing) {
  HfTree tree;
  const std::string page = R"([
    {"type": "directory", "oid": "1", "size": 0, "path": "ckpt"},
    {"type": "file", "oid": "abc", "size": 12, "path": "ckpt/config.json"},
    {"type": "file", "oid": "def", "size": 4096, "path": "model.safetensors",
     "lfs": {"oid": "0123", "size": 4096, "pointerSize": 134}, "xetHash": "x"},
    {"type": "file", "oid": "9", "size": 1, "path": "../escape"},
    {"type": "file", "oid": "9", "size": 1, "path": "a//b"}])";
  ASSERT_TRUE(AddHfTreePage(page, "hf://acme/m", tree).ok());
  ASSERT_EQ(tree.files.size(), 2u);
  EXPECT_EQ(tree.files[0].path, "ckpt/config.json");
  EXPECT_EQ(tree.files[0].sha256, "");
  EXPECT_EQ(tree.files[1].sha256, "0123");
  EXPECT_EQ(tree.dirs, std::vector<std::string>{"ckpt"});
  EXPECT_EQ(tree.left_out.size(), 2u);
}

TEST(HfTreeTest, AListingThatLiesIsRefusedNamingTheRepo) {
  for (const char* page : {
           R"({"not": "a list"})",
           R"([{"type": "file", "path": "x.bin"}])",              // no size
           R"([{"type": "file", "path": "x.bin", "size": -1}])",  // a negative size
           R"([{"type": "file", "path": "x.bin", "size": 10,
                "lfs": {"oid": "00", "size": 11}}])",             // LFS of another size
           R"([{"path": "x.bin", "size": 1}])",                   // no type
           "[",
       }) {
    HfTree tree;
    const Status status = AddHfTreePage(page, "hf://acme/m", tree);
    EXPECT_EQ(status.code(), Status::Code::kCorruption) << page;
    EXPECT_NE(status.message().find("hf://acme/m"), std::string::npos) << status.message();
  }
}

TEST(HfTreeTest, NextPageLink) {
  EXPECT_EQ(HfNextLink(""), "");
  EXPECT_EQ(HfNextLink(R"(<https://huggingface.co/api/models/a/b/tree/x?cursor=Q>; rel="next")"),
            "https://huggingface.co/api/models/a/b/tree/x?cursor=Q");
  EXPECT_EQ(HfNextLink(R"(<https://h/prev>; rel="prev", <https://h/next>; rel="next")"),
            "https://h/next");
  EXPECT_EQ(HfNextLink(R"(<https://h/last>; rel="last")"), "");
}

// The token goes with every page: a next page (or a redirect) on another origin must not
// count as the endpoint's.
TEST(HfTreeTest, OnlyTheEndpointsOwnOriginIsTheEndpoint) {
  HfApi api;
  api.endpoint = "https://huggingface.co";
  EXPECT_TRUE(api.OnEndpoint("https://huggingface.co/api/models/a/b/tree/x?cursor=1"));
  EXPECT_TRUE(api.OnEndpoint("https://HuggingFace.co/x"));
  EXPECT_FALSE(api.OnEndpoint("http://huggingface.co/x"));
  EXPECT_FALSE(api.OnEndpoint("https://huggingface.co:8443/x"));
  EXPECT_FALSE(api.OnEndpoint("https://huggingface.co.evil.example/x"));
  EXPECT_FALSE(api.OnEndpoint("https://huggingface.co@evil.example/x"));
  EXPECT_FALSE(api.OnEndpoint("https://cdn-lfs.huggingface.co/x"));
  EXPECT_FALSE(api.OnEndpoint("/relative"));
}

}  // namespace
}  // namespace ckptfs
