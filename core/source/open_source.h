// Opening a SOURCE as a SourceDir: a local directory, a file path (read through its
// directory, which bounds it), a TF prefix that is no file, or an http(s):// or s3:// URL.
// What this needs to know of formats (which file names a format reads, which names to ask
// an HTTP server for) comes in as a SourceProbe from the format table
// (core/format/formats.h), so that sources stay below formats.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cache/read_context.h"
#include "core/source/remote_options.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

struct SourceProbe {
  // The names an HTTP directory, which cannot be listed, is asked for.
  std::vector<std::string> names;
  // Whether some format reads a file of this name (a file SOURCE must be one).
  std::function<bool(std::string_view name)> accepts_file;
  // The one line refusing a file SOURCE no format reads, naming it.
  std::function<Status(const std::string& shown)> refuse_file;
};

// The SourceDir of `source`. A file path is a SourceDir of its directory holding that one
// name (`named` set); a path that is no file but has PREFIX.index beside it (a TF prefix)
// the same with no file. NotFound, InvalidArgument (not a file or directory, a file no
// format reads) and what the store says otherwise, each naming `source`.
Result<SourceDir> OpenSourceDir(const std::string& source, ReadContext& context,
                                const RemoteOptions& remote, const SourceProbe& probe);

// "dir/name" split at the last '/': {".", name} without one, {"/", name} at the root.
std::pair<std::string, std::string> SplitPath(const std::string& path);

}  // namespace ckptfs
