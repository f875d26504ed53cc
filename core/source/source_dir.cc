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

SourceDir LocalDir(std::shared_ptr<const LocalDirectory> root, std::vector<std::string> files,
                   bool listed_all) {
  SourceDir dir;
  dir.path = root->path();
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
  return dir;
}

Result<SourceDir> ListLocalDir(std::shared_ptr<const LocalDirectory> root) {
  CKPTFS_ASSIGN_OR_RETURN(LocalDirectory::Listing listing, root->List());
  std::vector<std::string> files = std::move(listing.files);
  files.insert(files.end(), listing.outside.begin(), listing.outside.end());
  std::sort(files.begin(), files.end());
  return LocalDir(std::move(root), std::move(files));
}

}  // namespace ckptfs
