// S3 sources beyond the common checks (which StoredCheckpointTest runs over S3 too): the
// real binary mounting s3:// URLs from s3rver behind the SigV4-checking proxy
// (remote_harness.h) on loopback: what a prefix shows, one object, inspect, virtual
// hosts, credentials right and wrong, missing buckets and bad URLs, the store down and
// back. Skips without s3rver or node.

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr const char* kKey = S3Server::kKey;
constexpr const char* kSecret = S3Server::kSecret;
constexpr char kWrongSecret[] = "Wrong-Secret-DoNotPrint-7";
// A non-weight file whose key needs every kind of escaping.
constexpr char kOddName[] = "notes v1+final (copy)&=~'.txt";

// s3rver and its proxy, started in SetUp with the clients' environment set, stopped in
// TearDown.
class S3MountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    const std::string unavailable = S3Server::UnavailableReason();
    if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    server_ = std::make_unique<S3Server>(scratch_->Path("s3"));
    server_->SetClientEnv(env_);
    ASSERT_EQ(server_->Start(), "");
  }

  // The servers go first: s3rver's data and the logs live in the scratch directory that
  // MountFixture::TearDown removes.
  void TearDown() override {
    server_.reset();
    MountFixture::TearDown();
  }

  std::string Endpoint() const { return server_->Endpoint(); }
  static std::string Url(const std::string& key) { return S3Server::Url(key); }

  void Put(const std::string& path, const std::string& key) {
    ASSERT_EQ(server_->Put(path, key), "");
  }

  void Upload(const std::string& dir, const std::string& prefix) {
    ASSERT_EQ(server_->Upload(dir, prefix), "");
  }

  // A mixed checkpoint at scratch/NAME (with the oddly named extra file) uploaded under
  // NAME/; returns its local directory.
  std::string UploadMixed(const std::string& name, const std::vector<std::string>& args = {}) {
    const std::string dir = scratch_->Path(name);
    Generate(dir, args);
    if (args.empty()) std::ofstream(dir + "/" + kOddName) << "escaped key\n";
    Upload(dir, name + "/");
    return dir;
  }

  void MountS3(const std::string& url, const std::string& mountpoint,
               const std::vector<std::string>& options = {}) {
    Mount(url, mountpoint, nullptr, Concat(server_->ClientOptions(), options));
  }

  // One line on stderr, exit `code`, nothing mounted, no secret anywhere in the output.
  void ExpectOneLineFailure(const ProcessResult& r, int code, const std::string& names) {
    EXPECT_EQ(r.exit_code, code) << r.Describe();
    EXPECT_EQ(LineCount(r.err), 1) << r.Describe();
    EXPECT_NE(r.err.find(names), std::string::npos)
        << "should name " << names << "; " << r.Describe();
    for (const char* secret : {kSecret, kWrongSecret}) {
      EXPECT_EQ(r.err.find(secret), std::string::npos) << "secret in stderr; " << r.Describe();
      EXPECT_EQ(r.out.find(secret), std::string::npos) << "secret in stdout; " << r.Describe();
    }
  }

  ScopedEnv env_;
  std::unique_ptr<S3Server> server_;
};

// The common checks over S3 are StoredCheckpointTest's (stored_checkpoint_test.cc). A
// prefix shows exactly the keys right under it: one needing every kind of escaping, but
// no key of a deeper "directory" or of a longer prefix; and stats and logs show the
// s3:// URL, never the secret.
TEST_F(S3MountTest, PrefixShowsOnlyItsKeysAndNoSecret) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_NO_FATAL_FAILURE(Put(source + "/config.json", "llama/sub/config.json"));
  ASSERT_NO_FATAL_FAILURE(Put(source + "/config.json", "llama-other/model.safetensors"));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const std::string log = scratch_->Path("daemon.log");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("llama/"), mountpoint, {"--log-file", log}));
  RunCheck("check_root.py", {source, mountpoint});
  RunCheck("check_shards.py", {source, mountpoint});

  const ProcessResult stats = RunProcess({"cat", mountpoint + "/.ckptfs/stats.json"}, seconds(30));
  EXPECT_EQ(stats.exit_code, 0) << stats.Describe();
  EXPECT_NE(stats.out.find(Url("llama/")), std::string::npos) << stats.out;
  EXPECT_EQ(stats.out.find(kSecret), std::string::npos) << stats.out;
  EXPECT_EQ(ReadTextFile(log).find(kSecret), std::string::npos);
}

// The pytorch_model.bin view of a checkpoint read over S3.
TEST_F(S3MountTest, TorchBinOverS3) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("llama/"), mountpoint));
  RunCheck("check_torch_bin.py", {source, mountpoint, "--crc", "zero"});
}

// Files show the listing's LastModified (the upload time), not the mount time.
TEST_F(S3MountTest, FilesShowLastModified) {
  const time_t before = time(nullptr);
  const std::string source = UploadMixed("llama", {"--kind", "llama"});
  ASSERT_FALSE(HasFatalFailure());
  const time_t uploaded = time(nullptr);
  sleep(2);  // a mount-time clock would show a later second than any upload
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("llama/"), mountpoint));
  for (const char* file :
       {"shards/model-00001-of-00002.safetensors", "config.json", "model.safetensors", ""}) {
    SCOPED_TRACE(file);
    const ProcessResult r =
        RunProcess({"stat", "-c", "%Y", "--", mountpoint + "/" + file}, kCheckTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    const long long shown = std::stoll(r.out);
    EXPECT_GE(shown, before - 1);
    EXPECT_LE(shown, uploaded);
  }
}

// One object by its URL: one HEAD, then range reads.
TEST_F(S3MountTest, SingleObject) {
  const std::string dir = scratch_->Path("single");
  ASSERT_NO_FATAL_FAILURE(Generate(dir, {"--single"}));
  ASSERT_NO_FATAL_FAILURE(Upload(dir, "single/"));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("single/model.safetensors"), mountpoint));
  for (const char* check : kMountChecks) RunCheck(check, {dir + "/model.safetensors", mountpoint});
}

// `inspect s3://...` with the endpoint from AWS_ENDPOINT_URL_S3 instead of --endpoint.
TEST_F(S3MountTest, Inspect) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  env_.Set("AWS_ENDPOINT_URL_S3", Endpoint().c_str());
  RunCheck("check_inspect.py", {kCkptfs, source, Url("llama/")});
  const ProcessResult r = RunProcess({kCkptfs, "inspect", Url("llama/")}, seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.out.find(Url("llama/")), std::string::npos) << r.Describe();
  EXPECT_EQ(r.out.find(kSecret), std::string::npos) << r.Describe();
}

// Virtual-host addressing for real: BUCKET.s3.localhost (curl resolves *.localhost to
// loopback itself; s3rver takes the bucket from the host name).
TEST_F(S3MountTest, VirtualHostAddressing) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  Mount(Url("llama/"), mountpoint, nullptr,
        {"--endpoint", "http://s3.localhost:" + std::to_string(server_->proxy_port()),
         "--addressing", "virtual"});
  RunCheck("check_shards.py", {source, mountpoint});
  RunCheck("check_root.py", {source, mountpoint});
}

TEST_F(S3MountTest, WrongSecretIsAccessDenied) {
  ASSERT_NO_FATAL_FAILURE(UploadMixed("llama"));
  env_.Set("AWS_SECRET_ACCESS_KEY", kWrongSecret);
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);  // in case it mounts anyway
  for (const std::string& url : {Url("llama/"), Url("llama/model-00001-of-00008.safetensors")}) {
    SCOPED_TRACE(url);
    ProcessResult r =
        RunProcess({kCkptfs, "mount", "--endpoint", Endpoint(), url, mountpoint}, seconds(30));
    ExpectOneLineFailure(r, 1, url);
    EXPECT_NE(r.err.find("access denied"), std::string::npos) << r.Describe();
    EXPECT_FALSE(IsMounted(mountpoint));
    r = RunProcess({kCkptfs, "inspect", "--endpoint", Endpoint(), url}, seconds(30));
    ExpectOneLineFailure(r, 1, url);
  }
}

// Temporary credentials: the token goes with every request, signed.
TEST_F(S3MountTest, SessionToken) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  const std::string token = "FwoGZXIvYXdzEBcaD/session+token=";
  ASSERT_EQ(server_->Start({"--token", token}), "");
  ProcessResult r =
      RunProcess({kCkptfs, "inspect", "--endpoint", Endpoint(), Url("llama/")}, seconds(30));
  ExpectOneLineFailure(r, 1, "access denied");
  env_.Set("AWS_SESSION_TOKEN", token.c_str());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("llama/"), mountpoint));
  RunCheck("check_shards.py", {source, mountpoint});
}

// Credentials from a profile of the shared credentials file, and none at all.
TEST_F(S3MountTest, ProfileAndAnonymous) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  env_.Set("AWS_ACCESS_KEY_ID", nullptr);
  env_.Set("AWS_SECRET_ACCESS_KEY", nullptr);
  ProcessResult r =
      RunProcess({kCkptfs, "inspect", "--endpoint", Endpoint(), Url("llama/")}, seconds(30));
  ExpectOneLineFailure(r, 1, "no AWS credentials");

  const std::string credentials = scratch_->Path("credentials");
  std::ofstream(credentials) << "[default]\naws_access_key_id = WRONG\naws_secret_access_key = x\n"
                             << "[ckpt]\naws_access_key_id = " << kKey
                             << "\naws_secret_access_key = " << kSecret << "\n";
  env_.Set("AWS_SHARED_CREDENTIALS_FILE", credentials.c_str());
  env_.Set("AWS_PROFILE", "ckpt");
  r = RunProcess({kCkptfs, "inspect", "--endpoint", Endpoint(), Url("llama/")}, seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  env_.Set("AWS_PROFILE", "missing-profile");
  r = RunProcess({kCkptfs, "inspect", "--endpoint", Endpoint(), Url("llama/")}, seconds(30));
  ExpectOneLineFailure(r, 2, "missing-profile");
}

// No bucket, nothing under the prefix, a malformed URL: one line each.
TEST_F(S3MountTest, MissingBucketEmptyPrefixBadUrl) {
  ASSERT_NO_FATAL_FAILURE(UploadMixed("llama"));
  struct Case {
    std::string url;
    std::string says;
  };
  const Case cases[] = {
      {"s3://no-such-bucket/llama/", "no such bucket"},
      {Url("empty/"), "no objects"},
      {Url("llama/missing.safetensors"), "not found (no such key)"},
      {"s3://Bad_Bucket/llama/", "bucket names"},
      {Url("llama/../other/"), "'..'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.url);
    const ProcessResult r =
        RunProcess({kCkptfs, "inspect", "--endpoint", Endpoint(), c.url}, seconds(30));
    ExpectOneLineFailure(r, 2, c.says);
    EXPECT_LE(r.elapsed, seconds(5)) << r.Describe();
  }
}

TEST_F(S3MountTest, ServerDownAtMountIsOneLine) {
  ASSERT_NO_FATAL_FAILURE(UploadMixed("llama"));
  server_->Stop();
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  const ProcessResult r = RunProcess(
      {kCkptfs, "mount", "--endpoint", Endpoint(), Url("llama/"), mountpoint}, seconds(30));
  ExpectOneLineFailure(r, 1, Url("llama/"));
  EXPECT_LE(r.elapsed, seconds(7)) << r.Describe();
  EXPECT_FALSE(IsMounted(mountpoint));
}

// The store lost under a mount: EIO once --timeout has passed, the daemon stays up, and
// the same read succeeds once the store is back.
TEST_F(S3MountTest, ServerLostThenBack) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("llama/"), mountpoint, {"--timeout", "2"}));
  ExpectEioWhileDownThenRecovery(*server_, mountpoint + "/shards/model-00002-of-00008.safetensors",
                                 source + "/model-00002-of-00008.safetensors");
}

}  // namespace
}  // namespace ckptfs::mount_test
