// In-test loopback servers: a listener that never answers (a stalled server), and a
// minimal HTTP server that hands each request's head to a callback and sends back what it
// returns, one request per connection. Enough for unit tests of what a client asks and how
// it takes an answer; real servers (nginx, s3rver) are the mount tests' business.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace ckptfs::testing {

// A TCP socket listening on a free loopback port (backlog 64): returns the descriptor (-1
// on failure) and sets `*port` (0 on failure). The kernel completes connections to it
// whether or not anyone accepts them.
inline int ListenOnLoopback(int* port) {
  *port = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::listen(fd, 64) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    *port = ntohs(addr.sin_port);
  }
  return fd;
}

// Serves on a loopback port from a thread of its own until destroyed: reads each request's
// head (up to the blank line, at most 64 KiB, waiting at most 2 s for each piece), passes
// it to `answer` (called on the server thread), sends the whole reply and closes the
// connection. Declare it after whatever `answer` uses, so it stops first.
class LoopbackHttpServer {
 public:
  explicit LoopbackHttpServer(std::function<std::string(const std::string& request)> answer)
      : answer_(std::move(answer)) {
    fd_ = ListenOnLoopback(&port_);
    if (port_ != 0) thread_ = std::thread([this] { Serve(); });
  }
  ~LoopbackHttpServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackHttpServer(const LoopbackHttpServer&) = delete;
  LoopbackHttpServer& operator=(const LoopbackHttpServer&) = delete;

  int port() const { return port_; }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos && request.size() < (64u << 10)) {
        pollfd c{conn, POLLIN, 0};
        if (::poll(&c, 1, 2000) <= 0) break;
        const ssize_t n = ::recv(conn, buf, sizeof buf, 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      const std::string reply = answer_(request);
      for (size_t done = 0; done < reply.size();) {
        const ssize_t n = ::send(conn, reply.data() + done, reply.size() - done, MSG_NOSIGNAL);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      ::close(conn);
    }
  }

  std::function<std::string(const std::string&)> answer_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ckptfs::testing
