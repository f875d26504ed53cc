// The FUSE front end: low-level callbacks over a core Volume, and the mount lifecycle.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/volume/volume.h"
#include "fs/ownership.h"

namespace ckptfs {

struct MountOptions {
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;
  std::string log_file;                   // daemon log; empty: syslog (stderr with -f)
  std::string summary;                    // printed on stdout once the mount answers (-v)
  std::vector<std::string> fuse_options;  // from -o, passed to libfuse as given
  Ownership ownership;                    // --uid, --gid, --umask, --file-mode, --dir-mode
};

// Mounts `volume` and serves it. In the background mode the calling process exits with
// status 0 once the mount answers requests, or 1 with a line on stderr if it failed;
// the forked daemon serves until unmounted. With `foreground` it serves in
// this process and returns when unmounted. Returns a process exit code. The caller has
// checked the mount point (CheckMountPoint in fs/preflight.h).
int MountAndServe(std::unique_ptr<Volume> volume, const MountOptions& options);

}  // namespace ckptfs
