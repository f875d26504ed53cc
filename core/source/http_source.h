// HttpSource: one object on an HTTP(S) server, read with range GETs (libcurl).
//
// Open() asks for the object's size and validator (ETag, else Last-Modified) with one
// HEAD. Every ReadAt is then one `Range:` GET carrying `If-Match` (or
// `If-Unmodified-Since`), and the answer must be a 206 of exactly the bytes asked for
// from the same object: an object replaced after mount gives an IoError naming it, never
// bytes mixed from two versions.
//
// Connections are kept alive: finished handles go back to a pool and the next read
// reuses one, so a stream of reads pays the TCP and TLS handshakes once per thread.
// TLS peers are verified. Connection errors, timeouts, 429 and 5xx are retried with
// exponential backoff until `timeout` has passed since the read began; other failures
// (404, 403, a server that ignores ranges) fail at once.
//
// Thread safety: every method may be called from any number of threads.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/source/byte_source.h"
#include "core/source/remote_options.h"

namespace ckptfs {

// `url` without any user:password@ part: what messages and stats may show, since
// credentials are never logged.
std::string RedactedUrl(const std::string& url);

class HttpSource final : public ByteSource {
 public:
  // HEADs `url`. NotFound for a 404 (so callers can probe optional files), IoError when
  // the server cannot be reached within connect_timeout or answers otherwise.
  static Result<std::unique_ptr<HttpSource>> Open(std::string url, std::string name,
                                                  HttpOptions options = {});
  ~HttpSource() override;

  uint64_t Size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<uint8_t> out) const override;
  const std::string& Name() const override { return name_; }

 private:
  class Handle;
  HttpSource(std::string url, std::string name, HttpOptions options);

  std::unique_ptr<Handle> Acquire() const;
  void Release(std::unique_ptr<Handle> handle) const;

  std::string url_;
  std::string name_;
  HttpOptions options_;
  uint64_t size_ = 0;
  std::string validator_header_;  // "If-Match: ..." or "If-Unmodified-Since: ...", or empty
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Handle>> idle_;
};

}  // namespace ckptfs
