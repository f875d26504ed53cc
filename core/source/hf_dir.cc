// HfDir: a repo's tree at one commit as SourceDirs, and its files as HfObjects read
// through RemoteSource (core/source/hf_hub.h says what the Hub is asked and why).
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "core/source/hf_api.h"
#include "core/source/hf_hub.h"
#include "core/source/remote_dir.h"
#include "core/source/remote_source.h"

namespace ckptfs {
namespace {

// One file of the repo at the mounted commit. Where its bytes come from is asked on the
// first read (a HEAD of its resolve URL, no redirects): the endpoint itself, with the token,
// or the host the Hub redirects to (a CDN's signed URL), without it. A read that fails there
// for any reason but time (a signed URL expires; the CDN refuses it) asks the Hub again and
// tries once more through the new URL.
class HfObject final : public ByteSource {
 public:
  HfObject(std::shared_ptr<const HfApi> api, std::string sha, HfFile file, std::string name,
           struct timespec mtime)
      : api_(std::move(api)),
        sha_(std::move(sha)),
        file_(std::move(file)),
        name_(std::move(name)),
        mtime_(mtime) {}

  uint64_t Size() const override { return file_.size; }
  const std::string& Name() const override { return name_; }
  struct timespec MTime() const override {
    return mtime_;
  }
  void BeginServing() override {
    std::lock_guard lock(mu_);
    serving_ = true;
    if (target_) target_->BeginServing();
  }
  std::string Identity() const override {
    // The commit and the path name these bytes for good (a commit never changes); the LFS
    // hash or blob id says so twice.
    const std::string hash = !file_.sha256.empty() ? "sha256:" + file_.sha256
                             : !file_.oid.empty()  ? "git:" + file_.oid
                                                   : "commit:" + sha_;
    return "hf:" + api_->endpoint + "/" + api_->url.repo + "@" + sha_ + "/" + file_.path + "\n" +
           hash + "\n" + std::to_string(file_.size);
  }

  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
    CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<HttpSource> target, Target(nullptr));
    Status status = target->Read(offset, length, sink);
    if (status.ok() || status.errno_value() == ETIMEDOUT) return status;
    bool redirected;
    {
      std::lock_guard lock(mu_);
      redirected = redirected_;
    }
    if (!redirected) return status;
    // The CDN failed a URL it served before, or never: a signed URL expires. Once more
    // through a fresh one.
    auto fresh = Target(target);
    if (!fresh.ok()) return status;
    return (*fresh)->Read(offset, length, sink);
  }

 private:
  // The source reads go to; resolved on first use, and again when `stale` is the current
  // one (a read through it failed). One resolution at a time.
  Result<std::shared_ptr<HttpSource>> Target(const std::shared_ptr<HttpSource>& stale) const {
    std::lock_guard resolving(resolve_mu_);
    {
      std::lock_guard lock(mu_);
      if (target_ && target_ != stale) return target_;
    }
    CKPTFS_ASSIGN_OR_RETURN(auto resolved, Resolve());
    std::lock_guard lock(mu_);
    target_ = std::shared_ptr<HttpSource>(std::move(resolved.first));
    redirected_ = resolved.second;
    if (serving_) target_->BeginServing();
    return target_;
  }

  // HEAD of the resolve URL (get_hf_file_metadata): the source to read and whether it is
  // on another host.
  Result<std::pair<std::unique_ptr<HttpSource>, bool>> Resolve() const {
    const std::string url = api_->ResolveUrl(sha_, file_.path);
    CKPTFS_ASSIGN_OR_RETURN(HttpResponse head, api_->Ask(url, /*head=*/true));
    if (head.status == 200) {
      return std::make_pair(HttpSource::FromListing(url, name_, file_.size, "", api_->http, mtime_),
                            false);
    }
    if (head.status < 300 || head.status > 399) return api_->Error(head, file_.path);
    const std::string location = head.Header("location");
    if (location.rfind("http://", 0) != 0 && location.rfind("https://", 0) != 0) {
      return Status::IoError(name_ + ": the Hub redirected " + api_->url.Shown(sha_) + "/" +
                             file_.path + " to \"" + location.substr(0, 100) +
                             "\", not an http(s) URL");
    }
    if (api_->endpoint.rfind("https://", 0) == 0 && location.rfind("https://", 0) != 0) {
      return Status::IoError(name_ + ": the Hub redirected from https to plain http");
    }
    if (const std::string size = head.Header("x-linked-size");
        !size.empty() && size != std::to_string(file_.size)) {
      return Status::Corruption(name_ + ": the Hub says " + size.substr(0, 40) +
                                " bytes (X-Linked-Size), its listing " +
                                std::to_string(file_.size));
    }
    // Elsewhere (the CDN): never the token, and its own redirects followed.
    HttpOptions cdn = api_->http;
    if (!api_->OnEndpoint(location)) {
      cdn.bearer.clear();
      cdn.follow_redirects = true;
    }
    return std::make_pair(HttpSource::FromListing(location, name_, file_.size, "", cdn, mtime_),
                          true);
  }

  const std::shared_ptr<const HfApi> api_;
  const std::string sha_;
  const HfFile file_;
  const std::string name_;
  const struct timespec mtime_;
  mutable std::mutex resolve_mu_;  // held while resolving: one HEAD at a time
  mutable std::mutex mu_;
  mutable std::shared_ptr<HttpSource> target_;  // guarded by mu_
  mutable bool redirected_ = false;             // guarded by mu_
  bool serving_ = false;                        // guarded by mu_
};

// The repo's tree, folder by folder.
struct Folder {
  std::map<std::string, HfFile> files;  // by name
  std::set<std::string> dirs;
};
using Folders = std::map<std::string, Folder>;  // by path, "" the root

Folders ToFolders(HfTree tree) {
  Folders folders;
  folders[""];
  auto parent_of = [](const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos
               ? std::make_pair(std::string(), path)
               : std::make_pair(path.substr(0, slash), path.substr(slash + 1));
  };
  // Every folder on the way to a listed one exists, listed or not.
  auto add_dir = [&](std::string path) {
    while (!path.empty() && !folders.count(path)) {
      folders[path];
      auto [parent, name] = parent_of(path);
      folders[parent].dirs.insert(name);
      path = parent;
    }
  };
  for (const std::string& dir : tree.dirs) add_dir(dir);
  for (HfFile& file : tree.files) {
    auto [parent, name] = parent_of(file.path);
    add_dir(parent);
    if (folders.count(file.path)) continue;  // a folder of that name wins
    folders[parent].files.emplace(name, std::move(file));
  }
  return folders;
}

struct Repo {
  std::shared_ptr<const HfApi> api;
  std::string sha;
  struct timespec modified = {};
  Folders folders;
  std::vector<std::string> left_out;
};

SourceDir FolderDir(std::shared_ptr<const Repo> repo, const std::string& path,
                    ReadContext& context) {
  const Folder& folder = repo->folders.at(path);
  SourceDir dir;
  HfUrl at = repo->api->url;
  at.path = path;
  dir.path = at.Shown(repo->sha);
  dir.remote = true;
  for (const auto& [name, file] : folder.files) dir.files.push_back(name);
  dir.dirs.assign(folder.dirs.begin(), folder.dirs.end());
  if (path.empty()) dir.left_out = repo->left_out;
  dir.info = [repo, path](const std::string& name) -> Result<ListedInfo> {
    const Folder& f = repo->folders.at(path);
    if (auto it = f.files.find(name); it != f.files.end()) {
      return ListedInfo{it->second.size, repo->modified,
                        it->second.sha256.empty() ? it->second.oid : it->second.sha256};
    }
    if (f.dirs.count(name)) return ListedInfo{0, repo->modified, ""};
    return Status::NotFound(name + ": not in the repo's listing");
  };
  dir.open = [repo, path,
              &context](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    const Folder& f = repo->folders.at(path);
    auto it = f.files.find(name);
    if (it == f.files.end())
      return Status::NotFound(name + ": not in " + repo->api->url.Shown(repo->sha));
    auto object =
        std::make_unique<HfObject>(repo->api, repo->sha, it->second, name, repo->modified);
    std::string identity = object->Identity();
    const auto timeout = repo->api->http.timeout;
    // The identity names these bytes for good (the commit's): the disk cache may keep them.
    return std::unique_ptr<ByteSource>(std::make_unique<RemoteSource>(
        std::move(object), std::move(identity), context, context.disk_cache(), timeout));
  };
  dir.open_dir = [repo, path, &context](const std::string& name) -> Result<SourceDir> {
    const std::string child = path.empty() ? name : path + "/" + name;
    if (!repo->folders.at(path).dirs.count(name) || !repo->folders.count(child)) {
      return Status::NotFound(name + ": no such folder in " + repo->api->url.Shown(repo->sha));
    }
    return FolderDir(repo, child, context);
  };
  return dir;
}

}  // namespace

Result<SourceDir> HfDir(const std::string& source, const RemoteOptions& remote,
                        ReadContext& context) {
  auto api = std::make_shared<HfApi>();
  CKPTFS_ASSIGN_OR_RETURN(api->url, ParseHfUrl(source));
  api->endpoint = HfEndpoint(remote.hub);
  api->http = remote.http;
  api->http.password.clear();
  api->http.sigv4 = {};
  api->http.follow_redirects = false;
  CKPTFS_ASSIGN_OR_RETURN(api->http.bearer, FindHfToken());
  // One deadline for every request of opening (see HttpDir).
  api->http.open_deadline = std::chrono::steady_clock::now() + api->http.timeout;
  CKPTFS_ASSIGN_OR_RETURN(HfApi::Commit commit, api->ResolveRevision());
  CKPTFS_ASSIGN_OR_RETURN(HfTree tree, api->ListTree(commit.sha));
  auto repo = std::make_shared<Repo>();
  repo->sha = commit.sha;
  repo->modified = commit.modified;
  repo->left_out = std::move(tree.left_out);
  repo->folders = ToFolders(std::move(tree));
  const std::string path = api->url.path;
  repo->api = api;
  if (repo->folders.count(path)) return FolderDir(repo, path, context);
  // A file: its folder, naming it (as a local file path SOURCE does).
  const size_t slash = path.rfind('/');
  const std::string parent = slash == std::string::npos ? "" : path.substr(0, slash);
  const std::string name = path.substr(slash + 1);
  if (!repo->folders.count(parent) || !repo->folders.at(parent).files.count(name)) {
    return Status::NotFound(api->url.Shown() + ": no file or folder \"" + path + "\" in " +
                            api->url.repo + " at " + api->url.revision + " (commit " +
                            commit.sha.substr(0, 12) + ")");
  }
  SourceDir dir = FolderDir(repo, parent, context);
  dir.named = name;
  return dir;
}

}  // namespace ckptfs
