// The FUSE front end: low-level callbacks over a core MountTree (a training run or one
// checkpoint alike), and the mount lifecycle. Every callback unpacks its request, makes
// one MountTree call and replies; a refusal's Status becomes its errno in one place.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mount/mount_tree.h"
#include "fs/ownership.h"

namespace ckptfs {

struct MountOptions {
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;
  std::string log_file;                   // daemon log; empty: syslog (stderr with -f)
  std::string summary;                    // printed on stdout once the mount answers (-v)
  std::string notice;                     // printed on stderr once the mount answers
  std::string log_line;                   // logged (info) once the mount serves
  std::vector<std::string> warnings;      // logged (warn) once the mount serves
  std::vector<std::string> fuse_options;  // from -o, passed to libfuse as given
  Ownership ownership;  // --uid, --gid, --umask, --file-mode, --dir-mode: for OpenMount
};

// Mounts `tree` (OpenMount) and serves it. In the background mode the calling process exits with
// status 0 once the mount answers requests, or 1 with a line on stderr if it failed;
// the forked daemon serves until unmounted. With `foreground` it serves in
// this process and returns when unmounted. Returns a process exit code. The caller has
// checked the mount point (CheckMountPoint in fs/preflight.h).
// Background work (decode workers, a checkpoint's CRC pass, a run's watcher) starts in
// the daemon.
int MountAndServe(std::unique_ptr<MountTree> tree, const MountOptions& options);

// The first -o item libfuse (the version linked) does not take, or takes with a bad value,
// asked of libfuse itself: each item alone goes through fuse_session_new, which parses and
// allocates but opens and mounts nothing, with its complaint on stderr silenced, so the
// caller can say one line naming the item instead of libfuse's two that list every option.
// Call before other threads start: stderr is borrowed for a moment.
std::optional<std::string> FirstUnknownFuseOption(const std::vector<std::string>& options);

}  // namespace ckptfs
