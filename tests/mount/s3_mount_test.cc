// S3 sources: the real binary mounting s3:// URLs from s3rver (npm, installed by
// scripts/setup.sh into /opt/ckptfs-s3rver) on loopback, read by the same python checks
// as local and HTTP mounts.
//
// s3rver 3.x does not verify SigV4 signatures (any signature passes for a known access
// key), so every request goes through tests/mount/s3_sigv4_proxy.py, which checks each
// signature the way S3 does (403 SignatureDoesNotMatch otherwise), refuses unsigned
// requests, and caps ListObjectsV2 pages at 3 keys so that every mount pages through its
// listing. Objects are uploaded straight to s3rver with signed PUTs (curl --aws-sigv4).
// Skips without s3rver or node.

#include <optional>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr char kDefaultS3rver[] = "/opt/ckptfs-s3rver/node_modules/.bin/s3rver";
constexpr char kBucket[] = "ckpt-bucket";
// What the proxy accepts; s3rver itself knows only its own S3RVER key, used for uploads.
constexpr char kKey[] = "CKPTFSTESTKEY";
constexpr char kSecret[] = "ckptfs-Test-Secret/DoNotPrint+42";
constexpr char kWrongSecret[] = "Wrong-Secret-DoNotPrint-7";
// A non-weight file whose key needs every kind of escaping.
constexpr char kOddName[] = "notes v1+final (copy)&=~'.txt";

std::string S3rverPath() {
  const char* path = getenv("CKPTFS_S3RVER");
  return path ? path : kDefaultS3rver;
}

// RFC 3986 percent-encoding of a key, '/' kept: what curl must be given to PUT it.
std::string EncodeKey(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += ch;
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

// The environment the child processes (ckptfs, the checks) inherit; restored afterwards.
class ScopedEnv {
 public:
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void Set(const std::string& name, const char* value) {
    if (std::none_of(saved_.begin(), saved_.end(), [&](auto& s) { return s.first == name; })) {
      const char* old = getenv(name.c_str());
      saved_.emplace_back(name, old ? std::make_optional<std::string>(old) : std::nullopt);
    }
    if (value) {
      setenv(name.c_str(), value, 1);
    } else {
      unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class S3MountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    if (::access(S3rverPath().c_str(), X_OK) != 0) {
      GTEST_SKIP() << S3rverPath() << " missing (scripts/setup.sh installs s3rver from npm)";
    }
    if (RunProcess({"node", "--version"}, seconds(10)).exit_code != 0) {
      GTEST_SKIP() << "node missing (scripts/setup.sh installs nodejs)";
    }
    data_ = scratch_->MakeDir("s3rver-data");
    s3_port_ = FreeLoopbackPort();
    do {
      proxy_port_ = FreeLoopbackPort();
    } while (proxy_port_ == s3_port_);
    ASSERT_NE(s3_port_, 0);
    ASSERT_NE(proxy_port_, 0);
    // Only what the test says: no credentials, profile or endpoint of the machine's.
    env_.Set("AWS_ACCESS_KEY_ID", kKey);
    env_.Set("AWS_SECRET_ACCESS_KEY", kSecret);
    for (const char* name : {"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                             "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}) {
      env_.Set(name, nullptr);
    }
    env_.Set("AWS_SHARED_CREDENTIALS_FILE", scratch_->Path("no-credentials").c_str());
    env_.Set("AWS_CONFIG_FILE", scratch_->Path("no-config").c_str());
    // s3rver's continuation tokens use DES, which OpenSSL 3 keeps in its legacy provider.
    env_.Set("NODE_OPTIONS", "--openssl-legacy-provider");
    ASSERT_NO_FATAL_FAILURE(StartServers());
  }

  // The servers go first: s3rver's data and the logs live in the scratch directory that
  // MountFixture::TearDown removes.
  void TearDown() override {
    StopServers();
    MountFixture::TearDown();
  }

  void StartServers(const std::vector<std::string>& proxy_options = {}) {
    // --service-endpoint localhost: s3rver also answers BUCKET.s3.localhost (virtual hosts).
    ASSERT_TRUE(s3rver_.Start(
        {S3rverPath(), "-d", data_, "-a", "127.0.0.1", "-p", std::to_string(s3_port_), "--silent",
         "--service-endpoint", "localhost", "--configure-bucket", kBucket},
        scratch_->Path("s3rver.log")));
    ASSERT_TRUE(WaitForPort(s3_port_, seconds(20)))
        << "s3rver did not listen: " << ReadTextFile(scratch_->Path("s3rver.log"));
    std::vector<std::string> proxy = {kPython,
                                      ScriptPath("tests/mount/s3_sigv4_proxy.py"),
                                      "--listen",
                                      std::to_string(proxy_port_),
                                      "--backend",
                                      std::to_string(s3_port_),
                                      "--key",
                                      kKey,
                                      "--secret",
                                      kSecret,
                                      "--require-auth",
                                      "--max-keys",
                                      "3"};
    proxy.insert(proxy.end(), proxy_options.begin(), proxy_options.end());
    ASSERT_TRUE(proxy_.Start(proxy, scratch_->Path("proxy.log")));
    ASSERT_TRUE(WaitForPort(proxy_port_, seconds(20)))
        << "the SigV4 proxy did not listen: " << ReadTextFile(scratch_->Path("proxy.log"));
  }

  void StopServers() {
    proxy_.Stop();
    s3rver_.Stop();
  }

  std::string Endpoint() const { return "http://127.0.0.1:" + std::to_string(proxy_port_); }
  static std::string Url(const std::string& key) {
    return std::string("s3://") + kBucket + "/" + key;
  }

  // PUTs `path` as `key`, signed, straight to s3rver.
  void Put(const std::string& path, const std::string& key) {
    const ProcessResult r = RunProcess(
        {"curl", "-sS", "--fail", "-o", "/dev/null", "--aws-sigv4", "aws:amz:us-east-1:s3",
         "--user", "S3RVER:S3RVER", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", path,
         "http://127.0.0.1:" + std::to_string(s3_port_) + "/" + kBucket + "/" + EncodeKey(key)},
        seconds(60));
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }

  // Every regular file of `dir` under `prefix`.
  void Upload(const std::string& dir, const std::string& prefix) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file()) {
        ASSERT_NO_FATAL_FAILURE(Put(e.path().string(), prefix + e.path().filename().string()));
      }
    }
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
               std::vector<std::string> options = {}) {
    options.insert(options.begin(), {"--endpoint", Endpoint()});
    Mount(url, mountpoint, nullptr, options);
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
  BackgroundProcess s3rver_, proxy_;
  std::string data_;
  int s3_port_ = 0, proxy_port_ = 0;
};

// A checkpoint under a prefix, through every check; keys needing escaping, a
// subdirectory that is not shown, and the s3:// URL (never a secret) in stats and logs.
TEST_F(S3MountTest, MixedCheckpointOverS3) {
  const std::string source = UploadMixed("llama");
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_NO_FATAL_FAILURE(Put(source + "/config.json", "llama/sub/config.json"));
  ASSERT_NO_FATAL_FAILURE(Put(source + "/config.json", "llama-other/model.safetensors"));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const std::string log = scratch_->Path("daemon.log");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("llama/"), mountpoint, {"--log-file", log}));
  for (const char* check : kMountChecks) RunCheck(check, {source, mountpoint});
  RunCheck("check_torch_bin.py", {source, mountpoint, "--crc", "zero"});

  const ProcessResult stats = RunProcess({"cat", mountpoint + "/.ckptfs/stats.json"}, seconds(30));
  EXPECT_EQ(stats.exit_code, 0) << stats.Describe();
  EXPECT_NE(stats.out.find(Url("llama/")), std::string::npos) << stats.out;
  EXPECT_EQ(stats.out.find(kSecret), std::string::npos) << stats.out;
  EXPECT_EQ(ReadTextFile(log).find(kSecret), std::string::npos);
}

// Seekable .zst shards over S3: range GETs of the frames a read needs.
TEST_F(S3MountTest, PackedCheckpointOverS3) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(plain));
  const std::string packed = scratch_->Path("packed");
  ASSERT_NO_FATAL_FAILURE(
      Generate(packed, {"--from", plain, "--compress", "seekable", "--frame-size", "256K"}));
  ASSERT_TRUE(fs::exists(packed + "/model-00001-of-00008.safetensors.zst"));
  ASSERT_NO_FATAL_FAILURE(Upload(packed, "packed/"));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(MountS3(Url("packed/"), mountpoint));
  for (const char* check : kMountChecks) RunCheck(check, {plain, mountpoint});
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
        {"--endpoint", "http://s3.localhost:" + std::to_string(proxy_port_), "--addressing",
         "virtual"});
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
  proxy_.Stop();
  ASSERT_NO_FATAL_FAILURE(StartServers({"--token", token}));
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
      {Url("llama/missing.safetensors"), "not found"},
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
  StopServers();
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
  const std::string shard = mountpoint + "/shards/model-00002-of-00008.safetensors";
  StopServers();
  ProcessResult r = RunProcess({"cat", shard}, seconds(60));
  EXPECT_NE(r.exit_code, 0) << "a read with the store gone must fail; " << r.Describe();
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.Describe();
  EXPECT_LE(r.elapsed, seconds(10)) << "EIO must come within about --timeout; " << r.Describe();
  ASSERT_NO_FATAL_FAILURE(StartServers());
  r = RunProcess({"cmp", shard, source + "/model-00002-of-00008.safetensors"}, seconds(60));
  EXPECT_EQ(r.exit_code, 0) << "reads must work again once the store is back; " << r.Describe();
}

}  // namespace
}  // namespace ckptfs::mount_test
