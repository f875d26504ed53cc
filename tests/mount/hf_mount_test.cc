// hf:// sources against scripts/wan_server.py's Hub and CDN (wan_harness.h), which answer
// as huggingface_hub's file_download.py and hf_api.py say the real Hub does: the API on
// one host, LFS files redirected to a CDN host with a signed query, errors in
// X-Error-Code and X-Error-Message. Each test builds a repo on disk
// (HUB/ORG/NAME/refs/BRANCH holding a commit sha, HUB/ORG/NAME/commits/SHA/ its files).

#include <fstream>

#include "wan_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr char kShaA[] = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
constexpr char kShaB[] = "b2c3d4e5f60718293a4b5c6d7e8f901234567890";
constexpr char kToken[] = "hf_ckptfsTestTokenAbc123";      // the server takes it
constexpr char kOtherToken[] = "hf_ckptfsSomeoneElse456";  // valid, but not let into repos
constexpr char kBadToken[] = "hf_notATokenTheHubKnows789";

void WriteTextFile(const std::string& path, const std::string& text);

class HfMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    hub_ = scratch_->MakeDir("hub");
    server_ = std::make_unique<WanServer>(scratch_->Path("wan"));
    // Nothing of the machine's own Hub set-up (a token in ~/.cache/huggingface) may reach
    // a test: the token file is the scratch directory's.
    for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HOME"}) {
      ::unsetenv(name);
    }
    ::setenv("HF_TOKEN_PATH", scratch_->Path("hf-token").c_str(), 1);
  }

  void TearDown() override {
    for (const char* name : {"HF_TOKEN", "HF_TOKEN_PATH"}) ::unsetenv(name);
    server_.reset();
    MountFixture::TearDown();
  }

  // The Hub with a small network shape, and --page-size 3 so that every tree listing of
  // these repos takes several pages.
  void StartHub(const std::vector<std::string>& extra = {}) {
    ASSERT_EQ(
        server_->Start(Concat({"--hub", hub_, "--latency-ms", "5", "--rate", "50", "--page-size",
                               "3", "--tokens", std::string(kToken) + "," + kOtherToken},
                              extra)),
        "");
  }
  std::string Endpoint() const {
    return "http://127.0.0.1:" + std::to_string(server_->Port("hub"));
  }

  // HUB/ORG/NAME/commits/SHA, made by `make` (it gets the directory), and `branch` -> SHA.
  template <typename Make>
  std::string AddCommit(const std::string& repo, const std::string& sha, Make make,
                        const std::string& branch = "main") {
    const std::string dir = hub_ + "/" + repo + "/commits/" + sha;
    make(dir);
    SetRef(repo, branch, sha);
    return dir;
  }
  void SetRef(const std::string& repo, const std::string& branch, const std::string& sha) {
    const fs::path ref = hub_ + "/" + repo + "/refs/" + branch;
    fs::create_directories(ref.parent_path());  // a branch may hold '/'
    WriteTextFile(ref, sha + "\n");
  }
  // A 3-shard safetensors checkpoint with its index and a config.json.
  std::string AddCheckpoint(const std::string& repo, const std::string& sha,
                            const std::string& seed = "1") {
    return AddCommit(repo, sha, [&](const std::string& dir) {
      Generate(dir,
               {"--kind", "mixed", "--shards", "3", "--total-bytes", "6000000", "--seed", seed});
    });
  }

  // `ckptfs mount hf://...` that is to fail: its output.
  ProcessResult MountFails(const std::string& source) {
    const std::string mountpoint = scratch_->MakeDir("refused");
    mounts_.push_back(mountpoint);
    return RunProcess({kCkptfs, "mount", "--endpoint", Endpoint(), source, mountpoint},
                      kMountTimeout);
  }

  std::string hub_;
  std::unique_ptr<WanServer> server_;
};

void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// Every line of `text` that holds `secret`.
std::string LinesHolding(const std::string& text, const std::string& secret) {
  std::istringstream in(text);
  std::string found;
  for (std::string line; std::getline(in, line);) {
    if (line.find(secret) != std::string::npos) found += line + "\n";
  }
  return found;
}

// A repo mounts at the commit its branch names, reads as its files do, lists through every
// page of the tree, names the commit in inspect and stats.json, and sends the token to the
// Hub on every request but to the CDN on none.
TEST_F(HfMountTest, MountsARepoAtItsCommitWithTheTokenOnlyOnTheHub) {
  const std::string source = AddCheckpoint("acme/tiny", kShaA);
  ASSERT_NO_FATAL_FAILURE(StartHub());
  WriteTextFile(scratch_->Path("hf-token"), std::string(kToken) + "\n");  // the token file
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount("hf://acme/tiny", mountpoint, nullptr, {"--endpoint", Endpoint()}));
  for (const char* check : kMountChecks) RunCheck(check, {source, mountpoint});

  const std::string stats = ReadTextFile(mountpoint + "/.ckptfs/stats.json");
  EXPECT_NE(stats.find(std::string("hf://acme/tiny@") + kShaA), std::string::npos) << stats;
  const ProcessResult inspect =
      Ckptfs({"inspect", "--endpoint", Endpoint(), "hf://acme/tiny"}, seconds(60));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find(std::string("source   hf://acme/tiny@") + kShaA), std::string::npos)
      << inspect.out;

  const std::vector<WanRequest> requests = server_->Requests();
  int tree_pages = 0, cdn_reads = 0;
  for (const WanRequest& r : requests) {
    if (r.listener == "hub") {
      EXPECT_TRUE(r.auth) << "a request to the Hub without the token: " << r.path;
      if (r.path.find("/tree/") != std::string::npos) ++tree_pages;
      // After the revision, every request names the commit, never the branch.
      if (r.path.find("/revision/") == std::string::npos) {
        EXPECT_NE(r.path.find(kShaA), std::string::npos) << r.path;
      }
    } else if (r.listener == "cdn") {
      EXPECT_FALSE(r.auth) << "the token went to the CDN: " << r.path;
      cdn_reads += r.status == 206 || r.status == 200;
    }
  }
  EXPECT_GE(tree_pages, 3) << "the tree listing should take several pages of 3";
  EXPECT_GT(cdn_reads, 0) << "the shards should have been read from the CDN";

  // The token is in no file the mount or the daemon shows.
  EXPECT_EQ(LinesHolding(ReadTextFile("/proc/mounts"), kToken), "");
  EXPECT_EQ(LinesHolding(stats, kToken), "");
  EXPECT_EQ(LinesHolding(inspect.out + inspect.err, kToken), "");
}

// A branch that moves while mounted changes nothing the mount shows: every read asks for
// the commit resolved at mount.
TEST_F(HfMountTest, ABranchMovedMidMountNeverMixesCommits) {
  const std::string first = AddCheckpoint("acme/moving", kShaA, "1");
  AddCheckpoint("acme/moving", kShaB, "2");
  SetRef("acme/moving", "main", kShaA);
  ASSERT_NO_FATAL_FAILURE(StartHub());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(
      Mount("hf://acme/moving", mountpoint, nullptr, {"--endpoint", Endpoint()}));
  SetRef("acme/moving", "main", kShaB);  // training pushed again
  // Nothing was read but the headers: every byte below is read after the move.
  RunCheck("check_merged.py", {first, mountpoint});
  RunCheck("check_shards.py", {first, mountpoint});
}

// A revision holding '/' (written %2F), and a path to one folder of the repo.
TEST_F(HfMountTest, RevisionAndSubfolder) {
  const std::string source = AddCommit(
      "acme/nested", kShaA,
      [&](const std::string& dir) {
        Generate(dir + "/inner", {"--kind", "mixed", "--shards", "2", "--total-bytes", "3000000"});
        WriteTextFile(dir + "/README.md", "# nested\n");
      },
      "refs/pr/3");
  ASSERT_NO_FATAL_FAILURE(StartHub());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount("hf://acme/nested@refs%2Fpr%2F3/inner", mountpoint, nullptr,
                                {"--endpoint", Endpoint()}));
  RunCheck("check_merged.py", {source + "/inner", mountpoint});
  EXPECT_FALSE(fs::exists(mountpoint + "/README.md")) << "only the folder asked for is shown";
}

// `inspect` lists SOURCE once, as a mount does: one revision lookup and one tree listing
// (its pages) answer both whether it is a run and which checkpoint it holds.
TEST_F(HfMountTest, InspectListsTheRepoOnce) {
  AddCheckpoint("acme/tiny", kShaA);
  ASSERT_NO_FATAL_FAILURE(StartHub());
  const ProcessResult r =
      RunProcess({kCkptfs, "inspect", "--endpoint", Endpoint(), "hf://acme/tiny"}, kMountTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("hf://acme/tiny@" + std::string(kShaA)), std::string::npos) << r.out;
  size_t revisions = 0, first_pages = 0;
  for (const WanRequest& q : server_->Requests()) {
    if (q.listener != "hub") continue;
    revisions += q.path.find("/revision/") != std::string::npos;
    first_pages +=
        q.path.find("/tree/") != std::string::npos && q.query.find("cursor") == std::string::npos;
  }
  EXPECT_EQ(revisions, 1u) << "the revision is resolved once";
  EXPECT_EQ(first_pages, 1u) << "the tree is listed once";
}

// Each refusal is one line naming the repo, before any daemon starts, exit 2.
TEST_F(HfMountTest, EachRefusalIsOneLine) {
  AddCheckpoint("acme/public", kShaA);
  AddCheckpoint("acme/private", kShaA);
  WriteTextFile(hub_ + "/acme/private/access.json",
                std::string(R"({"private": true, "tokens": [")") + kToken + "\"]}");
  AddCheckpoint("acme/gated", kShaA);
  WriteTextFile(hub_ + "/acme/gated/access.json",
                std::string(R"({"gated": true, "tokens": [")") + kToken + "\"]}");
  ASSERT_NO_FATAL_FAILURE(StartHub());
  struct Case {
    const char* token;  // HF_TOKEN, or null for none
    std::string source;
    std::string says;
  };
  const std::vector<Case> cases = {
      {nullptr, "hf://acme/private", "set HF_TOKEN"},
      {kBadToken, "hf://acme/public", "does not accept the token"},
      {kOtherToken, "hf://acme/gated", "accept its terms"},
      {nullptr, "hf://acme/gated", "accept its terms"},
      {kToken, "hf://acme/missing", "repository acme/missing not found"},
      {kToken, "hf://acme/public@no-such-branch", "revision \"no-such-branch\" not found"},
      {kToken, "hf://acme/public/no/such/folder", "no file or folder \"no/such/folder\""},
      {nullptr, "hf://acme", "no repository name"},
      {nullptr, "hf://acme/x y", "not a repository name"},
  };
  for (const Case& c : cases) {
    if (c.token) {
      ::setenv("HF_TOKEN", c.token, 1);
    } else {
      ::unsetenv("HF_TOKEN");
    }
    const ProcessResult r = MountFails(c.source);
    EXPECT_EQ(r.exit_code, 2) << r.Describe();
    EXPECT_EQ(r.out, "") << r.Describe();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.Describe();
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.source << ": " << r.err;
    for (const char* token : {kToken, kOtherToken, kBadToken}) {
      EXPECT_EQ(r.err.find(token), std::string::npos) << "the token is shown: " << r.err;
    }
  }
  ::unsetenv("HF_TOKEN");
  // The private repo with the token it lets in: mounts.
  ::setenv("HF_TOKEN", kToken, 1);
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(
      Mount("hf://acme/private", mountpoint, nullptr, {"--endpoint", Endpoint()}));
}

// An fstab line `hf://ORG/NAME MNT fuse.ckptfs ro,_netdev,nofail,endpoint=...`: what
// mount.fuse3 runs for it, with the token from the token file of the user it runs as.
TEST_F(HfMountTest, AnFstabLineMountsTheRepo) {
  const std::string source = AddCheckpoint("acme/boot", kShaA);
  WriteTextFile(hub_ + "/acme/boot/access.json",
                std::string(R"({"private": true, "tokens": [")") + kToken + "\"]}");
  WriteTextFile(scratch_->Path("hf-token"), kToken);
  ASSERT_NO_FATAL_FAILURE(StartHub());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  const ProcessResult r = RunProcess(
      {kCkptfs, "hf://acme/boot", mountpoint, "-o", "rw,nofail,_netdev,endpoint=" + Endpoint()},
      kMountTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_TRUE(IsMounted(mountpoint));
  EXPECT_EQ(ReadTextFile(mountpoint + "/config.json"), ReadTextFile(source + "/config.json"));
  EXPECT_EQ(LinesHolding(ReadTextFile("/proc/mounts"), kToken), "");
  // The mount table names the commit mounted.
  EXPECT_NE(
      ReadTextFile("/proc/mounts").find(std::string("hf://acme/boot@") + kShaA + " " + mountpoint),
      std::string::npos)
      << ReadTextFile("/proc/mounts");
}

// A signed CDN URL that expired is asked for again, and the read succeeds.
TEST_F(HfMountTest, AnExpiredSignedUrlIsResolvedAgain) {
  const std::string source = AddCheckpoint("acme/expiring", kShaA);
  ASSERT_NO_FATAL_FAILURE(StartHub({"--sign-ttl", "1"}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(
      Mount("hf://acme/expiring", mountpoint, nullptr, {"--endpoint", Endpoint()}));
  std::this_thread::sleep_for(milliseconds(2500));  // every URL signed at mount has expired
  RunCheck("check_shards.py", {source, mountpoint});
  int expired = 0;
  for (const WanRequest& r : server_->Requests()) expired += r.listener == "cdn" && r.status == 403;
  EXPECT_GT(expired, 0) << "the test should have met an expired URL";
}

// Trainer's hub_strategy="checkpoint"/"all_checkpoints" pushes checkpoint-N/ folders: the
// repo mounts as a run, with latest and each checkpoint's views.
TEST_F(HfMountTest, ARepoOfCheckpointFoldersIsARun) {
  const std::string repo = AddCommit("acme/run", kShaA, [&](const std::string& dir) {
    const ProcessResult r =
        RunProcess({kPython, ScriptPath("tests/mount/make_run.py"), "hf", dir, "3"}, seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  });
  ASSERT_NO_FATAL_FAILURE(StartHub());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount("hf://acme/run", mountpoint, nullptr, {"--endpoint", Endpoint()}));
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink(mountpoint + "/latest", ec).string(), "checkpoint-300")
      << ec.message();
  RunCheck("check_merged.py", {repo + "/checkpoint-200", mountpoint + "/views/checkpoint-200"});
  EXPECT_EQ(ReadTextFile(mountpoint + "/checkpoint-100/config.json"),
            ReadTextFile(repo + "/checkpoint-100/config.json"));
}

}  // namespace
}  // namespace ckptfs::mount_test
