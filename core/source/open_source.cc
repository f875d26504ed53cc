#include "core/source/open_source.h"

#include <sys/stat.h>

#include "core/source/hf_hub.h"
#include "core/source/local_dir.h"
#include "core/source/remote_dir.h"
#include "core/source/s3.h"

namespace ckptfs {

std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

Result<SourceDir> OpenSourceDir(const std::string& source, ReadContext& context,
                                const RemoteOptions& remote, const SourceProbe& probe) {
  if (IsUrl(source)) {
    CKPTFS_RETURN_IF_ERROR(OpenDiskCache(remote, context));
    if (IsS3Url(source)) return S3Dir(source, remote, context);
    if (IsHfUrl(source)) return HfDir(source, remote, context);
    return HttpDir(source, remote.http, context, probe.names);
  }
  struct stat st;
  bool exists = ::stat(source.c_str(), &st) == 0;
  if (exists && S_ISREG(st.st_mode) && !probe.accepts_file(SplitPath(source).second)) {
    // Keras Tuner saves weights with the prefix `checkpoint`, beside the TF state file of
    // that very name, and tf.train.latest_checkpoint returns DIR/checkpoint: with a
    // PREFIX.index beside it, the path names the prefix, not the file.
    struct stat index;
    const std::string index_path = source + ".index";
    if (::stat(index_path.c_str(), &index) != 0 || !S_ISREG(index.st_mode)) {
      return probe.refuse_file(source);
    }
    exists = false;
  }
  if (exists && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(source + ": not a file or directory");
  }
  if (exists && S_ISDIR(st.st_mode)) {
    CKPTFS_ASSIGN_OR_RETURN(auto root, LocalDirectory::Open(source));
    return ListLocalDir(std::move(root));
  }
  // A file, or a name that is no file at all (a TF prefix), read through its directory,
  // which bounds it.
  auto [dir_path, name] = SplitPath(source);
  auto root = LocalDirectory::Open(dir_path);
  if (!root.ok() && !exists) return Status::NotFound(source + ": no such file or directory");
  CKPTFS_RETURN_IF_ERROR(root.status());
  SourceDir dir = LocalDir(std::move(root).value(),
                           exists ? std::vector<std::string>{name} : std::vector<std::string>{},
                           /*listed_all=*/false);
  dir.named = name;
  return dir;
}

}  // namespace ckptfs
