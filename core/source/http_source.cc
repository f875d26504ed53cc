#include "core/source/http_source.h"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
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
  std::string content_range;  // the header's value, or empty
  bool had_content_range = false;
  int64_t content_length = -1;  // -1: not said
  std::string location;         // a 3xx's Location, without credentials
  // Every header of the final answer, when the caller wants them (HttpGet, HttpHead).
  std::vector<std::pair<std::string, std::string>>* headers = nullptr;
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
    t->content_range.clear();
    t->had_content_range = false;
    if (t->headers != nullptr) t->headers->clear();
    return line.size();
  }
  // Every header, for callers that read more than the validators (the Hub's X-* ones).
  const size_t colon = line.find(':');
  if (t->headers != nullptr && colon < HttpResponse::kMaxHeaderBytes &&
      t->headers->size() < HttpResponse::kMaxHeaders) {
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = HeaderValue(line.substr(0, HttpResponse::kMaxHeaderBytes), colon + 1);
    t->headers->emplace_back(std::move(name), std::move(value));
  }
  if (is("content-range:")) {
    // Two of them is an answer with no one meaning: kept as unparseable.
    t->content_range = t->had_content_range ? "(several)" : HeaderValue(line, 14);
    t->had_content_range = true;
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

// Describe, and where an unfollowed redirect of a signed request pointed.
std::string Describe(CURLcode rc, long code, const Transfer& t, const HttpOptions& options) {
  std::string why = Describe(rc, code);
  if (rc == CURLE_OK && code >= 300 && code <= 399 && !options.sigv4.access_key.empty()) {
    why += " redirect" + (t.location.empty() ? std::string() : " to " + t.location) +
           " not followed (signed requests are never redirected: the credentials would go "
           "with them)";
  }
  return why;
}

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Why `name` is no plain name in its directory, or empty.
std::string SegmentProblem(std::string_view name) {
  if (name.empty()) return "empty";
  if (name == "." || name == "..") return "a '.' or '..' path segment";
  if (name.find_first_of("/\\") != std::string_view::npos) return "it holds a '/' or '\\'";
  if (std::any_of(name.begin(), name.end(),
                  [](char c) { return IsControl(static_cast<unsigned char>(c)); })) {
    return "it holds NUL or a control character";
  }
  return "";
}

// Decimal digits only, at most 19 of them (below 2^63).
bool ParseDecimal(std::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != text.npos) {
    return false;
  }
  uint64_t v = 0;
  for (const char c : text) v = v * 10 + static_cast<uint64_t>(c - '0');
  *value = v;
  return true;
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view text, bool strict) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const bool escape = text[i] == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
                        HexValue(text[i + 2]) >= 0;
    if (escape) {
      out += static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2]));
      i += 2;
    } else if (text[i] == '%' && strict) {
      return std::nullopt;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string UrlNameProblem(std::string_view name) {
  std::string decoded(name);
  // Each round a server may decode once more; a name that still changes after a few
  // rounds is refused rather than followed further.
  for (int round = 0; round < 4; ++round) {
    const std::string problem = SegmentProblem(decoded);
    if (!problem.empty()) {
      return round == 0 ? problem
                        : problem + " once percent-decoded (\"" + decoded.substr(0, 200) + "\")";
    }
    std::string next = *PercentDecode(decoded, false);
    if (next == decoded) return "";
    decoded = std::move(next);
  }
  return "it is percent-encoded more than 3 times over";
}

std::string EncodeUrlSegment(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(name.size());
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<ContentRange> ParseContentRange(std::string_view value) {
  constexpr std::string_view kUnit = "bytes ";
  if (value.substr(0, kUnit.size()) != kUnit) return std::nullopt;
  value.remove_prefix(kUnit.size());
  const size_t dash = value.find('-');
  const size_t slash = value.find('/');
  if (dash == value.npos || slash == value.npos || slash < dash) return std::nullopt;
  ContentRange range;
  if (!ParseDecimal(value.substr(0, dash), &range.first) ||
      !ParseDecimal(value.substr(dash + 1, slash - dash - 1), &range.last) ||
      !ParseDecimal(value.substr(slash + 1), &range.total) || range.first > range.last ||
      range.last >= range.total) {
    return std::nullopt;
  }
  return range;
}

std::string RedactedUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t host = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t at = url.find('@', host);
  const size_t slash = url.find('/', host);
  if (at == std::string::npos || (slash != std::string::npos && at > slash)) return url;
  return url.substr(0, host) + url.substr(at + 1);
}

std::string UrlPasswordProblem(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t host = scheme == std::string::npos ? 0 : scheme + 3;
  const std::string authority = url.substr(host, url.find_first_of("/?#", host) - host);
  const size_t at = authority.rfind('@');
  if (at == std::string::npos || authority.find(':') > at) return "";  // none, or a user alone
  return RedactedUrl(url) +
         ": a password in the URL would be visible to every local user (ps, /proc/mounts); "
         "give the user alone (http://USER@host/...) and the password in ~/.netrc or "
         "CKPTFS_HTTP_PASSWORD";
}

namespace {

// What every request sets the same way; Perform adds the rest after a curl_easy_reset, so
// nothing of a handle's previous request (method, range, credentials) carries over.
void ConfigureHandle(CURL* curl) {
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  // Blocks are 1 MiB: receive in large pieces, not curl's default 16 KiB (64 system calls
  // and callbacks per block).
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L << 10);
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

// Idle handles beyond this are closed: the fetch workers (PrefetchSettings::fetch_threads,
// 64) and FUSE threads (16) that can be in a request at once.
constexpr size_t kMaxIdleHandles = 64 + 16;

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
  const AwsSigning& aws = options.sigv4;
  if (aws.access_key.empty()) {
    // Unsigned: follow, but never from https down to http, nor to another scheme; the
    // URL's user:password goes to its own host and port only (curl's default, kept here
    // on purpose).
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(curl, CURLOPT_UNRESTRICTED_AUTH, 0L);
    curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR,
                     request.url->rfind("https://", 0) == 0 ? "https" : "http,https");
    curl_easy_setopt(curl, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_OPTIONAL));
    if (!options.password.empty()) {
      curl_easy_setopt(curl, CURLOPT_PASSWORD, options.password.c_str());
    }
  } else {
    // Signed: libcurl would keep sending the x-amz-* headers (the session token among
    // them) to any host a Location names, and a signature is only good for the URL it
    // signs anyway. A redirect is an error.
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  }
  // A bearer token goes to the URL asked for and nowhere else: no redirect is followed
  // (the hf:// source reads the Location and follows it without the token).
  if (!options.bearer.empty() || !options.follow_redirects) {
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  }
  if (!request.range.empty()) {
    curl_easy_setopt(curl, CURLOPT_RANGE, request.range.c_str());
  } else if (!request.whole) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);  // HEAD
  }
  curl_slist* headers = nullptr;
  if (!request.extra_header.empty()) {
    headers = curl_slist_append(headers, request.extra_header.c_str());
  }
  std::string bearer_header;
  if (!options.bearer.empty()) {
    bearer_header = "Authorization: Bearer " + options.bearer;
    headers = curl_slist_append(headers, bearer_header.c_str());
  }
  std::string sigv4_provider, token_header;
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
  curl_off_t length = -1;
  curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  t->content_length = length;
  char* location = nullptr;
  if (*code >= 300 && *code <= 399 &&
      curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location) {
    t->location = RedactedUrl(location);
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  std::fill(bearer_header.begin(), bearer_header.end(), '\0');
  // The handle goes back to a pool: leave no secret in it.
  curl_easy_setopt(curl, CURLOPT_USERNAME, nullptr);
  curl_easy_setopt(curl, CURLOPT_PASSWORD, nullptr);
  return rc;
}

}  // namespace

void HttpSource::SetValidator(const std::string& etag, const std::string& last_modified) {
  if (!etag.empty() && etag.rfind("W/", 0) != 0) {
    validator_ = etag;
    validator_header_ = "If-Match: " + etag;
    validator_is_etag_ = true;
    return;
  }
  // A weak ETag cannot be sent as If-Match (which compares strongly: it would never
  // match), and neither it nor a time to the second proves the bytes alone: every one the
  // server gives is compared on every answer, so a change of any of them is seen.
  weak_etag_ = etag;
  last_modified_ = last_modified;
  if (!last_modified.empty()) validator_header_ = "If-Unmodified-Since: " + last_modified;
  validator_ = weak_etag_;
  if (!last_modified_.empty()) validator_ += (validator_.empty() ? "" : " ") + last_modified_;
}

namespace {

// `deadline`, or the open deadline if that comes first.
Clock::time_point WithOpenDeadline(Clock::time_point deadline, const HttpOptions& options) {
  if (options.open_deadline == Clock::time_point{}) return deadline;
  return std::min(deadline, options.open_deadline);
}

std::string OpenDeadlineNote(const HttpOptions& options, Clock::time_point deadline) {
  if (options.open_deadline == Clock::time_point{} || deadline < options.open_deadline) return "";
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%g",
                std::chrono::duration<double>(options.timeout).count());
  return std::string(" (opening a checkpoint may take --timeout, ") + seconds + " s, in all)";
}

}  // namespace

Result<std::unique_ptr<HttpSource>> HttpSource::Open(std::string url, std::string name,
                                                     HttpOptions options, std::string shown_url) {
  GlobalInit();
  std::unique_ptr<HttpSource> source(new HttpSource(std::move(url), std::move(name), options));
  const std::string shown = shown_url.empty() ? RedactedUrl(source->url_) : shown_url;
  // Opening is what a mount waits on: a server that is down should be said at once, not
  // after a read's worth of retries.
  const auto deadline =
      WithOpenDeadline(Clock::now() + std::min(options.timeout, options.connect_timeout), options);
  milliseconds backoff(50);
  for (;;) {
    Transfer t;
    long code = 0;
    const auto budget = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (budget.count() <= 0) {
      return Status::IoError(source->name_ + ": " + shown + ": no answer in time" +
                             OpenDeadlineNote(options, deadline));
    }
    auto handle = Acquire();
    Request head;
    head.url = &source->url_;
    const CURLcode rc = Perform(handle->curl, head, options, budget, &t, &code);
    Release(std::move(handle));
    if (rc == CURLE_OK && code == 200) {
      if (t.content_length < 0) {
        return Status::IoError(source->name_ + ": the server gives no size");
      }
      source->size_ = static_cast<uint64_t>(t.content_length);
      source->SetValidator(t.etag, t.last_modified);
      // An HTTP date (RFC 9110); one curl cannot parse leaves the time unknown.
      const time_t modified = curl_getdate(t.last_modified.c_str(), nullptr);
      if (!t.last_modified.empty() && modified > 0) source->mtime_.tv_sec = modified;
      return source;
    }
    if (rc == CURLE_OK && code == 404) {
      return Status::NotFound(source->name_ + ": not found at " + shown);
    }
    if (rc == CURLE_OK && code == 403) {
      // Servers answer 403 for a directory asked for as a file (S3 website hosting, nginx
      // without autoindex): a SOURCE that is a directory is named with its trailing '/'.
      const bool maybe_dir = !shown.empty() && shown.back() != '/';
      return Status::IoError(
          source->name_ + ": access denied to " + shown + " (HTTP 403)" +
              (maybe_dir ? "; if it is a directory, end the URL with '/': " + shown + "/" : ""),
          EACCES);
    }
    if (!Retryable(rc, code) || Clock::now() + backoff >= deadline) {
      // S3 answers a signed HEAD for a bucket of another region with a bodiless 301 or 400.
      const bool region = !options.sigv4.access_key.empty() && rc == CURLE_OK &&
                          (code == 301 || code == 400) && t.location.empty();
      return Status::IoError(source->name_ + ": " + shown + ": " + Describe(rc, code, t, options) +
                             (region ? " (is the bucket in region " + options.sigv4.region +
                                           "? give its region with --region)"
                                     : OpenDeadlineNote(options, deadline)));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

std::unique_ptr<HttpSource> HttpSource::FromListing(std::string url, std::string name,
                                                    uint64_t size, const std::string& etag,
                                                    HttpOptions options, struct timespec mtime) {
  GlobalInit();
  std::unique_ptr<HttpSource> source(new HttpSource(std::move(url), std::move(name), options));
  source->size_ = size;
  source->mtime_ = mtime;
  source->SetValidator(etag, "");
  if (!source->validator_is_etag_ && mtime.tv_sec > 0) {
    // S3 always lists a LastModified; in ISO 8601, where answers give an HTTP date: the two
    // are compared as times, to the second.
    source->listed_mtime_ = mtime.tv_sec;
    const std::string listed = "listed " + std::to_string(mtime.tv_sec);
    source->validator_ += (source->validator_.empty() ? "" : " ") + listed;
  }
  return source;
}

std::string HttpSource::Identity() const {
  // A weak ETag (or a listing's time) is compared on every answer but names no bytes for
  // caches to keep across mounts: only a strong ETag or a Last-Modified does, as before.
  return RedactedUrl(url_) + "\n" + (validator_is_etag_ ? validator_ : last_modified_) + "\n" +
         std::to_string(size_);
}

namespace {

// HttpGet and HttpHead.
Result<HttpResponse> Ask(const std::string& url, const std::string& name,
                         const HttpOptions& options, uint64_t max_bytes, bool head) {
  GlobalInit();
  const auto start = Clock::now();
  const auto deadline = WithOpenDeadline(start + options.timeout, options);
  const auto retry_deadline =
      WithOpenDeadline(start + std::min(options.timeout, options.connect_timeout), options);
  milliseconds backoff(50);
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return Status::IoError(name + ": cannot start a transfer");
  for (;;) {
    HttpResponse response;
    Transfer t;
    t.grow = &response.body;
    t.capacity = max_bytes;
    t.headers = &response.headers;
    Request get;
    get.url = &url;
    get.whole = !head;
    const auto budget = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (budget.count() <= 0) {
      return Status::IoError(name + ": " + RedactedUrl(url) + ": no answer in time" +
                             OpenDeadlineNote(options, deadline));
    }
    const CURLcode rc = Perform(curl.get(), get, options, budget, &t, &response.status);
    if (t.overflow) {
      return Status::IoError(name + ": " + RedactedUrl(url) + ": answer larger than " +
                             std::to_string(max_bytes) + " bytes");
    }
    if (rc == CURLE_OK && !Retryable(rc, response.status)) {
      response.location = std::move(t.location);
      return response;
    }
    if (!Retryable(rc, response.status) || Clock::now() + backoff >= retry_deadline) {
      return Status::IoError(name + ": " + RedactedUrl(url) + ": " +
                             Describe(rc, response.status, t, options) +
                             OpenDeadlineNote(options, deadline));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

}  // namespace

std::string HttpResponse::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return "";
}

Result<HttpResponse> HttpGet(const std::string& url, const std::string& name,
                             const HttpOptions& options, uint64_t max_bytes) {
  return Ask(url, name, options, max_bytes, /*head=*/false);
}

Result<HttpResponse> HttpHead(const std::string& url, const std::string& name,
                              const HttpOptions& options) {
  return Ask(url, name, options, 0, /*head=*/true);
}

namespace {

// What the answers for one object must repeat (HttpSource's members of the same names).
struct Validators {
  const std::string& strong_etag;  // empty: none
  const std::string& weak_etag;
  const std::string& last_modified;
  time_t listed_mtime = 0;
};

// Why the validators `t` carries are not those of the mounted version, or empty.
std::string ValidatorChange(const Validators& v, const Transfer& t) {
  auto changed = [](const char* header, const std::string& said, const std::string& was) {
    return std::string(header) + " " + (said.empty() ? "missing" : said.substr(0, 100)) + ", was " +
           was.substr(0, 100);
  };
  if (!v.strong_etag.empty()) {
    return t.etag == v.strong_etag ? "" : changed("ETag", t.etag, v.strong_etag);
  }
  if (!v.weak_etag.empty() && t.etag != v.weak_etag) return changed("ETag", t.etag, v.weak_etag);
  if (!v.last_modified.empty() && t.last_modified != v.last_modified) {
    return changed("Last-Modified", t.last_modified, v.last_modified);
  }
  if (v.listed_mtime > 0 && !t.last_modified.empty()) {
    const time_t said = curl_getdate(t.last_modified.c_str(), nullptr);
    if (said != v.listed_mtime) {
      return changed("Last-Modified", t.last_modified,
                     "the listing's " + std::to_string(v.listed_mtime) + " s since 1970");
    }
  }
  return "";
}

// Whether a 200 or 206 answer is the bytes [offset, offset + length) of the version of the
// object that was mounted (its size and `validators`). Every check is on what the server
// said about the bytes, before any of them is used.
Status CheckAnswer(const std::string& name, uint64_t size, const Validators& validators, long code,
                   const Transfer& t, uint64_t offset, uint64_t length) {
  const std::string asked = std::to_string(offset) + "-" + std::to_string(offset + length - 1) +
                            "/" + std::to_string(size);
  auto mismatch = [&](const std::string& what) {
    return Status::IoError(name + ": the server's answer for bytes " + asked + " " + what +
                           "; not served");
  };
  if (code == 206) {
    const std::optional<ContentRange> range = ParseContentRange(t.content_range);
    if (!range) {
      return mismatch(t.had_content_range ? "has a malformed Content-Range \"" +
                                                t.content_range.substr(0, 100) + "\""
                                          : "has no Content-Range");
    }
    if (range->first != offset || range->last != offset + length - 1 || range->total != size) {
      return mismatch("is bytes " + std::to_string(range->first) + "-" +
                      std::to_string(range->last) + "/" + std::to_string(range->total));
    }
  } else if (t.had_content_range) {
    return mismatch("is a 200 with a Content-Range");
  }
  if (t.content_length >= 0 && static_cast<uint64_t>(t.content_length) != length) {
    return mismatch("says it is " + std::to_string(t.content_length) + " bytes long");
  }
  if (t.got != length) {
    return mismatch("is short (" + std::to_string(t.got) + " bytes)");
  }
  if (const std::string change = ValidatorChange(validators, t); !change.empty()) {
    return Status::IoError(name + ": changed on the server since it was mounted (" + change +
                           "); not served");
  }
  return Status::Ok();
}

}  // namespace

Clock::time_point HttpSource::ReadDeadline(Clock::time_point now) const {
  const Clock::time_point deadline = now + options_.timeout;
  if (!opening_.load(std::memory_order_acquire)) return deadline;
  return WithOpenDeadline(deadline, options_);
}

std::optional<HttpSource::RecentFailure> HttpSource::FindRecentFailure(uint64_t offset,
                                                                       uint64_t length) const {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(failures_mu_);
  for (const RecentFailure& f : failures_) {
    if (f.offset == offset && f.length == length && now - f.at < kRecentFailureWindow) return f;
  }
  return std::nullopt;
}

void HttpSource::NoteResult(uint64_t offset, uint64_t length, const Status& status) const {
  constexpr size_t kMaxRemembered = 16;
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(failures_mu_);
  std::erase_if(failures_, [&](const RecentFailure& f) {
    return (f.offset == offset && f.length == length) || now - f.at >= kRecentFailureWindow;
  });
  if (status.ok()) return;
  if (failures_.size() >= kMaxRemembered) failures_.erase(failures_.begin());
  failures_.push_back({offset, length, now, status});
}

Status HttpSource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  if (length == 0) return Status::Ok();
  const std::span<uint8_t> out = sink.Fill();
  // The same range failed a moment ago: this is most likely the kernel asking again for
  // the read it was just refused, so it gets one try, without retries. (A range that timed
  // out is not asked for again at all: RemoteSource fails it at once.)
  const std::optional<RecentFailure> recent = FindRecentFailure(offset, out.size());
  bool timed_out = false;
  Status status = Fetch(offset, out, ReadDeadline(Clock::now()), /*retry=*/!recent, &timed_out);
  NoteResult(offset, out.size(), status);
  return status;
}

Status HttpSource::Fetch(uint64_t offset, std::span<uint8_t> out, Clock::time_point deadline,
                         bool retry, bool* timed_out) const {
  const uint64_t last = offset + out.size() - 1;
  const std::string range = std::to_string(offset) + "-" + std::to_string(last);
  const std::string failed = name_ + ": read of bytes " + range + " failed: ";
  milliseconds backoff(50);
  for (;;) {
    const auto budget = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (budget.count() <= 0) {
      *timed_out = true;
      return Status::IoError(failed + "no answer in time" + OpenDeadlineNote(options_, deadline),
                             ETIMEDOUT);
    }
    Transfer t;
    t.out = out.data();
    t.capacity = out.size();
    long code = 0;
    Request get;
    get.url = &url_;
    get.range = range;
    get.extra_header = validator_header_;
    auto handle = Acquire();
    const CURLcode rc = Perform(handle->curl, get, options_, budget, &t, &code);
    Release(std::move(handle));
    if (rc == CURLE_OK && code == 412) {
      return Status::IoError(name_ + ": changed on the server since it was mounted (HTTP 412)");
    }
    if (t.overflow || (rc == CURLE_OK && code == 200 && !(offset == 0 && out.size() == size_))) {
      return Status::IoError(name_ + ": the server does not honour range requests");
    }
    if (rc == CURLE_OK && (code == 206 || code == 200)) {
      static const std::string kNone;
      const Validators validators{validator_is_etag_ ? validator_ : kNone, weak_etag_,
                                  last_modified_, listed_mtime_};
      return CheckAnswer(name_, size_, validators, code, t, offset, out.size());
    }
    if (!retry || !Retryable(rc, code) || Clock::now() + backoff >= deadline) {
      *timed_out = rc == CURLE_OPERATION_TIMEDOUT;
      return Status::IoError(failed + Describe(rc, code, t, options_) +
                                 (*timed_out ? OpenDeadlineNote(options_, deadline) : ""),
                             *timed_out ? ETIMEDOUT : EIO);
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

}  // namespace ckptfs
