// Servers of the remote mount tests (http_mount_test.cc, s3_mount_test.cc,
// stored_checkpoint_test.cc): nginx over a directory, and s3rver behind the SigV4 proxy,
// each on free loopback ports.
//
// Every server process is a child of the test process in a process group of its own
// (nginx runs as one process, in the foreground), ended with its whole group by Stop()
// or the destructor, and killed by the kernel should the test process die first
// (PR_SET_PDEATHSIG): a failed or killed test leaves no server behind. Start() and the
// uploads return "" or what went wrong instead of asserting, so a SetUpTestSuite can
// call them too; UnavailableReason() says, without starting anything, why a server
// cannot run on this machine at all (what tests turn into GTEST_SKIP). Not thread-safe:
// one test thread.
#pragma once

#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <optional>
#include <utility>

#include "mount_harness.h"

namespace ckptfs::mount_test {

// A port nothing listens on right now (the kernel's choice for an ephemeral bind).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Whether something accepts connections on 127.0.0.1:port.
inline bool PortAccepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool up = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (fd >= 0) ::close(fd);
  return up;
}

// A child that runs until stopped (a server), in its own process group, its output
// appended to a log file. Stop() (and the destructor) end the whole group: SIGTERM, then
// SIGKILL if it has not exited within a few seconds. Never left running.
class BackgroundProcess {
 public:
  BackgroundProcess() = default;
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  ~BackgroundProcess() { Stop(); }

  // False if it could not be started.
  bool Start(std::vector<std::string> argv, const std::string& log_path) {
    Stop();
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the test process killed: the server goes too
      ExecChild(args, log_fd, log_fd);
    }
    close(log_fd);
    if (pid_ < 0) pid_ = 0;
    return pid_ > 0;
  }

  // Whether the child has been started and has not exited (an exited child is reaped).
  bool Alive() {
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) exited_ = true;
    return !exited_;
  }

  // Polls until the child accepts connections on 127.0.0.1:port; false if it exits
  // first or the timeout passes.
  bool WaitUntilListening(int port, milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (Alive() && Clock::now() < deadline) {
      if (PortAccepts(port)) return true;
      usleep(50000);
    }
    return false;
  }

  void Stop() {
    if (pid_ <= 0) return;
    if (!exited_) {
      kill(-pid_, SIGTERM);
      const Clock::time_point deadline = Clock::now() + seconds(5);
      int status = 0;
      while (waitpid(pid_, &status, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          kill(-pid_, SIGKILL);
          waitpid(pid_, &status, 0);
          break;
        }
        usleep(20000);
      }
    }
    kill(-pid_, SIGKILL);  // anything the server itself left behind in its group
    pid_ = 0;
    exited_ = false;
  }

 private:
  pid_t pid_ = 0;
  bool exited_ = false;
};

// The environment the child processes (ckptfs, the checks) inherit; restored on
// destruction.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

  // Sets `name` to `value`, or unsets it for nullptr.
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

// Appends `more` to `to`.
inline std::vector<std::string> Concat(std::vector<std::string> to,
                                       const std::vector<std::string>& more) {
  to.insert(to.end(), more.begin(), more.end());
  return to;
}

// ---------------------------------------------------------------------------
// nginx (Debian's nginx-light, installed by scripts/setup.sh)

// nginx serving a directory on a free loopback port, chosen once: a restart after Stop()
// serves the same URLs. Its access log has one line a request, "METHOD URI STATUS
// BODY_BYTES_SENT", written as each request ends.
class NginxServer {
 public:
  static constexpr char kBinary[] = "/usr/sbin/nginx";

  // "" if nginx can run here, else why not.
  static std::string UnavailableReason() {
    if (::access(kBinary, X_OK) == 0) return "";
    return std::string(kBinary) + " missing (scripts/setup.sh installs nginx-light)";
  }

  // Serves `root`; config, pid file and logs go to `state_dir` (created).
  NginxServer(std::string root, std::string state_dir)
      : root_(std::move(root)), dir_(std::move(state_dir)), port_(FreeLoopbackPort()) {
    fs::create_directories(dir_);
  }
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;
  ~NginxServer() { Stop(); }

  // "" once the server answers, else what went wrong (with its error log).
  std::string Start() {
    if (port_ == 0) return "no free loopback port for nginx";
    WriteConfig();
    if (!process_.Start({kBinary, "-e", Path("error.log"), "-c", Path("nginx.conf")},
                        Path("nginx.out"))) {
      return std::string("could not start ") + kBinary;
    }
    if (process_.WaitUntilListening(port_, seconds(10))) return "";
    process_.Stop();
    return "nginx did not listen on port " + std::to_string(port_) + ": " +
           ReadTextFile(Path("nginx.out")) + ReadTextFile(Path("error.log"));
  }

  void Stop() { process_.Stop(); }

  // Restarts the server with `extra` inside its server block (a location with
  // limit_rate, say), on the same port; "" once it answers. Connections open at the time
  // are cut.
  std::string Reload(const std::string& extra) {
    extra_ = extra;
    Stop();
    return Start();
  }

  // The URL of `path` (relative to the root).
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }

  std::string AccessLogPath() const { return Path("access.log"); }

 private:
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void WriteConfig() const {
    // One process in the foreground, as the test's user: our child, so PR_SET_PDEATHSIG
    // covers all of nginx (a worker would outlive a killed master; and a single process
    // does not reload, hence Reload() restarts).
    std::ofstream(Path("nginx.conf"))
        << "daemon off;\nmaster_process off;\npid " << Path("nginx.pid") << ";\nerror_log "
        << Path("error.log") << ";\nevents {}\nhttp {\n"
        << "  log_format bytes '$request_method $uri $status $body_bytes_sent';\n"
        << "  access_log " << AccessLogPath() << " bytes;\n"
        << "  client_body_temp_path " << dir_ << ";\n  proxy_temp_path " << dir_
        << ";\n  fastcgi_temp_path " << dir_ << ";\n  uwsgi_temp_path " << dir_
        << ";\n  scgi_temp_path " << dir_ << ";\n  server { listen 127.0.0.1:" << port_ << "; root "
        << root_ << "; " << extra_ << " }\n}\n";
  }

  std::string root_, dir_;
  int port_;
  std::string extra_;  // in the server block
  BackgroundProcess process_;
};

// ---------------------------------------------------------------------------
// S3: s3rver (npm, installed by scripts/setup.sh into /opt/ckptfs-s3rver) behind
// tests/mount/s3_sigv4_proxy.py.
//
// s3rver 3.x does not verify SigV4 signatures (any signature passes for a known access
// key), so clients go through the proxy, which checks each signature the way S3 does
// (403 SignatureDoesNotMatch otherwise), refuses unsigned requests, and caps
// ListObjectsV2 pages at 3 keys so that every mount pages through its listing. Objects
// are uploaded straight to s3rver with signed PUTs (curl --aws-sigv4).

// RFC 3986 percent-encoding of an S3 key, '/' kept: what curl must be given to PUT it.
inline std::string EncodeS3Key(const std::string& key) {
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

// One bucket, kBucket, that keeps its objects across Stop() and Start() (they live in the
// state directory), reached by clients at Endpoint() with kKey and kSecret.
class S3Server {
 public:
  static constexpr char kDefaultS3rver[] = "/opt/ckptfs-s3rver/node_modules/.bin/s3rver";
  static constexpr char kBucket[] = "ckpt-bucket";
  // What the proxy accepts; s3rver itself knows only its own S3RVER key, used for uploads.
  static constexpr char kKey[] = "CKPTFSTESTKEY";
  static constexpr char kSecret[] = "ckptfs-Test-Secret/DoNotPrint+42";

  // $CKPTFS_S3RVER, else where scripts/setup.sh installs it.
  static std::string S3rverPath() {
    const char* path = getenv("CKPTFS_S3RVER");
    return path ? path : kDefaultS3rver;
  }

  // "" if s3rver can run here, else why not.
  static std::string UnavailableReason() {
    if (::access(S3rverPath().c_str(), X_OK) != 0) {
      return S3rverPath() + " missing (scripts/setup.sh installs s3rver from npm)";
    }
    if (RunProcess({"node", "--version"}, seconds(10)).exit_code != 0) {
      return "node missing (scripts/setup.sh installs nodejs)";
    }
    return "";
  }

  // The URL of `key` in the bucket.
  static std::string Url(const std::string& key) {
    return std::string("s3://") + kBucket + "/" + key;
  }

  // s3rver's data and the logs go to `state_dir` (created).
  explicit S3Server(std::string state_dir) : dir_(std::move(state_dir)) {
    fs::create_directories(dir_ + "/data");
    s3_port_ = FreeLoopbackPort();
    do {
      proxy_port_ = FreeLoopbackPort();
    } while (proxy_port_ == s3_port_ && s3_port_ != 0);
  }
  S3Server(const S3Server&) = delete;
  S3Server& operator=(const S3Server&) = delete;
  ~S3Server() { Stop(); }

  // Starts (or restarts) s3rver, then the proxy in front of it with `proxy_options` added
  // to its command line (--token T, say); "" once both answer, else what went wrong.
  std::string Start(const std::vector<std::string>& proxy_options = {}) {
    if (s3_port_ == 0 || proxy_port_ == 0) return "no free loopback ports for s3rver";
    // s3rver's continuation tokens use DES, which OpenSSL 3 keeps in its legacy provider.
    // --service-endpoint localhost: s3rver also answers BUCKET.s3.localhost (virtual hosts).
    if (!s3rver_.Start(
            {"env", "NODE_OPTIONS=--openssl-legacy-provider", S3rverPath(), "-d", dir_ + "/data",
             "-a", "127.0.0.1", "-p", std::to_string(s3_port_), "--silent", "--service-endpoint",
             "localhost", "--configure-bucket", kBucket},
            dir_ + "/s3rver.log") ||
        !s3rver_.WaitUntilListening(s3_port_, seconds(20))) {
      Stop();
      return "s3rver did not listen: " + ReadTextFile(dir_ + "/s3rver.log");
    }
    const std::vector<std::string> proxy = {kPython,
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
    if (!proxy_.Start(Concat(proxy, proxy_options), dir_ + "/proxy.log") ||
        !proxy_.WaitUntilListening(proxy_port_, seconds(20))) {
      Stop();
      return "the SigV4 proxy did not listen: " + ReadTextFile(dir_ + "/proxy.log");
    }
    return "";
  }

  void Stop() {
    proxy_.Stop();
    s3rver_.Stop();
  }

  // Gives the clients the test process starts (ckptfs, the checks) kKey and kSecret, and
  // none of the machine's token, profile, region, endpoint or config files.
  void SetClientEnv(ScopedEnv& env) const {
    env.Set("AWS_ACCESS_KEY_ID", kKey);
    env.Set("AWS_SECRET_ACCESS_KEY", kSecret);
    for (const char* name : {"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                             "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}) {
      env.Set(name, nullptr);
    }
    env.Set("AWS_SHARED_CREDENTIALS_FILE", (dir_ + "/no-credentials").c_str());
    env.Set("AWS_CONFIG_FILE", (dir_ + "/no-config").c_str());
  }

  // The proxy, what clients are given as --endpoint.
  std::string Endpoint() const { return "http://127.0.0.1:" + std::to_string(proxy_port_); }
  int proxy_port() const { return proxy_port_; }

  // What `ckptfs mount`, `inspect` and `verify` need besides the URL.
  std::vector<std::string> ClientOptions() const { return {"--endpoint", Endpoint()}; }

  // PUTs the file at `path` as `key`, signed, straight to s3rver; "" or what went wrong.
  std::string Put(const std::string& path, const std::string& key) const {
    const ProcessResult r = RunProcess(
        {"curl", "-sS", "--fail", "-o", "/dev/null", "--aws-sigv4", "aws:amz:us-east-1:s3",
         "--user", "S3RVER:S3RVER", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", path,
         "http://127.0.0.1:" + std::to_string(s3_port_) + "/" + kBucket + "/" + EncodeS3Key(key)},
        seconds(60));
    return r.exit_code == 0 ? "" : r.Describe();
  }

  // Every regular file of `dir` (not its subdirectories) under `prefix`.
  std::string Upload(const std::string& dir, const std::string& prefix) const {
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      const std::string error = Put(e.path().string(), prefix + e.path().filename().string());
      if (!error.empty()) return error;
    }
    return "";
  }

 private:
  std::string dir_;
  int s3_port_ = 0, proxy_port_ = 0;
  BackgroundProcess s3rver_, proxy_;
};

// ---------------------------------------------------------------------------
// What every remote source must survive

// The server lost under a mount made with --timeout 2: a read of `path` (in the mount)
// fails with EIO within about the timeout (the daemon staying up), and once `server`
// (an NginxServer or S3Server) is started again the same read gives `expected`'s bytes.
template <typename Server>
void ExpectEioWhileDownThenRecovery(Server& server, const std::string& path,
                                    const std::string& expected) {
  server.Stop();
  ProcessResult r = RunProcess({"cat", path}, seconds(60));
  EXPECT_NE(r.exit_code, 0) << "a read with the server gone must fail; " << r.Describe();
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.Describe();
  EXPECT_LE(r.elapsed, seconds(10)) << "EIO must come within about --timeout; " << r.Describe();
  ASSERT_EQ(server.Start(), "");
  r = RunProcess({"cmp", path, expected}, seconds(60));
  EXPECT_EQ(r.exit_code, 0) << "reads must work again once the server is back; " << r.Describe();
}

}  // namespace ckptfs::mount_test
