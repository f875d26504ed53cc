// The FUSE front end: low-level callbacks over a core Volume (one checkpoint) or a RunTree
// (a training run, each checkpoint a Volume), and the mount lifecycle. Every callback
// resolves its inode once (ino -> Volume + local inode, or a run node) and goes on alike.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/run/run_tree.h"
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
// The same for a run: its watcher (live entries, idle close) starts in the daemon.
int MountRunAndServe(std::unique_ptr<RunTree> run, const MountOptions& options);

}  // namespace ckptfs
