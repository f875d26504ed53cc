#include "core/source/source_dir.h"

#include <algorithm>

namespace ckptfs {

bool SourceDir::Lists(const std::string& name) const {
  return std::binary_search(files.begin(), files.end(), name);
}

Result<bool> SourceDir::Has(const std::string& name) const {
  if (Lists(name)) return true;
  if (!probe) return false;
  return probe(name);
}

Result<SourceDir> SourceDir::OpenDir(const std::string& name) const {
  if (!open_dir) return Status::NotFound(path + "/" + name + ": no such directory");
  return open_dir(name);
}

bool IsPlainName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return c == '/' || c == '\\' || byte < 0x20 || byte == 0x7f;
  });
}

bool IsPlainPath(std::string_view path) {
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t slash = path.find('/', begin);
    if (slash == std::string_view::npos) slash = path.size();
    if (!IsPlainName(path.substr(begin, slash - begin))) return false;
    begin = slash + 1;
  }
  return true;
}

Result<SourceDir> OpenDirPath(const SourceDir& dir, const std::string& path) {
  SourceDir home = dir;
  size_t begin = 0;
  while (!path.empty() && begin <= path.size()) {
    size_t slash = path.find('/', begin);
    if (slash == std::string::npos) slash = path.size();
    CKPTFS_ASSIGN_OR_RETURN(home, home.OpenDir(path.substr(begin, slash - begin)));
    begin = slash + 1;
  }
  return home;
}

Result<ListedInfo> SourceDir::Info(const std::string& name) const {
  if (info) return info(name);
  if (!open) return Status::NotFound(path + "/" + name + ": no such file");
  CKPTFS_ASSIGN_OR_RETURN(auto source, open(name));
  ListedInfo listed;
  listed.size = source->Size();
  listed.mtime = source->MTime();
  listed.etag = source->Identity();
  return listed;
}

SourceDir LocalDir(std::shared_ptr<const LocalDirectory> root, std::vector<std::string> files,
                   bool listed_all) {
  SourceDir dir;
  dir.path = root->path();
  dir.reach = root->DirectoryReach();
  dir.files = std::move(files);
  dir.open = [root](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    CKPTFS_ASSIGN_OR_RETURN(auto file, root->OpenFile(name));
    return std::unique_ptr<ByteSource>(std::move(file));
  };
  if (!listed_all) {
    // Existence is what opening says: a refused file (a link out, a FIFO) "exists", so
    // that using it names the refusal.
    dir.probe = [root](const std::string& name) -> Result<bool> {
      auto file = root->OpenFile(name);
      if (file.ok() || file.status().code() == Status::Code::kInvalidArgument) return true;
      if (file.status().code() == Status::Code::kNotFound) return false;
      return file.status();
    };
  }
  dir.open_dir = [root](const std::string& name) -> Result<SourceDir> {
    CKPTFS_ASSIGN_OR_RETURN(auto child, root->OpenSubdirectory(name));
    return ListLocalDir(std::move(child));
  };
  dir.info = [root](const std::string& name) -> Result<ListedInfo> {
    CKPTFS_ASSIGN_OR_RETURN(struct stat st, root->Stat(name));
    ListedInfo listed;
    listed.size = static_cast<uint64_t>(st.st_size);
    listed.mtime = st.st_mtim;
    return listed;
  };
  return dir;
}

Result<SourceDir> ListLocalDir(std::shared_ptr<const LocalDirectory> root) {
  CKPTFS_ASSIGN_OR_RETURN(LocalDirectory::Listing listing, root->List());
  std::vector<std::string> files = std::move(listing.files);
  files.insert(files.end(), listing.outside.begin(), listing.outside.end());
  std::sort(files.begin(), files.end());
  std::vector<std::string> dirs = std::move(listing.dirs);
  // Links to directories outside are listed too: opening one names the refusal.
  dirs.insert(dirs.end(), listing.outside_dirs.begin(), listing.outside_dirs.end());
  std::sort(dirs.begin(), dirs.end());
  std::vector<std::string> left_out;
  for (const std::string& why : listing.unresolved) left_out.push_back(root->path() + ": " + why);
  SourceDir dir = LocalDir(std::move(root), std::move(files));
  dir.dirs = std::move(dirs);
  dir.left_out = std::move(left_out);
  return dir;
}

std::string JoinShown(std::string_view dir, std::string_view name) {
  if (dir.empty() || dir == ".") return std::string(name);
  return std::string(dir) + (dir.back() == '/' ? "" : "/") + std::string(name);
}

}  // namespace ckptfs
