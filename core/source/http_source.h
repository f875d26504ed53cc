// HttpSource: one object on an HTTP(S) server, read with range GETs (libcurl).
//
// Open() asks for the object's size and validators (ETag, Last-Modified) with one HEAD.
// Every ReadAt is then one `Range:` GET carrying `If-Match` for a strong ETag (else
// `If-Unmodified-Since` for a Last-Modified), and the answer is checked whole before a
// byte of it is used: a 206 whose Content-Range is exactly the bytes asked for out of the
// object's size (or a 200 for a read of the whole object), of exactly that length, and
// whose validators are the ones seen at mount: the strong ETag where there is one, else
// every one the server gave (a weak ETag, Last-Modified; both where it gave both). Servers
// that ignore If-Match exist (s3rver), so the answer's own validators are what prove the
// bytes are of the mounted version. Any mismatch is an IoError (EIO) naming the object,
// never bytes: an object replaced after mount, or a server answering from the wrong
// offset, is never served. A server that gives neither ETag nor Last-Modified leaves the
// size as the only thing to compare (HasValidator() false): a replacement of the same
// size cannot be told, which the mount says in a warning (docs/remote.md).
//
// Connections are kept alive: finished handles go back to one pool shared by every
// source of the process, and the next read of any object reuses one, so a stream of
// reads pays the TCP and TLS handshakes once per thread, not once per thread and shard.
// TLS peers are verified. Connection errors, timeouts, 429 and 5xx are retried with
// exponential backoff until `timeout` has passed since the read began; other failures
// (404, 403, a server that ignores ranges) fail at once.
//
// Time limits. A read gives up after HttpOptions::timeout, retries included. While the
// checkpoint is being opened (until BeginServing) every request also ends by
// HttpOptions::open_deadline, one deadline for all the objects of a mount. A read that
// ran out of time fails with errno ETIMEDOUT (RemoteSource, which reads every object of a
// mount, remembers it and reports EIO). The kernel asks again at once for a read that
// failed (a failed readahead is retried page by page, an mmap fault twice more): a range
// whose read timed out fails again at once in RemoteSource, and one that failed here
// otherwise (refused, 5xx) less than kRecentFailureWindow ago is tried once more without
// retries: a user's read waits for `timeout` once.
//
// Redirects. Signed requests (S3 with credentials) are never redirected: libcurl would
// send the session token and x-amz-* headers to wherever the Location points. A 3xx is
// then an error naming where it pointed. Requests carrying a bearer token (the Hub) are
// not redirected either: the caller reads the Location (HttpHead) and decides. Unsigned requests
// follow up to 5 redirects, only to http(s) (to https only from an https URL); libcurl sends a
// URL's credentials only to the host and port it was given for (CURLOPT_UNRESTRICTED_AUTH off), and
// the only other headers sent are If-Match / If-Unmodified-Since.
//
// Credentials for unsigned requests never come from the command line (UrlPasswordProblem):
// libcurl looks the host up in ~/.netrc (of the user the daemon runs as), and
// HttpOptions::password, when set, is the password of the user the URL names.
//
// S3 objects (HttpOptions::sigv4 with an access key) have every request signed with AWS
// Signature Version 4 by libcurl, with the `x-amz-content-sha256` header S3 requires
// (libcurl 7.88 does not add it) and `x-amz-security-token` for temporary credentials.
// Objects an S3 listing described are made with FromListing: no HEAD.
//
// Thread safety: every method may be called from any number of threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/source/byte_source.h"
#include "core/source/remote_options.h"

namespace ckptfs {

// `url` without any user:password@ part: what messages and stats may show, since
// credentials are never logged.
std::string RedactedUrl(const std::string& url);

// Empty, or why `url` may not be used: it carries a password (`user:password@host`),
// which every local user could read in `ps`, /proc/mounts (the mount's source) and shell
// history. The user name alone is fine; its password comes from ~/.netrc or
// CKPTFS_HTTP_PASSWORD (see HttpOptions::password). The message never shows the password.
std::string UrlPasswordProblem(const std::string& url);

// Empty if `name` (a file name an index or a listing gave) can be asked for as a file of
// its directory, else why not: empty, or, as it is or percent-decoded (repeatedly: some
// servers decode twice), a "." or ".." or holding '/', '\\', NUL or a control character.
// `..%2Fx` and `%2E%2E%2Fx` are refused like `../x`.
std::string UrlNameProblem(std::string_view name);

// `text` with one round of %XX decoded. A '%' without two hex digits after it stays as it
// is (a listing's name, checked by UrlNameProblem), or, with `strict`, makes it nullopt
// (an hf:// URL's revision or path, which must mean one thing).
std::optional<std::string> PercentDecode(std::string_view text, bool strict);

// `name` as one URL path segment: RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~)
// kept, every other byte %XX, so no name can add a segment or a query to a URL.
std::string EncodeUrlSegment(std::string_view name);

// A Content-Range header's value, "bytes FIRST-LAST/TOTAL".
struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;  // inclusive
  uint64_t total = 0;
};

// Parses "bytes FIRST-LAST/TOTAL" (decimal, FIRST <= LAST < TOTAL, no sign, no spaces
// inside); nullopt otherwise, "*" for the total or the range included.
std::optional<ContentRange> ParseContentRange(std::string_view value);

// A whole small answer: its status, headers and body.
struct HttpResponse {
  long status = 0;
  std::string body;
  std::string location;  // where a 3xx that was not followed pointed, without credentials
  // The final answer's headers, names in lower case, values trimmed, in order (at most
  // kMaxHeaders, each cut at kMaxHeaderBytes: a server cannot grow them without bound).
  std::vector<std::pair<std::string, std::string>> headers;
  static constexpr size_t kMaxHeaders = 64;
  static constexpr size_t kMaxHeaderBytes = 8192;
  // The first value of header `lower_name`, or empty.
  std::string Header(std::string_view lower_name) const;
};

// GETs all of `url` (a listing, an error document) with `options` (signed if they say
// so). Connection errors, 429 and 5xx are retried for up to connect_timeout, like
// HttpSource::Open; the transfer itself may take up to `timeout`. Any other answer is
// returned whatever its status, for the caller to read. IoError "NAME: URL: why" when the
// server cannot be reached, keeps failing, or sends more than `max_bytes`.
Result<HttpResponse> HttpGet(const std::string& url, const std::string& name,
                             const HttpOptions& options, uint64_t max_bytes);
// HttpGet's HEAD: the status and headers, no body.
Result<HttpResponse> HttpHead(const std::string& url, const std::string& name,
                              const HttpOptions& options);

class HttpSource final : public ByteSource {
 public:
  // HEADs `url`. NotFound for a 404 (so callers can probe optional files), IoError with
  // errno EACCES for a 403 ("access denied"), IoError when the server cannot be reached
  // within connect_timeout or answers otherwise. Messages name `name` and `shown_url`
  // (default: `url` without credentials).
  static Result<std::unique_ptr<HttpSource>> Open(std::string url, std::string name,
                                                  HttpOptions options = {},
                                                  std::string shown_url = {});
  // An object whose size, ETag and modification time are already known (from an S3
  // listing): makes no request. An empty or weak `etag` leaves reads unconditional; each
  // answer's ETag (a weak one) and Last-Modified (to the second, against `mtime`) are then
  // compared with the listing's.
  static std::unique_ptr<HttpSource> FromListing(std::string url, std::string name, uint64_t size,
                                                 const std::string& etag, HttpOptions options = {},
                                                 struct timespec mtime = {});
  ~HttpSource() override;

  uint64_t Size() const override { return size_; }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
  const std::string& Name() const override { return name_; }
  // The Last-Modified the HEAD (or the listing) gave; {0, 0} without one.
  struct timespec MTime() const override {
    return mtime_;
  }
  // Opening is over: HttpOptions::open_deadline no longer applies.
  void BeginServing() override { opening_.store(false, std::memory_order_release); }
  // HttpOptions::timeout: how long one read may take, retries included.
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // How long a failed range is remembered (see the top of this file): the kernel's own
  // retry comes within milliseconds; a reader asking again later asks the server.
  static constexpr std::chrono::milliseconds kRecentFailureWindow{2000};

  // "URL\nVALIDATOR\nSIZE": the URL without credentials, the strong ETag (else
  // Last-Modified, else empty: a weak ETag is compared on reads but names no bytes) and
  // the size in bytes. Equal identities mean the same bytes: a key for caches of fetched
  // bytes.
  std::string Identity() const override;

  // Whether the server gave anything besides the size to tell a replaced object from the
  // mounted one (an ETag, strong or weak, or a Last-Modified).
  bool HasValidator() const { return !validator_.empty(); }
  // Whether Identity() names these very bytes (a strong ETag or a Last-Modified): only then
  // may blocks be kept across mounts (--cache-dir).
  bool NamesItsBytes() const { return validator_is_etag_ || !last_modified_.empty(); }

 private:
  class Handle;
  HttpSource(std::string url, std::string name, HttpOptions options);

  struct RecentFailure {
    uint64_t offset = 0;
    uint64_t length = 0;
    std::chrono::steady_clock::time_point at;
    Status status;
  };

  void SetValidator(const std::string& etag, const std::string& last_modified);
  static std::unique_ptr<Handle> Acquire();
  static void Release(std::unique_ptr<Handle> handle);
  // When a read starting now must end: `timeout` from now, and the open deadline while
  // opening.
  std::chrono::steady_clock::time_point ReadDeadline(
      std::chrono::steady_clock::time_point now) const;
  // The range request and its retries; *timed_out when it failed for want of time.
  Status Fetch(uint64_t offset, std::span<uint8_t> out,
               std::chrono::steady_clock::time_point deadline, bool retry, bool* timed_out) const;
  std::optional<RecentFailure> FindRecentFailure(uint64_t offset, uint64_t length) const;
  void NoteResult(uint64_t offset, uint64_t length, const Status& status) const;

  std::string url_;
  std::string name_;
  HttpOptions options_;
  uint64_t size_ = 0;
  // What each answer must repeat (see the top of this file). Without a strong ETag,
  // `weak_etag_` and `last_modified_` are each compared when the server gave them, and
  // `listed_mtime_` (from an S3 listing) against the answer's Last-Modified.
  std::string validator_;           // the strong ETag; else all that is compared, for HasValidator
  std::string validator_header_;    // "If-Match: ..." or "If-Unmodified-Since: ...", or empty
  bool validator_is_etag_ = false;  // validator_ is a strong ETag
  std::string weak_etag_;
  std::string last_modified_;
  time_t listed_mtime_ = 0;
  struct timespec mtime_ = {};
  std::atomic<bool> opening_{true};
  mutable std::mutex failures_mu_;
  mutable std::vector<RecentFailure> failures_;  // guarded by failures_mu_; a few at most
};

}  // namespace ckptfs
