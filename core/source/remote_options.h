// What a user says about remote sources (http(s)://, s3:// and hf:// URLs): timeouts, the S3
// endpoint and addressing, and the disk cache of fetched bytes. Plain values, no
// behaviour: the CLI fills them and the opener hands them to the sources it makes.
// Credentials are not filled by the CLI: S3 ones come from the environment and ~/.aws
// when a source is opened (core/source/s3.h), land in HttpOptions::sigv4, and are never
// logged.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ckptfs {

// What AWS Signature Version 4 needs to sign a request to S3. Secrets: never print them.
struct AwsSigning {
  std::string region;      // "us-east-1"
  std::string access_key;  // empty: requests go unsigned (anonymous)
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
};

struct HttpOptions {
  std::chrono::milliseconds timeout{30'000};  // per read, retries included
  std::chrono::milliseconds connect_timeout{5'000};
  // Set by whoever opens a checkpoint (HttpDir, S3Dir): every request made while opening
  // (HEADs, listings, header reads, retries included) ends by then, however many objects
  // there are. The default (the clock's epoch): no such deadline.
  std::chrono::steady_clock::time_point open_deadline{};
  bool verify_tls = true;
  // The password for the user a URL names (`http://USER@host/...`), for servers with basic
  // or digest auth; the opener fills it from CKPTFS_HTTP_PASSWORD. Empty: ~/.netrc, if any,
  // has the say. A secret: never print it.
  std::string password;
  AwsSigning sigv4;  // S3 objects: every request signed for service "s3"
  // A Hugging Face token (hf:// sources), sent as `Authorization: Bearer ...`. A request
  // carrying it never follows a redirect (the Hub redirects weights to a CDN, which must
  // never see it): the hf:// source follows the ones it means to itself. A secret: never
  // print it.
  std::string bearer;
  // False: a 3xx is the answer (HttpResponse::location), never followed. The hf:// source
  // follows the Hub's redirects itself, knowing which carry its token.
  bool follow_redirects = true;
};

struct S3Options {
  // Base URL of an S3-compatible store ("http://127.0.0.1:9000"); empty: AWS itself,
  // https://s3.REGION.amazonaws.com.
  std::string endpoint;
  // Empty: AWS_REGION, then AWS_DEFAULT_REGION, then the profile's region, then us-east-1.
  std::string region;
  // Path style puts the bucket in the path (endpoint/bucket/key), virtual-host style in
  // the host name (bucket.endpoint/key). Auto: virtual host for AWS, path style for a
  // custom endpoint (what MinIO, Ceph and most S3-compatible stores expect).
  enum class Addressing { kAuto, kPath, kVirtualHost };
  Addressing addressing = Addressing::kAuto;
};

// hf:// sources (core/source/hf_hub.h). The token is not here: it comes from HF_TOKEN or
// the token file when a source is opened, as huggingface_hub finds it.
struct HubOptions {
  // The Hub's base URL; empty: HF_ENDPOINT, else https://huggingface.co.
  std::string endpoint;
};

struct RemoteOptions {
  HttpOptions http;
  S3Options s3;
  HubOptions hub;
  // Where fetched bytes are kept across mounts; empty: no disk cache.
  std::string cache_dir;
  uint64_t cache_dir_bytes = uint64_t{10} << 30;
  // The directory may belong to others and be writable by them (a group's cache); entries
  // other users wrote are still never served. See DiskCache.
  bool cache_dir_shared = false;
};

}  // namespace ckptfs
