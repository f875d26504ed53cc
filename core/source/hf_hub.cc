// hf:// URLs, the token, and the Hub's API (core/source/hf_api.h).
#include "core/source/hf_hub.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/source/hf_api.h"
#include "core/source/http_source.h"

namespace ckptfs {
namespace {

constexpr std::string_view kScheme = "hf://";
constexpr std::string_view kDefaultEndpoint = "https://huggingface.co";
// An API answer (one revision, one page of a tree) larger than this is refused: the Hub's
// pages hold at most a thousand entries.
constexpr uint64_t kMaxApiBytes = uint64_t{64} << 20;
// A tree of more entries, or more pages, is refused rather than held.
constexpr size_t kMaxTreeEntries = 1'000'000;
constexpr size_t kMaxTreePages = 10'000;
constexpr int kMaxRelativeRedirects = 5;

bool IsRepoNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// A Hub name (an org, a user, a repo): what huggingface_hub's validate_repo_id allows.
bool IsRepoName(std::string_view name) {
  return !name.empty() && name.size() <= 96 && name != "." && name != ".." &&
         std::all_of(name.begin(), name.end(), IsRepoNameChar);
}

bool IsToken(std::string_view token) {
  return std::all_of(token.begin(), token.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// Leading and trailing white space off (token files end in a newline).
std::string Trimmed(std::string text) {
  const char* space = " \t\r\n";
  const size_t first = text.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

// What a server said in X-Error-Message, fit for one line of ours.
std::string Said(const std::string& message) {
  std::string out;
  for (char c : message.substr(0, 200)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// "2024-03-01T12:00:00.000Z" (the API's dates); {0, 0} if not that.
struct timespec ParseIsoDate(const std::string& text) {
  struct tm tm = {};
  const char* end = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return {};
  return {static_cast<time_t>(::timegm(&tm)), 0};
}

bool IsCommitSha(const std::string& sha) {
  return sha.size() == 40 && std::all_of(sha.begin(), sha.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// scheme://host[:port] of `url` (lower case), or empty.
std::string Origin(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  const size_t host_end = url.find_first_of("/?#", scheme_end + 3);
  std::string origin = url.substr(0, host_end);
  for (char& c : origin) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return origin;
}

}  // namespace

std::string HfNextLink(const std::string& header) {
  size_t at = 0;
  while (at < header.size()) {
    const size_t open = header.find('<', at);
    if (open == std::string::npos) return "";
    const size_t close = header.find('>', open);
    if (close == std::string::npos) return "";
    const size_t end = std::min(header.find('<', close), header.size());
    const std::string params = header.substr(close + 1, end - close - 1);
    if (params.find("rel=\"next\"") != std::string::npos ||
        params.find("rel=next") != std::string::npos) {
      return header.substr(open + 1, close - open - 1);
    }
    at = end;
  }
  return "";
}

Status AddHfTreePage(const std::string& body, const std::string& shown, HfTree& tree) {
  // Entries are objects at depth 1 and their `lfs` at depth 2: anything deeper is dropped
  // as parsed.
  const nlohmann::json items = nlohmann::json::parse(
      body, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) { return depth <= 3; },
      /*allow_exceptions=*/false);
  if (!items.is_array())
    return Status::Corruption(shown + ": the Hub's tree listing is no JSON list");
  for (const nlohmann::json& item : items) {
    const auto type = item.is_object() ? item.find("type") : item.end();
    const auto path = item.is_object() ? item.find("path") : item.end();
    if (type == item.end() || path == item.end() || !type->is_string() || !path->is_string()) {
      return Status::Corruption(shown +
                                ": the Hub's tree listing has an entry without type or path");
    }
    const std::string p = path->get<std::string>();
    if (!IsPlainPath(p)) {
      tree.left_out.push_back(p.substr(0, 200) + ": not a plain path, left out");
      continue;
    }
    if (*type == "directory") {
      tree.dirs.push_back(p);
      continue;
    }
    if (*type != "file") continue;
    HfFile file;
    file.path = p;
    const auto size = item.find("size");
    if (size == item.end() || !size->is_number_unsigned()) {
      return Status::Corruption(shown + ": the Hub's tree listing gives " + p.substr(0, 200) +
                                " no size");
    }
    file.size = size->get<uint64_t>();
    if (auto oid = item.find("oid"); oid != item.end() && oid->is_string()) file.oid = *oid;
    if (auto lfs = item.find("lfs"); lfs != item.end() && lfs->is_object()) {
      const auto lfs_oid = lfs->find("oid");
      const auto lfs_size = lfs->find("size");
      if (lfs_oid == lfs->end() || !lfs_oid->is_string() || lfs_size == lfs->end() ||
          !lfs_size->is_number_unsigned() || lfs_size->get<uint64_t>() != file.size) {
        return Status::Corruption(shown + ": the Hub's tree listing gives " + p.substr(0, 200) +
                                  " an LFS object of another size");
      }
      file.sha256 = *lfs_oid;
    }
    tree.files.push_back(std::move(file));
  }
  if (tree.files.size() + tree.dirs.size() > kMaxTreeEntries) {
    return Status::Corruption(shown + ": more than " + std::to_string(kMaxTreeEntries) +
                              " files in the repo");
  }
  return Status::Ok();
}

bool IsHfUrl(std::string_view source) { return source.rfind(kScheme, 0) == 0; }

std::string HfUrl::Shown(std::string_view sha) const {
  std::string shown(kScheme);
  shown += repo;
  const std::string rev = sha.empty() ? revision : std::string(sha);
  if (!sha.empty() || revision != "main") shown += "@" + EncodeUrlSegment(rev);
  if (!path.empty()) shown += "/" + path;
  return shown;
}

Result<HfUrl> ParseHfUrl(std::string_view source) {
  const std::string shown(source.substr(0, 300));
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument(shown + ": " + why +
                                   " (hf://ORG/NAME[@REVISION][/PATH], a revision holding '/' "
                                   "written with %2F)");
  };
  if (!IsHfUrl(source)) return refuse("not an hf:// URL");
  std::string_view rest = source.substr(kScheme.size());
  HfUrl url;
  const size_t org_end = rest.find('/');
  if (org_end == std::string_view::npos) return refuse("no repository name");
  const std::string_view org = rest.substr(0, org_end);
  rest.remove_prefix(org_end + 1);
  size_t name_end = rest.find_first_of("@/");
  const std::string_view name = rest.substr(0, name_end);
  if (!IsRepoName(org) || !IsRepoName(name)) {
    return refuse("\"" + std::string(org) + "/" + std::string(name) +
                  "\" is not a repository name (letters, digits, '-', '_', '.')");
  }
  url.repo = std::string(org) + "/" + std::string(name);
  rest.remove_prefix(std::min(name_end, rest.size()));
  url.revision = "main";
  if (!rest.empty() && rest.front() == '@') {
    const size_t rev_end = rest.find('/');
    const auto revision = PercentDecode(
        rest.substr(1, rev_end == std::string_view::npos ? rev_end : rev_end - 1), true);
    if (!revision || revision->empty() || revision->size() > 255 ||
        !std::all_of(revision->begin(), revision->end(),
                     [](char c) { return c > 0x20 && c < 0x7f; })) {
      return refuse("not a revision");
    }
    url.revision = *revision;
    rest.remove_prefix(std::min(rev_end, rest.size()));
  }
  if (!rest.empty()) {
    rest.remove_prefix(1);  // the '/'
    while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    const auto path = PercentDecode(rest, true);
    if (!path || (!path->empty() && !IsPlainPath(*path))) {
      return refuse("\"" + std::string(rest.substr(0, 200)) + "\" is not a path inside the repo");
    }
    url.path = *path;
  }
  return url;
}

Result<std::string> FindHfToken() {
  for (const char* variable : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || Trimmed(value).empty()) continue;
    std::string token = Trimmed(value);
    if (!IsToken(token)) {
      return Status::InvalidArgument(std::string(variable) +
                                     " holds something that is not a token (spaces or control "
                                     "characters)");
    }
    return token;
  }
  std::string path;
  if (const char* given = std::getenv("HF_TOKEN_PATH"); given && *given) {
    path = given;
  } else if (const char* home = std::getenv("HF_HOME"); home && *home) {
    path = std::string(home) + "/token";
  } else if (const char* user_home = std::getenv("HOME"); user_home && *user_home) {
    path = std::string(user_home) + "/.cache/huggingface/token";
  }
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return std::string();  // no token file: anonymous, as huggingface_hub is
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  std::string token = Trimmed(text);
  if (!IsToken(token)) {
    return Status::InvalidArgument(path + ": holds something that is not a token");
  }
  return token;
}

std::string HfEndpoint(const HubOptions& hub) {
  std::string endpoint = hub.endpoint;
  if (endpoint.empty()) {
    if (const char* env = std::getenv("HF_ENDPOINT"); env && *env) endpoint = env;
  }
  if (endpoint.empty()) endpoint = kDefaultEndpoint;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint;
}

std::string HfApi::ResolveUrl(const std::string& sha, const std::string& path) const {
  std::string resolve = endpoint + "/" + url.repo + "/resolve/" + sha;
  size_t at = 0;
  while (at <= path.size()) {
    const size_t slash = std::min(path.find('/', at), path.size());
    // Two appends, not "/" + segment: GCC 12 at -O3 misreads the
    // temporary's insert as an overlapping memcpy (-Wrestrict).
    resolve += '/';
    resolve += EncodeUrlSegment(path.substr(at, slash - at));
    at = slash + 1;
  }
  return resolve;
}

Result<HttpResponse> HfApi::Ask(std::string target, bool head) const {
  for (int hops = 0;; ++hops) {
    CKPTFS_ASSIGN_OR_RETURN(HttpResponse response,
                            head ? HttpHead(target, url.Shown(), http)
                                 : HttpGet(target, url.Shown(), http, kMaxApiBytes));
    const std::string location = response.Header("location");
    if (response.status < 300 || response.status > 399 || location.empty() ||
        location.front() != '/' || hops == kMaxRelativeRedirects) {
      return response;
    }
    target = endpoint + location;
  }
}

bool HfApi::OnEndpoint(const std::string& other) const {
  return !Origin(other).empty() && Origin(other) == Origin(endpoint);
}

Status HfApi::Error(const HttpResponse& response, const std::string& what) const {
  const std::string code = response.Header("x-error-code");
  const std::string message = response.Header("x-error-message");
  const std::string shown = url.Shown();
  const std::string page = endpoint + "/" + url.repo;
  if (message == "Invalid credentials in Authorization header") {
    return Status::InvalidArgument(shown +
                                   ": the Hub does not accept the token (invalid credentials): set "
                                   "HF_TOKEN to a valid token (" +
                                   endpoint + "/settings/tokens)");
  }
  if (code == "GatedRepo") {
    return Status::InvalidArgument(
        shown + ": a gated repository: accept its terms at " + page +
        (has_token() ? ", then retry" : ", then set HF_TOKEN to a token of that account"));
  }
  if (message == "Access to this resource is disabled.") {
    return Status::InvalidArgument(shown + ": access to this repository is disabled on the Hub");
  }
  if (code == "RevisionNotFound") {
    return Status::NotFound(shown + ": revision \"" + url.revision + "\" not found in " + url.repo);
  }
  if (code == "EntryNotFound") {
    return Status::NotFound(shown + ": " + (what.empty() ? url.path : what) + " not found in " +
                            url.repo + " at " + url.revision);
  }
  if (code == "RepoNotFound" || response.status == 401) {
    return Status::NotFound(
        shown + ": repository " + url.repo + " not found" +
        (has_token() ? ", or the token cannot read it"
                     : "; if it is private or gated, set HF_TOKEN to a token that can read it"));
  }
  if (response.status == 403) {
    return Status::InvalidArgument(shown + ": access denied (HTTP 403" +
                                   (message.empty() ? "" : ": " + Said(message)) +
                                   "): make sure the token can read " + url.repo);
  }
  if (response.status == 404) {
    return Status::NotFound(shown + ": " + (what.empty() ? "not found" : what + " not found") +
                            " at " + endpoint + " (HTTP 404; is it a Hugging Face Hub?)");
  }
  return Status::IoError(shown + ": the Hub answered HTTP " + std::to_string(response.status) +
                         (message.empty() ? "" : ": " + Said(message)));
}

Result<HfApi::Commit> HfApi::ResolveRevision() const {
  const std::string api =
      endpoint + "/api/models/" + url.repo + "/revision/" + EncodeUrlSegment(url.revision);
  CKPTFS_ASSIGN_OR_RETURN(HttpResponse response, Ask(api, /*head=*/false));
  if (response.status != 200) return Error(response, "");
  const nlohmann::json info = nlohmann::json::parse(
      response.body,
      [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) { return depth <= 1; },
      /*allow_exceptions=*/false);
  const auto sha = info.is_object() ? info.find("sha") : info.end();
  if (sha == info.end() || !sha->is_string() || !IsCommitSha(*sha)) {
    return Status::Corruption(url.Shown() + ": the Hub's answer for revision \"" + url.revision +
                              "\" names no commit (no 40-hex \"sha\")");
  }
  Commit commit;
  commit.sha = *sha;
  if (auto modified = info.find("lastModified"); modified != info.end() && modified->is_string()) {
    commit.modified = ParseIsoDate(*modified);
  }
  return commit;
}

Result<HfTree> HfApi::ListTree(const std::string& sha) const {
  HfTree tree;
  std::string next = endpoint + "/api/models/" + url.repo + "/tree/" + sha + "?recursive=true";
  std::set<std::string> asked;
  const std::string shown = url.Shown(sha);
  for (size_t pages = 0; !next.empty(); ++pages) {
    // The token goes with every page: a next link elsewhere would take it there.
    if (!OnEndpoint(next)) {
      return Status::Corruption(shown + ": the Hub's next tree page is on another host (" +
                                RedactedUrl(next).substr(0, 200) + ")");
    }
    if (pages == kMaxTreePages || !asked.insert(next).second) {
      return Status::Corruption(shown + ": the Hub's tree listing does not end (" +
                                std::to_string(pages) + " pages)");
    }
    CKPTFS_ASSIGN_OR_RETURN(HttpResponse response, Ask(next, /*head=*/false));
    if (response.status != 200) return Error(response, "");
    CKPTFS_RETURN_IF_ERROR(AddHfTreePage(response.body, shown, tree));
    next = HfNextLink(response.Header("link"));
  }
  return tree;
}

}  // namespace ckptfs
