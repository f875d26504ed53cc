// scripts/wan_server.py for the mount tests: a loopback "network" with a first-byte
// latency and a per-connection rate, serving plain HTTP (--files), S3 (--s3) and the
// Hugging Face Hub with its CDN (--hub), each listener on a port the kernel picks.
//
// WanServer::Start() takes the server's own flags (which listeners, the network shape,
// hub options: scripts/wan_server.py --help) and adds --port-file and --log in the state
// directory; it returns "" once every listener listens (the port file is written only
// then), or what went wrong, within kStartTimeout. Port() and Url() name a listener;
// Requests() parses the server's log (one JSON line a request, written as each reply
// ends). The server is a BackgroundProcess: Stop() and the destructor end it, and it dies
// with the test process. Not thread-safe: one test thread.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "remote_harness.h"

namespace ckptfs::mount_test {

// One line of the server's --log.
struct WanRequest {
  std::string listener;  // files, s3, hub or cdn
  std::string method, path, query, range;
  int status = 0;
  uint64_t bytes = 0;  // body bytes sent
  bool auth = false;   // an Authorization header came with it
  int conn = 0;        // connection id, unique per server process
};

class WanServer {
 public:
  static constexpr milliseconds kStartTimeout = seconds(20);

  // The port file, log and server output go to `state_dir` (created).
  explicit WanServer(std::string state_dir) : dir_(std::move(state_dir)) {
    fs::create_directories(dir_);
  }
  WanServer(const WanServer&) = delete;
  WanServer& operator=(const WanServer&) = delete;
  ~WanServer() { Stop(); }

  // Starts (or restarts, on new ports) the server with `args`, e.g. {"--files", DIR,
  // "--latency-ms", "20", "--rate", "4"}; "" once every listener listens.
  std::string Start(const std::vector<std::string>& args) {
    Stop();
    ports_.clear();
    std::error_code ignored;
    fs::remove(PortFilePath(), ignored);
    const std::vector<std::string> argv = {kPython,       ScriptPath("scripts/wan_server.py"),
                                           "--port-file", PortFilePath(),
                                           "--log",       LogPath()};
    if (!process_.Start(Concat(argv, args), OutputPath())) return "could not start wan_server.py";
    for (const Clock::time_point deadline = Clock::now() + kStartTimeout;
         Clock::now() < deadline && process_.Alive();) {
      if (fs::exists(PortFilePath())) return ReadPorts();
      std::this_thread::sleep_for(milliseconds(50));
    }
    process_.Stop();
    return "wan_server.py did not write its port file: " + ReadTextFile(OutputPath());
  }

  void Stop() { process_.Stop(); }

  // The port of `listener` ("files", "s3", "hub", "cdn"), 0 if it was not started.
  int Port(const std::string& listener) const {
    const auto it = ports_.find(listener);
    return it == ports_.end() ? 0 : it->second;
  }

  // http://127.0.0.1:PORT/`path` of `listener` (path without the leading '/').
  std::string Url(const std::string& listener, const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(Port(listener)) + "/" + path;
  }

  const std::string& dir() const { return dir_; }
  std::string LogPath() const { return dir_ + "/requests.jsonl"; }
  std::string OutputPath() const { return dir_ + "/server.out"; }

  // Every request logged so far, read once the log has not grown for `quiet` (a reply
  // still being sent is logged when it ends); bounded by 10 s.
  std::vector<WanRequest> Requests(milliseconds quiet = milliseconds(300)) const {
    std::string log, last = ReadTextFile(LogPath());
    for (const Clock::time_point deadline = Clock::now() + seconds(10); Clock::now() < deadline;) {
      std::this_thread::sleep_for(quiet);
      log = ReadTextFile(LogPath());
      if (log == last) break;
      last = log;
    }
    std::vector<WanRequest> out;
    std::istringstream lines(last);
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) continue;  // a torn last line cannot happen (one write a line)
      out.push_back({j.value("listener", ""), j.value("method", ""), j.value("path", ""),
                     j.value("query", ""), j.value("range", ""), j.value("status", 0),
                     j.value("bytes", uint64_t{0}), j.value("auth", false), j.value("conn", 0)});
    }
    return out;
  }

 private:
  std::string PortFilePath() const { return dir_ + "/ports.json"; }

  std::string ReadPorts() {
    const nlohmann::json j =
        nlohmann::json::parse(ReadTextFile(PortFilePath()), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.empty()) return "wan_server.py wrote a bad port file";
    for (const auto& [name, port] : j.items()) {
      if (!port.is_number_integer() || !PortAccepts(port.get<int>())) {
        return "wan_server.py's " + name + " listener does not accept connections";
      }
      ports_[name] = port.get<int>();
    }
    return "";
  }

  std::string dir_;
  std::map<std::string, int> ports_;
  BackgroundProcess process_;
};

// Body bytes the server sent for requests `pick` selects.
template <typename Pick>
uint64_t BytesSent(const std::vector<WanRequest>& requests, Pick pick) {
  uint64_t total = 0;
  for (const WanRequest& r : requests) {
    if (pick(r)) total += r.bytes;
  }
  return total;
}

}  // namespace ckptfs::mount_test
