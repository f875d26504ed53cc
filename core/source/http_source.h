// HttpSource: one object on an HTTP(S) server, read with range GETs (libcurl).
//
// Open() asks for the object's size and validator (ETag, else Last-Modified) with one
// HEAD. Every ReadAt is then one `Range:` GET carrying `If-Match` (or
// `If-Unmodified-Since`), and the answer must be a 206 of exactly the bytes asked for
// from the same object: an object replaced after mount gives an IoError naming it, never
// bytes mixed from two versions.
//
// Connections are kept alive: finished handles go back to one pool shared by every
// source of the process, and the next read of any object reuses one, so a stream of
// reads pays the TCP and TLS handshakes once per thread, not once per thread and shard.
// TLS peers are verified. Connection errors, timeouts, 429 and 5xx are retried with
// exponential backoff until `timeout` has passed since the read began; other failures
// (404, 403, a server that ignores ranges) fail at once.
//
// S3 objects (HttpOptions::sigv4 with an access key) have every request signed with AWS
// Signature Version 4 by libcurl, with the `x-amz-content-sha256` header S3 requires
// (libcurl 7.88 does not add it) and `x-amz-security-token` for temporary credentials.
// Objects an S3 listing described are made with FromListing: no HEAD.
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

// A whole small answer: its status and body.
struct HttpResponse {
  long status = 0;
  std::string body;
};

// GETs all of `url` (a listing, an error document) with `options` (signed if they say
// so). Connection errors, 429 and 5xx are retried for up to connect_timeout, like
// HttpSource::Open; the transfer itself may take up to `timeout`. Any other answer is
// returned whatever its status, for the caller to read. IoError "NAME: URL: why" when the
// server cannot be reached, keeps failing, or sends more than `max_bytes`.
Result<HttpResponse> HttpGet(const std::string& url, const std::string& name,
                             const HttpOptions& options, uint64_t max_bytes);

class HttpSource final : public ByteSource {
 public:
  // HEADs `url`. NotFound for a 404 (so callers can probe optional files), IoError with
  // errno EACCES for a 403 ("access denied"), IoError when the server cannot be reached
  // within connect_timeout or answers otherwise. Messages name `name` and `shown_url`
  // (default: `url` without credentials).
  static Result<std::unique_ptr<HttpSource>> Open(std::string url, std::string name,
                                                  HttpOptions options = {},
                                                  std::string shown_url = {});
  // An object whose size and ETag are already known (from an S3 listing): makes no
  // request. An empty or weak `etag` leaves reads unconditional.
  static std::unique_ptr<HttpSource> FromListing(std::string url, std::string name, uint64_t size,
                                                 const std::string& etag, HttpOptions options = {});
  ~HttpSource() override;

  uint64_t Size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<uint8_t> out) const override;
  const std::string& Name() const override { return name_; }

  // "URL\nVALIDATOR\nSIZE": the URL without credentials, the ETag (else Last-Modified,
  // else empty) and the size in bytes. Equal identities mean the same bytes: a key for
  // caches of fetched bytes.
  std::string Identity() const;

 private:
  class Handle;
  HttpSource(std::string url, std::string name, HttpOptions options);

  void SetValidator(const std::string& etag, const std::string& last_modified);
  static std::unique_ptr<Handle> Acquire();
  static void Release(std::unique_ptr<Handle> handle);

  std::string url_;
  std::string name_;
  HttpOptions options_;
  uint64_t size_ = 0;
  std::string validator_;         // the ETag or Last-Modified value, or empty
  std::string validator_header_;  // "If-Match: ..." or "If-Unmodified-Since: ...", or empty
};

}  // namespace ckptfs
