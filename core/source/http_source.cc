#include "core/source/http_source.h"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace ckptfs {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// What one request collects: the body into caller memory, and the validators.
struct Transfer {
  uint8_t* out = nullptr;       // caller memory of `capacity` bytes...
  std::string* grow = nullptr;  // ...or a string growing up to `capacity` bytes
  uint64_t capacity = 0;
  uint64_t got = 0;
  bool overflow = false;
  std::string etag;
  std::string last_modified;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * count;
  // More than asked for (a server ignoring Range): stop, rather than buffer the object.
  if (len > t->capacity - t->got) {
    t->overflow = true;
    return 0;
  }
  if (t->grow != nullptr) {
    t->grow->append(data, len);
  } else {
    std::memcpy(t->out + t->got, data, len);
  }
  t->got += len;
  return len;
}

std::string HeaderValue(std::string_view line, size_t name_len) {
  std::string_view v = line.substr(name_len);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) {
    v.remove_suffix(1);
  }
  return std::string(v);
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * count);
  auto is = [&](const char* name) {
    return line.size() > std::strlen(name) &&
           ::strncasecmp(line.data(), name, std::strlen(name)) == 0;
  };
  if (is("HTTP/")) {  // a new response (after a redirect or 100): forget the last one's
    t->etag.clear();
    t->last_modified.clear();
  } else if (is("etag:")) {
    t->etag = HeaderValue(line, 5);
  } else if (is("last-modified:")) {
    t->last_modified = HeaderValue(line, 14);
  }
  return line.size();
}

bool Retryable(CURLcode rc, long code) {
  switch (rc) {
    case CURLE_OK:
      return code == 429 || (code >= 500 && code <= 599);
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

std::string Describe(CURLcode rc, long code) {
  if (rc != CURLE_OK) return curl_easy_strerror(rc);
  return "HTTP " + std::to_string(code);
}

}  // namespace

std::string RedactedUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t host = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t at = url.find('@', host);
  const size_t slash = url.find('/', host);
  if (at == std::string::npos || (slash != std::string::npos && at > slash)) return url;
  return url.substr(0, host) + url.substr(at + 1);
}

namespace {

// What every request sets the same way; Perform adds the rest after a curl_easy_reset, so
// nothing of a handle's previous request (method, range, credentials) carries over.
void ConfigureHandle(CURL* curl) {
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  // Blocks are 1 MiB: receive in large pieces, not curl's default 16 KiB (64 system calls
  // and callbacks per block).
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L << 10);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
}

}  // namespace

class HttpSource::Handle {
 public:
  Handle() : curl(curl_easy_init()) {}
  ~Handle() { curl_easy_cleanup(curl); }
  CURL* curl;
};

HttpSource::HttpSource(std::string url, std::string name, HttpOptions options)
    : url_(std::move(url)), name_(std::move(name)), options_(options) {}

HttpSource::~HttpSource() = default;

namespace {

// Idle handles beyond this are closed: more than the fetch workers and FUSE threads that
// can be in a request at once.
constexpr size_t kMaxIdleHandles = 32;

// The process's idle handles. One pool for every object, not one per object: a handle
// keeps its connections, so a merged read across eight shards reuses a few connections
// instead of opening a set per shard (it opened about 75 with one pool per shard).
template <typename Handle>
struct IdlePool {
  std::mutex mu;
  std::vector<std::unique_ptr<Handle>> handles;  // guarded by mu
};

template <typename Handle>
IdlePool<Handle>& Idle() {
  static auto* pool = new IdlePool<Handle>;  // never destroyed: used until exit
  return *pool;
}

}  // namespace

std::unique_ptr<HttpSource::Handle> HttpSource::Acquire() {
  auto& pool = Idle<Handle>();
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (!pool.handles.empty()) {
      auto h = std::move(pool.handles.back());
      pool.handles.pop_back();
      return h;
    }
  }
  return std::make_unique<Handle>();
}

void HttpSource::Release(std::unique_ptr<Handle> handle) {
  auto& pool = Idle<Handle>();
  std::lock_guard<std::mutex> lock(pool.mu);
  if (pool.handles.size() < kMaxIdleHandles) pool.handles.push_back(std::move(handle));
}

namespace {

// SigV4 signs the hash of the body, and S3 wants it in `x-amz-content-sha256` (and
// refuses signed requests without it). libcurl 7.88 neither adds the header nor hashes
// anything itself: it signs every x-amz-* header it finds, so giving the header is enough
// for it to be signed. Every request here has an empty body.
constexpr char kEmptyBodySha256[] =
    "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Request {
  const std::string* url = nullptr;
  std::string range;         // "a-b" for a range GET; empty: HEAD, or GET of it all
  bool whole = false;        // GET of the whole body
  std::string extra_header;  // If-Match and the like, or empty
};

// One request on `curl`, body into `t` (none for HEAD). Returns curl's code; *code gets
// the HTTP status.
CURLcode Perform(CURL* curl, const Request& request, const HttpOptions& options,
                 milliseconds budget, Transfer* t, long* code) {
  curl_easy_reset(curl);  // keeps the handle's connections, drops its options
  ConfigureHandle(curl);
  curl_easy_setopt(curl, CURLOPT_URL, request.url->c_str());
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, options.verify_tls ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, options.verify_tls ? 2L : 0L);
  curl_easy_setopt(
      curl, CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(std::max<int64_t>(1, std::min(options.connect_timeout, budget).count())));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, budget.count())));
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, t);
  if (!request.range.empty()) {
    curl_easy_setopt(curl, CURLOPT_RANGE, request.range.c_str());
  } else if (!request.whole) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);  // HEAD
  }
  curl_slist* headers = nullptr;
  if (!request.extra_header.empty()) {
    headers = curl_slist_append(headers, request.extra_header.c_str());
  }
  std::string sigv4_provider, token_header;
  const AwsSigning& aws = options.sigv4;
  if (!aws.access_key.empty()) {
    // libcurl signs host, x-amz-date and every x-amz-* header; Range and If-Match are not
    // signed, which S3 allows. It signs the path and query exactly as given: callers build
    // them in SigV4's canonical form (see core/source/s3.h).
    sigv4_provider = "aws:amz:" + aws.region + ":s3";
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4_provider.c_str());
    curl_easy_setopt(curl, CURLOPT_USERNAME, aws.access_key.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, aws.secret_key.c_str());
    headers = curl_slist_append(headers, kEmptyBodySha256);
    if (!aws.session_token.empty()) {
      token_header = "x-amz-security-token: " + aws.session_token;
      headers = curl_slist_append(headers, token_header.c_str());
    }
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(curl);
  *code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, code);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  // The handle goes back to a pool: leave no secret in it.
  curl_easy_setopt(curl, CURLOPT_USERNAME, nullptr);
  curl_easy_setopt(curl, CURLOPT_PASSWORD, nullptr);
  return rc;
}

}  // namespace

void HttpSource::SetValidator(const std::string& etag, const std::string& last_modified) {
  // A weak ETag cannot be matched strongly; fall back on the modification time.
  if (!etag.empty() && etag.rfind("W/", 0) != 0) {
    validator_ = etag;
    validator_header_ = "If-Match: " + etag;
  } else if (!last_modified.empty()) {
    validator_ = last_modified;
    validator_header_ = "If-Unmodified-Since: " + last_modified;
  }
}

Result<std::unique_ptr<HttpSource>> HttpSource::Open(std::string url, std::string name,
                                                     HttpOptions options, std::string shown_url) {
  GlobalInit();
  std::unique_ptr<HttpSource> source(new HttpSource(std::move(url), std::move(name), options));
  const std::string shown = shown_url.empty() ? RedactedUrl(source->url_) : shown_url;
  // Opening is what a mount waits on: a server that is down should be said at once, not
  // after a read's worth of retries.
  const auto deadline = Clock::now() + std::min(options.timeout, options.connect_timeout);
  milliseconds backoff(50);
  for (;;) {
    auto handle = Acquire();
    Transfer t;
    long code = 0;
    const auto budget = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    Request head;
    head.url = &source->url_;
    const CURLcode rc = Perform(handle->curl, head, options, budget, &t, &code);
    curl_off_t length = -1;
    curl_easy_getinfo(handle->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    Release(std::move(handle));
    if (rc == CURLE_OK && code == 200) {
      if (length < 0) return Status::IoError(source->name_ + ": the server gives no size");
      source->size_ = static_cast<uint64_t>(length);
      source->SetValidator(t.etag, t.last_modified);
      return source;
    }
    if (rc == CURLE_OK && code == 404) {
      return Status::NotFound(source->name_ + ": not found at " + shown);
    }
    if (rc == CURLE_OK && code == 403) {
      return Status::IoError(source->name_ + ": access denied to " + shown + " (HTTP 403)", EACCES);
    }
    if (!Retryable(rc, code) || Clock::now() + backoff >= deadline) {
      // S3 answers a signed HEAD for a bucket of another region with a bodiless 301 or 400.
      const bool region =
          !options.sigv4.access_key.empty() && rc == CURLE_OK && (code == 301 || code == 400);
      return Status::IoError(source->name_ + ": " + shown + ": " + Describe(rc, code) +
                             (region ? " (is the bucket in region " + options.sigv4.region +
                                           "? give its region with --region)"
                                     : ""));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

std::unique_ptr<HttpSource> HttpSource::FromListing(std::string url, std::string name,
                                                    uint64_t size, const std::string& etag,
                                                    HttpOptions options) {
  GlobalInit();
  std::unique_ptr<HttpSource> source(new HttpSource(std::move(url), std::move(name), options));
  source->size_ = size;
  source->SetValidator(etag, "");
  return source;
}

std::string HttpSource::Identity() const {
  return RedactedUrl(url_) + "\n" + validator_ + "\n" + std::to_string(size_);
}

Result<HttpResponse> HttpGet(const std::string& url, const std::string& name,
                             const HttpOptions& options, uint64_t max_bytes) {
  GlobalInit();
  const auto start = Clock::now();
  const auto retry_deadline = start + std::min(options.timeout, options.connect_timeout);
  milliseconds backoff(50);
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return Status::IoError(name + ": cannot start a transfer");
  for (;;) {
    HttpResponse response;
    Transfer t;
    t.grow = &response.body;
    t.capacity = max_bytes;
    Request get;
    get.url = &url;
    get.whole = true;
    const auto budget =
        std::chrono::duration_cast<milliseconds>(start + options.timeout - Clock::now());
    const CURLcode rc = Perform(curl.get(), get, options, budget, &t, &response.status);
    if (t.overflow) {
      return Status::IoError(name + ": " + RedactedUrl(url) + ": answer larger than " +
                             std::to_string(max_bytes) + " bytes");
    }
    if (rc == CURLE_OK && !Retryable(rc, response.status)) return response;
    if (!Retryable(rc, response.status) || Clock::now() + backoff >= retry_deadline) {
      return Status::IoError(name + ": " + RedactedUrl(url) + ": " + Describe(rc, response.status));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

Status HttpSource::ReadAt(uint64_t offset, std::span<uint8_t> out) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, out.size()));
  if (out.empty()) return Status::Ok();
  const std::string range = std::to_string(offset) + "-" + std::to_string(offset + out.size() - 1);
  const auto deadline = Clock::now() + options_.timeout;
  milliseconds backoff(50);
  for (;;) {
    auto handle = Acquire();
    Transfer t;
    t.out = out.data();
    t.capacity = out.size();
    long code = 0;
    const auto budget = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    Request get;
    get.url = &url_;
    get.range = range;
    get.extra_header = validator_header_;
    const CURLcode rc = Perform(handle->curl, get, options_, budget, &t, &code);
    Release(std::move(handle));
    if (rc == CURLE_OK && code == 412) {
      return Status::IoError(name_ + ": changed on the server since it was mounted");
    }
    if (t.overflow || (rc == CURLE_OK && code == 200 && !(offset == 0 && out.size() == size_))) {
      return Status::IoError(name_ + ": the server does not honour range requests");
    }
    if (rc == CURLE_OK && (code == 206 || code == 200)) {
      if (t.got != out.size()) {
        return Status::IoError(name_ + ": short answer (" + std::to_string(t.got) + " of " +
                               std::to_string(out.size()) + " bytes)");
      }
      return Status::Ok();
    }
    if (!Retryable(rc, code) || Clock::now() + backoff >= deadline) {
      return Status::IoError(name_ + ": read of bytes " + range + " failed: " + Describe(rc, code));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

}  // namespace ckptfs
