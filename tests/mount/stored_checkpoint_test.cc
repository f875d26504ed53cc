// The common checks of a mounted checkpoint, each one test body run over every way of
// storing the checkpoint: the mixed checkpoint (every dtype and awkward name) plain and
// compressed each way ckptfs decodes (KIND), read from a local directory, from nginx over
// HTTP, or from s3rver over S3 (WHERE). The python checks are given the local plain
// checkpoint as what they expect and read the mount with real clients, so every byte is
// compared with bytes no zstd decoder or remote source touched. Tests are named
// CHECK/KIND_WHERE: Kinds/StoredCheckpointTest.MergedSafetensors/seekable_http.
//
// What the tests share is made on first use and kept until TearDownTestSuite: each kind
// generated once, one nginx over all of them, one s3rver with each kind uploaded once
// under KIND/. On first use rather than all in SetUpTestSuite because ctest runs every
// test in a process of its own: there a local test starts no server, and a test of one
// kind generates and uploads only that kind. Without nginx or s3rver (and node) those
// tests skip, saying why; the local ones still run.

#include <map>
#include <tuple>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

struct StorageKind {
  const char* name;
  std::vector<std::string> generator_args;  // given with --from PLAIN
};

void PrintTo(const StorageKind& k, std::ostream* os) { *os << k.name; }

const StorageKind kStorageKinds[] = {
    // The plain checkpoint itself, which every other kind is made from.
    {"plain", {}},
    {"seekable", {"--compress", "seekable", "--frame-size", kFrameSize}},
    {"multiframe", {"--compress", "multiframe", "--frame-size", kFrameSize}},
    // What `zstd` writes by default: one frame per shard, decoded once on first touch.
    {"single", {"--compress", "single"}},
    // A seek table without checksums (flag 0), 1 MiB frames, zstd frame checksums on.
    {"seekable_no_seek_checksums",
     {"--compress", "seekable", "--frame-size", "1M", "--no-seek-checksums", "--frame-checksums"}},
};
const StorageKind& kPlain = kStorageKinds[0];

enum class Where { kLocal, kHttp, kS3 };

const Where kWheres[] = {Where::kLocal, Where::kHttp, Where::kS3};

const char* WhereName(Where where) {
  switch (where) {
    case Where::kLocal:
      return "local";
    case Where::kHttp:
      return "http";
    case Where::kS3:
      return "s3";
  }
  return "?";
}

void PrintTo(Where where, std::ostream* os) { *os << WhereName(where); }

// The suite's checkpoints and servers, each made or started on first use and kept until
// destruction, which stops the servers before removing the checkpoints. A failure is
// kept too: the next test asking gets the same error, quickly.
class SharedStores {
 public:
  // "" if checkpoints can be stored at `where` on this machine, else why not.
  std::string Unavailable(Where where) {
    std::optional<std::string>& reason = unavailable_[where];
    if (!reason) {
      reason = where == Where::kHttp ? NginxServer::UnavailableReason()
               : where == Where::kS3 ? S3Server::UnavailableReason()
                                     : "";
    }
    return *reason;
  }

  // The local directory holding `kind`.
  std::string LocalPath(const StorageKind& kind) const { return dir_.Path(kind.name); }

  // What a client is given to read `kind` stored at `where` (*source), and the options it
  // needs besides (*options); "" once the checkpoint is there, else what went wrong.
  std::string Prepare(const StorageKind& kind, Where where, std::string* source,
                      std::vector<std::string>* options) {
    std::string error = Generated(kind);
    if (!error.empty()) return error;
    options->clear();
    switch (where) {
      case Where::kLocal:
        *source = LocalPath(kind);
        return "";
      case Where::kHttp:
        error = NginxUp();
        *source = error.empty() ? nginx_->Url(std::string(kind.name) + "/") : "";
        return error;
      case Where::kS3:
        error = Uploaded(kind);
        *source = S3Server::Url(std::string(kind.name) + "/");
        if (error.empty()) *options = s3_->ClientOptions();
        return error;
    }
    return "unknown place";
  }

 private:
  // "" once `kind` is generated (plain first: the others are made from it).
  std::string Generated(const StorageKind& kind) {
    if (&kind != &kPlain) {
      const std::string error = Generated(kPlain);
      if (!error.empty()) return error;
    }
    auto [it, inserted] = generated_.try_emplace(kind.name);
    if (inserted) {
      std::vector<std::string> args;
      if (&kind != &kPlain) args = Concat({"--from", LocalPath(kPlain)}, kind.generator_args);
      it->second = GenerateCheckpoint(LocalPath(kind), args);
    }
    return it->second;
  }

  // "" once nginx serves every kind, each at URL/KIND/.
  std::string NginxUp() {
    if (!nginx_error_) {
      nginx_ = std::make_unique<NginxServer>(dir_.path(), dir_.Path("nginx"));
      nginx_error_ = nginx_->Start();
    }
    return *nginx_error_;
  }

  // "" once s3rver has `kind` under KIND/ and the clients' environment is set.
  std::string Uploaded(const StorageKind& kind) {
    if (!s3_error_) {
      s3_ = std::make_unique<S3Server>(dir_.Path("s3"));
      s3_->SetClientEnv(env_);
      s3_error_ = s3_->Start();
    }
    if (!s3_error_->empty()) return *s3_error_;
    auto [it, inserted] = uploaded_.try_emplace(kind.name);
    if (inserted) it->second = s3_->Upload(LocalPath(kind), std::string(kind.name) + "/");
    return it->second;
  }

  // Declared first, so destroyed last: the servers read from it until they stop.
  TempDir dir_;
  std::map<Where, std::optional<std::string>> unavailable_;
  std::map<std::string, std::string> generated_;  // kind -> "" or the error
  std::optional<std::string> nginx_error_;
  std::unique_ptr<NginxServer> nginx_;
  ScopedEnv env_;  // restored after s3rver has stopped
  std::optional<std::string> s3_error_;
  std::unique_ptr<S3Server> s3_;
  std::map<std::string, std::string> uploaded_;  // kind -> "" or the error
};

using StoredParam = std::tuple<StorageKind, Where>;

class StoredCheckpointTest : public MountFixture, public testing::WithParamInterface<StoredParam> {
 protected:
  static void SetUpTestSuite() { stores_ = new SharedStores(); }

  static void TearDownTestSuite() {
    delete stores_;
    stores_ = nullptr;
  }

  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    const auto& [kind, where] = GetParam();
    const std::string unavailable = stores_->Unavailable(where);
    if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    ASSERT_EQ(stores_->Prepare(kind, where, &source_, &options_), "");
    plain_ = stores_->LocalPath(kPlain);
    local_ = stores_->LocalPath(kind);
  }

  // Mounts the checkpoint and runs `script` expecting the plain checkpoint.
  void Check(const std::string& script) {
    const std::string mountpoint = scratch_->MakeDir("mnt");
    ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint, nullptr, options_));
    RunCheck(script, {plain_, mountpoint});
  }

  static SharedStores* stores_;
  std::string plain_;                 // the local plain checkpoint: what every check expects
  std::string local_;                 // the local copy of this kind
  std::string source_;                // what ckptfs is given: local_, or its URL
  std::vector<std::string> options_;  // what ckptfs needs besides (--endpoint)
};

SharedStores* StoredCheckpointTest::stores_ = nullptr;

TEST_P(StoredCheckpointTest, RootListing) { Check("check_root.py"); }

TEST_P(StoredCheckpointTest, NpyPlainAndMmap) { Check("check_npy.py"); }

TEST_P(StoredCheckpointTest, NameEscaping) { Check("check_names.py"); }

TEST_P(StoredCheckpointTest, Xattrs) { Check("check_xattrs.py"); }

TEST_P(StoredCheckpointTest, MergedSafetensors) { Check("check_merged.py"); }

// shards/ shows each shard (decompressed) under its plain name, and no NAME.zst.
TEST_P(StoredCheckpointTest, ShardsDecompressed) { Check("check_shards.py"); }

// 8 threads of random preads (page cache dropped as they go) over the merged file and
// every shard, so frames are decoded (and blocks fetched) concurrently and shared
// through the cache.
TEST_P(StoredCheckpointTest, ConcurrentRandomReads) { Check("check_random_reads.py"); }

// inspect reads only headers, of compressed shards by decoding their first frame(s).
TEST_P(StoredCheckpointTest, Inspect) {
  RunCheck("check_inspect.py", Concat({kCkptfs, local_, source_}, options_));
}

// verify reads and decodes everything (checking seek-table checksums where present):
// exit 0.
TEST_P(StoredCheckpointTest, VerifySound) {
  const ProcessResult r = Ckptfs(Concat(Concat({"verify"}, options_), {source_}), kVerifyTimeout);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
}

std::string StoredName(const testing::TestParamInfo<StoredParam>& param) {
  return std::string(std::get<0>(param.param).name) + "_" + WhereName(std::get<1>(param.param));
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoredCheckpointTest,
                         testing::Combine(testing::ValuesIn(kStorageKinds),
                                          testing::ValuesIn(kWheres)),
                         StoredName);

}  // namespace
}  // namespace ckptfs::mount_test
