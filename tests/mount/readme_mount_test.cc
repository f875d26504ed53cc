// README's commands, run as written (issue 24): every fenced ```sh block that follows a
// line `<!-- test -->` in README.md runs, in order, under `bash -euo pipefail` in one
// scratch directory, as a user who followed README's Install would run it in one shell
// (what a block sets, PY, the next block sees): `ckptfs` first on PATH, then a `python3`
// without numpy (issue 38: a pyenv or virtualenv python first on PATH is common, and the
// Tour must name the python it needs), `scripts/` of this tree at hand.
// The example servers README names are made real: nginx serves the scratch directory
// for https://models.example.com/, and s3rver (behind the SigV4 proxy) stands in for the
// endpoint http://s3.example.com:9000 with bucket `models`, holding the demo checkpoint
// `llama/` once a block has made it; scripts/wan_server.py's Hub is HF_ENDPOINT, with
// that checkpoint as repo `example/llama`. A block that fails fails the test, naming its README
// line. Example hosts are placeholders, never private addresses a reader might reach.
#include <regex>

#include "mount_harness.h"
#include "remote_harness.h"
#include "wan_harness.h"

namespace ckptfs::mount_test {
namespace {

struct ReadmeBlock {
  int line;          // of the opening fence, 1-based
  std::string text;  // the commands, as written
};

// The ```sh blocks of `readme` that the line right before marks `<!-- test -->`.
std::vector<ReadmeBlock> TestedBlocks(const std::string& readme) {
  std::vector<ReadmeBlock> blocks;
  std::istringstream in(readme);
  std::string line, previous;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line == "```sh" && previous == "<!-- test -->") {
      ReadmeBlock block{number, ""};
      while (std::getline(in, line) && line != "```") {
        ++number;
        block.text += line + "\n";
      }
      ++number;
      blocks.push_back(std::move(block));
    }
    previous = line;
  }
  return blocks;
}

// `text` with every `from` replaced by `to`.
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

constexpr char kHttpExample[] = "https://models.example.com/";
constexpr char kS3EndpointExample[] = "http://s3.example.com:9000";
constexpr char kS3BucketExample[] = "s3://models/";
constexpr milliseconds kBlockTimeout = seconds(300);
constexpr char kHubCommit[] = "c0ffee0000000000000000000000000000000001";

class ReadmeTest : public MountFixture {};

TEST_F(ReadmeTest, MarkedCommandsRunAsWritten) {
  const std::vector<ReadmeBlock> blocks = TestedBlocks(ReadTextFile(ScriptPath("README.md")));
  // The tour: a sharded checkpoint, a training file, a run, pack/verify/remote.
  ASSERT_GE(blocks.size(), 4u) << "README.md lost its tested blocks (<!-- test --> before ```sh)";
  if (!HasTorch()) GTEST_SKIP() << "README's tour loads with torch: " << kPython << " lacks it";
  for (const std::string& reason :
       {NginxServer::UnavailableReason(), S3Server::UnavailableReason()}) {
    if (!reason.empty()) GTEST_SKIP() << "README's tour mounts over HTTP and S3: " << reason;
  }

  const std::string work = scratch_->MakeDir("work");
  const std::string bin = scratch_->MakeDir("bin");
  fs::create_directory_symlink(ScriptPath("scripts"), work + "/scripts");
  fs::create_symlink(kCkptfs, bin + "/ckptfs");
  // Debian's python without its site directories: no numpy, no torch.
  std::ofstream(bin + "/python3") << "#!/bin/sh\nexec " << kPython << " -S \"$@\"\n";
  fs::permissions(bin + "/python3", fs::perms::owner_all);
  ScopedEnv env;
  env.Set("PATH", (bin + ":" + getenv("PATH")).c_str());
  const ProcessResult numpy = RunProcess({"python3", "-c", "import numpy"}, kCheckTimeout);
  ASSERT_NE(numpy.exit_code, 0) << "the python3 first on PATH has numpy: " << numpy.Describe();
  mounts_.push_back(work + "/mnt");  // teardown unmounts it should a block stop half-way

  NginxServer http(work, scratch_->Path("nginx"));
  ASSERT_EQ(http.Start(), "");
  S3Server s3(scratch_->Path("s3"));
  ASSERT_EQ(s3.Start(), "");
  s3.SetClientEnv(env);
  bool uploaded = false;
  WanServer hub(scratch_->Path("wan"));

  for (const ReadmeBlock& block : blocks) {
    SCOPED_TRACE("README.md line " + std::to_string(block.line) + ":\n" + block.text);
    std::string script = ReplaceAll(block.text, kHttpExample, http.Url(""));
    script = ReplaceAll(script, kS3EndpointExample, s3.Endpoint());
    script = ReplaceAll(script, kS3BucketExample, std::string("s3://") + S3Server::kBucket + "/");
    if (!uploaded && script.find("s3://") != std::string::npos) {
      ASSERT_TRUE(fs::exists(work + "/llama")) << "no block before this one made llama/";
      ASSERT_EQ(s3.Upload(work + "/llama", "llama/"), "");
      uploaded = true;
    }
    if (hub.Port("hub") == 0 && script.find("hf://") != std::string::npos) {
      ASSERT_TRUE(fs::exists(work + "/llama")) << "no block before this one made llama/";
      const std::string repo = scratch_->Path("hub/example/llama");
      fs::create_directories(repo + "/refs");
      fs::create_directories(repo + "/commits");
      fs::copy(work + "/llama", repo + "/commits/" + kHubCommit, fs::copy_options::recursive);
      std::ofstream(repo + "/refs/main") << kHubCommit << "\n";
      ASSERT_EQ(hub.Start({"--hub", scratch_->Path("hub")}), "");
      env.Set("HF_ENDPOINT", hub.Url("hub").c_str());
      env.Set("HF_TOKEN_PATH", scratch_->Path("no-hf-token").c_str());
    }
    // One shell, as the user's: the variables earlier blocks set are set again first, and
    // those this block sets are kept for the next.
    const std::string vars = scratch_->Path("readme-vars");
    const std::string shell =
        "cd \"$0\"\n"
        "if [ -f \"$1\" ]; then . \"$1\"; fi\n"
        "__readme_seen=\" $(compgen -v | tr '\\n' ' ') \"\n" +
        script +
        "\nfor __v in $(compgen -v); do\n"
        "  case \"$__readme_seen\" in *\" $__v \"*) continue ;; esac\n"
        "  case $__v in __*) continue ;; esac\n"
        "  declare -p \"$__v\"\n"
        "done >> \"$1\"\n";
    const ProcessResult r =
        RunProcess({"bash", "-euo", "pipefail", "-c", shell, work, vars}, kBlockTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    std::cout << r.out;
    // Each block unmounts what it mounted, as README tells the user to.
    EXPECT_FALSE(IsMounted(work + "/mnt")) << "the block left " << work << "/mnt mounted";
  }
}

// README's example hosts are placeholders (example.com), never private addresses: a reader
// on a network that has 10.0.0.5 would send it their credentials.
TEST(ReadmeHostsTest, ExampleHostsArePlaceholders) {
  const std::regex private_address(
      R"(\b(10\.\d+\.\d+\.\d+|192\.168\.\d+\.\d+|172\.(1[6-9]|2\d|3[01])\.\d+\.\d+)\b)");
  for (const std::string doc : {"README.md", "docs/boot.md", "docs/remote.md", "docs/ckptfs.1"}) {
    const std::string text = ReadTextFile(ScriptPath(doc));
    ASSERT_FALSE(text.empty()) << doc;
    std::smatch m;
    EXPECT_FALSE(std::regex_search(text, m, private_address))
        << doc << " names the private address " << m.str() << "; use a placeholder host";
  }
  const std::string readme = ReadTextFile(ScriptPath("README.md"));
  EXPECT_NE(readme.find(kHttpExample), std::string::npos);
  EXPECT_NE(readme.find(kS3EndpointExample), std::string::npos);
}

// The marker is found only where it stands right before a ```sh fence.
TEST(ReadmeBlocksTest, OnlyMarkedShellBlocks) {
  const auto blocks = TestedBlocks(
      "intro\n<!-- test -->\n```sh\nls\nls -l\n```\n```sh\nnot marked\n```\n<!-- test -->\n"
      "\n```sh\nmarker not adjacent\n```\n<!-- test -->\n```\nno language\n```\n");
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].line, 3);
  EXPECT_EQ(blocks[0].text, "ls\nls -l\n");
}

}  // namespace
}  // namespace ckptfs::mount_test
