// S3 sources: `s3://bucket/prefix/` (a checkpoint directory) or `s3://bucket/key` (one
// weights file), read over HTTP(S) from AWS or any S3-compatible store.
//
// This file turns a URL and the user's options into requests, and answers into objects:
//  - ParseS3Url checks the URL strictly (bucket naming rules, no empty, `.` or `..` key
//    segments, no control characters); every refusal is one line naming the URL.
//  - ResolveS3 decides where requests go (AWS's regional endpoint, or --endpoint /
//    AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL), path or virtual-host addressing, the region,
//    and the credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
//    else the AWS_PROFILE (default "default") profile of AWS_SHARED_CREDENTIALS_FILE
//    (~/.aws/credentials) or AWS_CONFIG_FILE (~/.aws/config). None at all: anonymous,
//    unsigned requests.
//  - ListS3 pages through ListObjectsV2 (`delimiter=/`, continuation tokens) and
//    ParseListObjectsV2 reads one page's XML, strictly: any deviation is Corruption
//    naming the URL.
//  - S3CheckpointFiles keeps the objects directly under the prefix whose names are safe
//    file names; keys with a `/` after the prefix are subdirectories, not checkpoint files.
//
// Paths and queries are built in SigV4's canonical form (RFC 3986 unreserved characters
// kept, every other byte %XX in upper case, query parameters sorted), since libcurl 7.88
// signs them exactly as given. Credentials never appear in a message: URLs in messages
// are the s3:// URL with any user:password@ removed. Everything here is a pure function
// or reads only the environment it is handed; all of it is safe to call from any thread.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/source/remote_options.h"
#include "core/status.h"

namespace ckptfs {

bool IsS3Url(std::string_view url);

struct S3Url {
  std::string bucket;
  std::string key;  // "" (the bucket), "prefix/" (a directory) or "prefix/name" (one object)

  bool IsDirectory() const { return key.empty() || key.back() == '/'; }
  std::string ToString() const { return "s3://" + bucket + "/" + key; }
};

// InvalidArgument naming the URL (without credentials) unless `url` is
// s3://BUCKET[/KEY]. A KEY not ending in '/' whose last segment is not a weights file
// (.safetensors, .bin, .pt, .pth, optionally .zst) is taken as a directory: "s3://b/llama"
// means s3://b/llama/.
Result<S3Url> ParseS3Url(const std::string& url);

// SigV4 / RFC 3986 encoding: unreserved characters (A-Z a-z 0-9 - _ . ~) as they are,
// every other byte as %XX; '/' kept when `keep_slash` (object keys in paths).
std::string S3Encode(std::string_view text, bool keep_slash);

// Where and how requests for one bucket go. Secrets live in `http.sigv4`: never print it.
struct S3Target {
  std::string base;  // "https://s3.us-east-1.amazonaws.com", "https://b.s3.us-east-1..."
  std::string bucket;
  bool virtual_host = false;  // the bucket is in `base`'s host name
  HttpOptions http;           // signing filled in (access_key empty: anonymous)

  // The URL of `key` (raw, encoded here).
  std::string ObjectUrl(std::string_view key) const;
  // ListObjectsV2 of `prefix` with delimiter '/', from `continuation_token` if not empty.
  std::string ListUrl(std::string_view prefix, std::string_view continuation_token) const;
};

// Looks up environment variables; ::getenv in production, a map in tests.
using EnvLookup = std::function<const char*(const char*)>;

// The target for `url` with the user's options and the environment: endpoint, addressing,
// region and credentials as described at the top of this file. InvalidArgument for a bad
// endpoint or region, an unusable credentials file, or a named profile that does not
// exist; the message never holds a secret.
Result<S3Target> ResolveS3(const S3Url& url, const RemoteOptions& remote,
                           const EnvLookup& env = ::getenv);

// One INI file (~/.aws/credentials, ~/.aws/config): section -> key -> value. Comment
// lines start with '#' or ';'; indented lines (nested settings) are skipped.
using IniFile =
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>;
IniFile ParseIni(std::string_view text);

struct S3Object {
  std::string key;
  uint64_t size = 0;
  std::string etag;           // as S3 gives it, quotes included; may be empty
  int64_t last_modified = 0;  // LastModified, seconds since the epoch; 0 if absent or unreadable
};

struct S3ListPage {
  std::vector<S3Object> objects;
  std::vector<std::string> prefixes;  // CommonPrefixes (delimiter '/'): "prefix/sub/"

  bool truncated = false;
  std::string next_token;  // set when truncated
};

// One ListObjectsV2 answer. Corruption naming `shown_url` unless it is well-formed XML with
// a ListBucketResult root, an IsTruncated of true/false (with a NextContinuationToken when
// true), and Contents each with a Key and a decimal Size below 2^63. A LastModified
// that is not ISO 8601 UTC ("2024-05-01T12:00:00.000Z") is ignored: it only dates files.
Result<S3ListPage> ParseListObjectsV2(std::string_view xml, const std::string& shown_url);

// The Code of an S3 error document ("NoSuchBucket"), or empty.
std::string S3ErrorCode(std::string_view xml);

// Every object directly under `url`'s prefix, across all pages, and (into `prefixes` when
// given) its CommonPrefixes. NotFound for a missing bucket, IoError (EACCES) "access
// denied" for a 403, IoError when the endpoint cannot be reached; each one line naming the
// s3:// URL.
Result<std::vector<S3Object>> ListS3(const S3Target& target, const S3Url& url,
                                     std::vector<std::string>* prefixes = nullptr);

// The subdirectory names of `prefix` among CommonPrefixes `prefixes` ("prefix/sub/" ->
// "sub"), kept under the same rule as S3CheckpointFiles' names. Sorted, each once.
std::vector<std::string> S3SubdirectoryNames(const std::string& prefix,
                                             const std::vector<std::string>& prefixes);

// The objects of `objects` that are files of the directory `prefix`: name = key after
// the prefix, kept only if at most 255 bytes and a plain name even once percent-decoded
// (UrlNameProblem: non-empty, not "." or "..", no '/', '\', NUL or control characters). Sorted by
// name; (name, object) pairs.
std::vector<std::pair<std::string, S3Object>> S3CheckpointFiles(const std::string& prefix,
                                                                std::vector<S3Object> objects);

}  // namespace ckptfs
