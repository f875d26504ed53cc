// The Hub's API as hf:// sources use it (core/source/hf_hub.h): a revision resolved to a
// commit, the repo's tree at that commit, a file's resolve URL, and the one-line errors.
// Internal to core/source: hf_hub.cc asks, hf_dir.cc makes the SourceDir.
#pragma once

#include <time.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/source/hf_hub.h"
#include "core/source/http_source.h"
#include "core/status.h"

namespace ckptfs {

// One repo at one commit, as the API said.
struct HfFile {
  std::string path;    // "a/b.safetensors"
  uint64_t size = 0;   // the file's bytes (the LFS object's for an LFS file)
  std::string oid;     // git blob id
  std::string sha256;  // the LFS object's sha256, or empty
};

struct HfTree {
  std::vector<HfFile> files;
  std::vector<std::string> dirs;      // "a", "a/b"
  std::vector<std::string> left_out;  // entries with names no file system path can be
};

// Talks to one repo on one endpoint, with the token (if any) in `http.bearer`.
struct HfApi {
  std::string endpoint;  // "https://huggingface.co"
  HfUrl url;
  // The token in `bearer`; follow_redirects false; open_deadline set while opening.
  HttpOptions http;

  bool has_token() const { return !http.bearer.empty(); }
  // endpoint + "/ORG/NAME/resolve/SHA/PATH", each path segment percent-encoded.
  std::string ResolveUrl(const std::string& sha, const std::string& path) const;

  struct Commit {
    std::string sha;  // 40 lower-case hex digits
    struct timespec modified = {};
  };
  // The commit url.revision names now.
  Result<Commit> ResolveRevision() const;
  // Every file and folder of the repo at `sha`.
  Result<HfTree> ListTree(const std::string& sha) const;

  // The one line for an answer of the Hub that is no success, for a request about `what`
  // (a path of the repo, or empty for the repo itself); see hf_raise_for_status.
  Status Error(const HttpResponse& response, const std::string& what) const;
  // GET (or HEAD) of `url` on the endpoint, following relative redirects there (a renamed
  // repo; _httpx_follow_relative_redirects), up to 5; any other answer is returned.
  Result<HttpResponse> Ask(std::string target, bool head) const;
  // Whether `url` is on the endpoint's own scheme, host and port (the token may go there).
  bool OnEndpoint(const std::string& url) const;
};

// Adds the entries of one page of a tree listing (a JSON list of {"type", "path", "size",
// "oid", "lfs": {"oid", "size"}}) to `tree`: entries whose path is no plain path go to
// `left_out`; Corruption, naming `shown`, for anything else that is not such a page (a
// file without a size, an LFS object of another size, more than a million entries).
Status AddHfTreePage(const std::string& body, const std::string& shown, HfTree& tree);

// The URL of a `Link` header's rel="next" (RFC 8288, as the `links` huggingface_hub's
// paginate reads), or empty.
std::string HfNextLink(const std::string& header);

}  // namespace ckptfs
