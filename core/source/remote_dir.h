// SourceDirs over a URL: an HTTP(S) directory or file, and an S3 prefix or object. Every
// object they open is a RemoteSource (read through the block cache, `--cache-dir` and
// parallel fetches once the mount serves), and every request made while opening shares
// one deadline (HttpOptions::timeout), header reads of the formats included.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/read_context.h"
#include "core/source/http_source.h"
#include "core/source/remote_options.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

// A directory listing a web server gives, nginx's `autoindex on; autoindex_format json;`:
//   [{"name":"checkpoint-500","type":"directory","mtime":"Mon, 23 Nov 2026 19:00:00 GMT"},
//    {"name":"model.safetensors","type":"file","mtime":"...","size":123}]
// Names that are not plain (UrlNameProblem) or longer than 255 bytes are left out; other
// types (links nginx did not resolve) too. nullopt unless the body is such a JSON array.
struct HttpListing {
  std::vector<std::string> files, dirs;  // sorted
  std::map<std::string, ListedInfo> info;
};
std::optional<HttpListing> ParseAutoindexJson(std::string_view body);

// An http(s)://, s3:// or hf:// SOURCE (hf:// is opened by core/source/hf_hub.h).
bool IsUrl(std::string_view path);

// Opens the disk cache every remote source of this mount shares (--cache-dir), once.
Status OpenDiskCache(const RemoteOptions& remote, ReadContext& context);

// A directory URL (ending in '/') or one file's URL. A directory URL is first asked for
// itself: a JSON autoindex listing (ParseAutoindexJson) gives `files`, `dirs` and their
// sizes and times, and subdirectories opened from it are listed the same way. A server
// that does not list: each of `probe_names` (the format table's, see
// core/format/formats.h) is asked for once; those it has become `files`, a 404 only
// means the file is not there, and there are no `dirs`. Any other
// name is asked for when Has or open wants it. For a file's URL, `named` is that name and
// `files` holds it if the server has it (a TF prefix is no file). Objects found while
// discovering stay open for `open`, so each is asked for once. Names that a server would
// decode into something else ("..%2Fx") are refused.
Result<SourceDir> HttpDir(const std::string& url, const HttpOptions& options, ReadContext& context,
                          const std::vector<std::string>& probe_names);

// s3://bucket/prefix/ (one paged ListObjectsV2, which gives every object's size and ETag:
// files are made from it with no request each; only objects directly under the prefix
// with safe names are files, deeper keys are subdirectories, see OpenDir) or
// s3://bucket/key (HEADed; `named` is its name, siblings are asked for by name).
Result<SourceDir> S3Dir(const std::string& url, const RemoteOptions& remote, ReadContext& context);

}  // namespace ckptfs
