#include "core/source/remote_dir.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "core/cache/disk_cache.h"
#include "core/source/remote_source.h"
#include "core/source/s3.h"

namespace ckptfs {
namespace {

// An object read through the block cache, the disk cache and parallel fetches once the
// mount serves (see RemoteSource). The first object of a mount whose server gives nothing
// but its size to compare is said once (a warning), for the mount and for `inspect`.
std::unique_ptr<ByteSource> CachedRemote(std::unique_ptr<HttpSource> object, ReadContext& context) {
  if (!object->HasValidator() &&
      context.unvalidated_objects.fetch_add(1, std::memory_order_relaxed) == 0 &&
      context.options().warn) {
    const std::string url = object->Identity().substr(0, object->Identity().find('\n'));
    context.options().warn(object->Name() + ": " + url +
                           ": the server gives no ETag or Last-Modified, so an object replaced "
                           "by one of the same size cannot be detected (only sizes are "
                           "compared; see docs/remote.md)");
  }
  std::string identity = object->Identity();
  const std::chrono::milliseconds timeout = object->timeout();
  // Blocks on disk could be of an older object of the same size, from an earlier mount,
  // unless the identity names these bytes.
  DiskCache* disk = object->NamesItsBytes() ? context.disk_cache() : nullptr;
  return std::make_unique<RemoteSource>(std::move(object), std::move(identity), context, disk,
                                        timeout);
}

// A server decodes what it is sent: "..%2Fx" would be "../x" to it.
Status CheckUrlName(const std::string& name) {
  if (const std::string problem = UrlNameProblem(name); !problem.empty()) {
    return Status::Corruption("\"" + name.substr(0, 200) +
                              "\" is not a plain file name inside the checkpoint directory (" +
                              problem + ")");
  }
  return Status::Ok();
}

// Objects asked for while opening, kept open for `open` (each is asked for once), and
// the names a server said it does not have. Shared by a SourceDir's functions.
struct Found {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<ByteSource>> open;
  std::set<std::string> missing;
};

constexpr uint64_t kMaxAutoindexBytes = 16ull << 20;

// "Mon, 23 Nov 2026 19:00:00 GMT" (nginx's autoindex mtime, RFC 1123); 0 if not that.
int64_t ParseHttpDate(const std::string& text) {
  struct tm tm = {};
  const char* end = ::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return 0;
  return static_cast<int64_t>(::timegm(&tm));
}

// The autoindex listing of directory URL `base`, or nullopt when the server gives none
// (403/404 for a directory, an HTML index, anything else).
Result<std::optional<HttpListing>> FetchAutoindex(const std::string& base,
                                                  const HttpOptions& http) {
  auto response = HttpGet(base, RedactedUrl(base), http, kMaxAutoindexBytes);
  if (!response.ok()) {
    // Too big or unreachable: an unreachable server fails the probes just after.
    if (response.status().code() == Status::Code::kIoError) return std::optional<HttpListing>();
    return response.status();
  }
  if (response->status != 200) return std::optional<HttpListing>();
  return ParseAutoindexJson(response->body);
}

// Fills `dir` from `listing`.
void ApplyListing(SourceDir& dir, HttpListing listing) {
  dir.files = std::move(listing.files);
  dir.dirs = std::move(listing.dirs);
  auto info = std::make_shared<const std::map<std::string, ListedInfo>>(std::move(listing.info));
  dir.info = [info](const std::string& name) -> Result<ListedInfo> {
    auto it = info->find(name);
    if (it == info->end()) return Status::NotFound(name + ": not in the listing");
    return it->second;
  };
}

// Adds to `dir.files` those of `names` the server has (it cannot list), sorted.
Status ProbeFiles(SourceDir& dir, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    CKPTFS_ASSIGN_OR_RETURN(bool there, dir.probe(name));
    if (there) dir.files.push_back(name);
  }
  std::sort(dir.files.begin(), dir.files.end());
  dir.files.erase(std::unique(dir.files.begin(), dir.files.end()), dir.files.end());
  return Status::Ok();
}

// The SourceDir of the HTTP directory `base` (ending in '/'). `url_of` maps a name to the
// URL asked for: one segment under `base`, except the file a URL named as written. A child
// directory (open_dir) without an autoindex listing is asked for `probe_names`, as SOURCE is.
SourceDir HttpDirAt(std::string base, std::string named_file, std::string named_url,
                    std::string shown, const HttpOptions& http, ReadContext& context,
                    std::shared_ptr<const std::vector<std::string>> probe_names) {
  auto url_of = [base, named_file, named_url](const std::string& name) {
    return !named_file.empty() && name == named_file ? named_url : base + EncodeUrlSegment(name);
  };
  auto found = std::make_shared<Found>();
  SourceDir dir;
  dir.path = std::move(shown);
  dir.remote = true;
  dir.probe = [url_of, found, http, &context](const std::string& name) -> Result<bool> {
    {
      std::lock_guard lock(found->mu);
      if (found->open.count(name)) return true;
      if (found->missing.count(name)) return false;
    }
    CKPTFS_RETURN_IF_ERROR(CheckUrlName(name));
    auto source = HttpSource::Open(url_of(name), name, http);
    std::lock_guard lock(found->mu);
    if (!source.ok()) {
      if (source.status().code() != Status::Code::kNotFound) return source.status();
      found->missing.insert(name);
      return false;
    }
    found->open.emplace(name, CachedRemote(std::move(source).value(), context));
    return true;
  };
  dir.open = [url_of, found, http,
              &context](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    {
      std::lock_guard lock(found->mu);
      auto it = found->open.find(name);
      if (it != found->open.end() && it->second) return std::move(it->second);
    }
    CKPTFS_RETURN_IF_ERROR(CheckUrlName(name));
    CKPTFS_ASSIGN_OR_RETURN(auto source, HttpSource::Open(url_of(name), name, http));
    return CachedRemote(std::move(source), context);
  };
  dir.open_dir = [base, shown = dir.path, http, &context,
                  probe_names](const std::string& name) -> Result<SourceDir> {
    CKPTFS_RETURN_IF_ERROR(CheckUrlName(name));
    const std::string child = base + EncodeUrlSegment(name) + "/";
    SourceDir sub = HttpDirAt(child, "", "", RedactedUrl(child), http, context, probe_names);
    CKPTFS_ASSIGN_OR_RETURN(std::optional<HttpListing> listing, FetchAutoindex(child, http));
    if (listing) {
      ApplyListing(sub, std::move(*listing));
    } else {
      CKPTFS_RETURN_IF_ERROR(ProbeFiles(sub, *probe_names));
    }
    return sub;
  };
  return dir;
}

// The SourceDir of S3 prefix `where` (a directory) from one listing.
Result<SourceDir> S3Listed(std::shared_ptr<const S3Target> target, const S3Url& where,
                           ReadContext& context);

// Opens object `prefix + name` (HEAD) as a file of the directory shown as `shown`.
Result<std::unique_ptr<ByteSource>> OpenS3Object(const S3Target& target, const std::string& prefix,
                                                 const std::string& name, const std::string& shown,
                                                 ReadContext& context) {
  CKPTFS_RETURN_IF_ERROR(CheckUrlName(name));
  CKPTFS_ASSIGN_OR_RETURN(
      auto object, HttpSource::Open(target.ObjectUrl(prefix + name), name, target.http, shown));
  return CachedRemote(std::move(object), context);
}

// A child prefix of `prefix`, for SourceDir::open_dir.
std::function<Result<SourceDir>(const std::string&)> S3Child(std::shared_ptr<const S3Target> target,
                                                             S3Url where, ReadContext& context) {
  return [target, where, &context](const std::string& name) -> Result<SourceDir> {
    CKPTFS_RETURN_IF_ERROR(CheckUrlName(name));
    S3Url child{where.bucket, where.key + name + "/"};
    return S3Listed(target, child, context);
  };
}

Result<SourceDir> S3Listed(std::shared_ptr<const S3Target> target, const S3Url& where,
                           ReadContext& context) {
  SourceDir dir;
  dir.path = where.ToString();
  dir.remote = true;
  auto listed = std::make_shared<std::map<std::string, S3Object>>();
  std::vector<std::string> prefixes;
  CKPTFS_ASSIGN_OR_RETURN(std::vector<S3Object> objects, ListS3(*target, where, &prefixes));
  for (auto& [name, object] : S3CheckpointFiles(where.key, std::move(objects))) {
    dir.files.push_back(name);
    listed->emplace(name, std::move(object));
  }
  dir.dirs = S3SubdirectoryNames(where.key, prefixes);
  if (dir.files.empty() && dir.dirs.empty()) {
    return Status::NotFound(dir.path + ": no objects under this prefix");
  }
  // Sizes, times and ETags as listed; a subdirectory has none of its own.
  dir.info = [listed](const std::string& name) -> Result<ListedInfo> {
    auto it = listed->find(name);
    if (it == listed->end()) return ListedInfo{};
    return ListedInfo{it->second.size, timespec{it->second.last_modified, 0}, it->second.etag};
  };
  dir.open = [target, listed, shown = dir.path,
              &context](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    auto it = listed->find(name);
    if (it == listed->end()) return Status::NotFound(name + ": not in " + shown);
    const S3Object& o = it->second;
    return CachedRemote(HttpSource::FromListing(target->ObjectUrl(o.key), name, o.size, o.etag,
                                                target->http, timespec{o.last_modified, 0}),
                        context);
  };
  dir.open_dir = S3Child(target, where, context);
  return dir;
}

// s3://bucket/dir/name: the object `name` in prefix `dir/`, HEADed; its siblings are
// HEADed when asked for. `named` is `name` whether or not the object exists (a prefix).
Result<SourceDir> S3Named(std::shared_ptr<const S3Target> target, const S3Url& where,
                          ReadContext& context) {
  const size_t slash = where.key.rfind('/');
  const std::string prefix = slash == std::string::npos ? "" : where.key.substr(0, slash + 1);
  const std::string name = where.key.substr(prefix.size());
  SourceDir dir;
  dir.path = where.ToString();
  dir.remote = true;
  dir.named = name;
  auto found = std::make_shared<Found>();
  auto object = OpenS3Object(*target, prefix, name, dir.path, context);
  if (object.ok()) {
    found->open.emplace(name, std::move(object).value());
    dir.files.push_back(name);
  } else if (object.status().code() != Status::Code::kNotFound) {
    return object.status();
  }
  const std::string shown = dir.path;
  dir.probe = [target, prefix, shown, found, &context](const std::string& other) -> Result<bool> {
    {
      std::lock_guard lock(found->mu);
      if (found->open.count(other)) return true;
      if (found->missing.count(other)) return false;
    }
    auto sibling = OpenS3Object(*target, prefix, other, shown, context);
    std::lock_guard lock(found->mu);
    if (!sibling.ok()) {
      if (sibling.status().code() != Status::Code::kNotFound) return sibling.status();
      found->missing.insert(other);
      return false;
    }
    found->open.emplace(other, std::move(sibling).value());
    return true;
  };
  dir.open = [target, prefix, shown, found,
              &context](const std::string& other) -> Result<std::unique_ptr<ByteSource>> {
    {
      std::lock_guard lock(found->mu);
      auto it = found->open.find(other);
      if (it != found->open.end() && it->second) return std::move(it->second);
    }
    return OpenS3Object(*target, prefix, other, shown, context);
  };
  dir.open_dir = S3Child(target, S3Url{where.bucket, prefix}, context);
  return dir;
}

}  // namespace

std::optional<HttpListing> ParseAutoindexJson(std::string_view body) {
  // An item's fields are at depth 2: deeper values are dropped as parsed, so a hostile
  // listing never becomes a deep tree (core/encoding/ordered_json.h says why that matters;
  // this layer lies below it).
  const nlohmann::json items = nlohmann::json::parse(
      body, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) { return depth <= 2; },
      /*allow_exceptions=*/false);
  if (!items.is_array()) return std::nullopt;
  HttpListing listing;
  for (const nlohmann::json& item : items) {
    if (!item.is_object()) return std::nullopt;
    auto name = item.find("name");
    auto type = item.find("type");
    if (name == item.end() || !name->is_string() || type == item.end() || !type->is_string()) {
      return std::nullopt;
    }
    const std::string n = name->get<std::string>();
    // A name listed twice (nginx never does) keeps its first entry: a later one must not
    // make it a file and a directory at once, nor show it twice.
    if (n.size() > 255 || !UrlNameProblem(n).empty() || listing.info.count(n)) continue;
    ListedInfo info;
    if (auto size = item.find("size"); size != item.end() && size->is_number_unsigned()) {
      info.size = size->get<uint64_t>();
    }
    if (auto mtime = item.find("mtime"); mtime != item.end() && mtime->is_string()) {
      info.mtime.tv_sec = ParseHttpDate(mtime->get<std::string>());
    }
    if (*type == "directory") {
      listing.dirs.push_back(n);
    } else if (*type == "file") {
      listing.files.push_back(n);
    } else {
      continue;
    }
    listing.info.emplace(n, info);
  }
  std::sort(listing.files.begin(), listing.files.end());
  std::sort(listing.dirs.begin(), listing.dirs.end());
  return listing;
}

bool IsUrl(std::string_view path) {
  return path.rfind("http://", 0) == 0 || path.rfind("https://", 0) == 0 || IsS3Url(path) ||
         path.rfind("hf://", 0) == 0;
}

Status OpenDiskCache(const RemoteOptions& remote, ReadContext& context) {
  if (remote.cache_dir.empty() || context.disk_cache()) return Status::Ok();
  CKPTFS_ASSIGN_OR_RETURN(
      auto disk, DiskCache::Open(remote.cache_dir, remote.cache_dir_bytes, context.options().warn,
                                 remote.cache_dir_shared ? DiskCache::Sharing::kShared
                                                         : DiskCache::Sharing::kPrivate));
  context.SetDiskCache(std::move(disk));
  return Status::Ok();
}

Result<SourceDir> HttpDir(const std::string& url, const HttpOptions& options, ReadContext& context,
                          const std::vector<std::string>& probe_names) {
  if (std::string problem = UrlPasswordProblem(url); !problem.empty()) {
    return Status::InvalidArgument(problem);
  }
  // One deadline for every request of opening: discovery here, then the header reads of
  // the format reader (the sources keep it until BeginServing).
  HttpOptions http = options;
  http.open_deadline = std::chrono::steady_clock::now() + http.timeout;
  if (const char* password = std::getenv("CKPTFS_HTTP_PASSWORD");
      password && http.password.empty()) {
    http.password = password;
  }
  // The one file a URL names is asked for as the user wrote it; every other name becomes
  // one percent-encoded segment under `base`.
  const size_t slash = url.rfind('/');
  const std::string base = url.substr(0, slash + 1);
  const std::string named = slash + 1 < url.size() ? url.substr(slash + 1) : std::string();
  SourceDir dir = HttpDirAt(base, named, url, RedactedUrl(url), http, context,
                            std::make_shared<const std::vector<std::string>>(probe_names));
  dir.named = named;
  if (named.empty()) {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<HttpListing> listing, FetchAutoindex(base, http));
    if (listing) {
      ApplyListing(dir, std::move(*listing));
      return dir;
    }
  }
  CKPTFS_RETURN_IF_ERROR(ProbeFiles(dir, named.empty() ? probe_names : std::vector{named}));
  return dir;
}

Result<SourceDir> S3Dir(const std::string& url, const RemoteOptions& remote, ReadContext& context) {
  CKPTFS_ASSIGN_OR_RETURN(S3Url where, ParseS3Url(url));
  CKPTFS_ASSIGN_OR_RETURN(S3Target target, ResolveS3(where, remote));
  // One deadline for every request of opening (see HttpDir).
  target.http.open_deadline = std::chrono::steady_clock::now() + target.http.timeout;
  auto target_ptr = std::make_shared<const S3Target>(std::move(target));
  if (!where.IsDirectory()) return S3Named(target_ptr, where, context);
  auto listed = S3Listed(target_ptr, where, context);
  // ParseS3Url takes s3://b/x as a directory unless x looks like a weights file; when no
  // such directory exists, x may still name a file or a prefix (TF's ckpt-3) in s3://b/.
  const bool written_as_dir = !url.empty() && url.back() == '/';
  if (listed.ok() || listed.status().code() != Status::Code::kNotFound || written_as_dir ||
      where.key.empty()) {
    return listed;
  }
  S3Url named{where.bucket, where.key.substr(0, where.key.size() - 1)};
  return S3Named(target_ptr, named, context);
}

}  // namespace ckptfs
