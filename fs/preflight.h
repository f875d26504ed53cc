// Checks of the paths and options `ckptfs mount` and `ckptfs umount` are given, made
// before anything is opened, forked or mounted: a bad argument is refused at once with one
// line (the returned Status's message) instead of failing later in the daemon, where it
// could only be logged, or hanging it. Functions here touch no mount they are not asked
// about and read mount tables from /proc/self/mountinfo, never by stat()ing a mount point
// that may hang.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ckptfs {

// `path` made absolute against the current directory, with ".", ".." and repeated slashes
// removed lexically: symlinks are not resolved and the path need not exist. The daemon
// chdirs to "/", so every path it keeps must be absolute before it forks.
std::string AbsolutePath(const std::string& path);

// A line of /proc/self/mountinfo: where something is mounted and what.
struct MountEntry {
  std::string mountpoint;  // unescaped
  std::string fstype;      // "fuse.ckptfs" for a ckptfs mount
};

// The topmost mount whose mount point is exactly the absolute `path`, or nullopt.
std::optional<MountEntry> FindMount(const std::string& path);

// `path` made absolute as the mount table spells a mount point, without touching the
// mount itself (a dead daemon's mount fails every stat with ENOTCONN, a hung one blocks):
// symlinks are resolved on the way to it, not in its last component.
std::string MountTablePath(const std::string& path);

// Runs `fusermount3 -u [-z] -- MOUNTPOINT`, keeping what it prints on stderr in `err` (a
// line or two), so that the caller can say it in its own words. Returns its exit status;
// 127 when there is no fusermount3.
int RunFusermount(const std::string& mountpoint, bool lazy, std::string* err);

// Recovery after a crash (systemd's Restart=on-failure): when `path` is the mount point
// of a ckptfs mount (fstype fuse.ckptfs in /proc/self/mountinfo) whose daemon is gone
// (stat fails with ENOTCONN), it is unmounted lazily (umount2 MNT_DETACH as root, else
// fusermount3 -uz) so that a new mount can take its place; returns the one line saying
// so. Nothing (nullopt) for anything else: no mount, a live or hung mount (stat is asked
// in a child process, given a second), another file system's mount, dead or not, all
// left for CheckMountPoint to refuse. Fails (one line, with the way out) when the
// detach does.
Result<std::optional<std::string>> DetachDeadMount(const std::string& path);

// The canonical path of the mount point `path`: an existing directory nothing is mounted
// on. A live mount of any kind and a dead FUSE mount (its daemon gone: stat fails with
// ENOTCONN) are refused with the hint to `ckptfs umount` it first (a dead ckptfs mount
// never gets here when DetachDeadMount was asked first, as `ckptfs mount` does).
Result<std::string> CheckMountPoint(const std::string& path);

// Refuses -o options that would make the mount writable: `rw` anywhere in the list, also
// spelled with the backslash escapes libfuse removes, and an option ending in a backslash,
// which would swallow the comma and the option after it.
Status CheckFuseOptions(const std::vector<std::string>& options);

// Refuses `path` (given as `option`) if it is the canonical `mountpoint` or lies inside
// it, symlinks resolved as far as the path exists: the mount would hide it, and the daemon
// reaching it through its own mount would hang.
Status CheckOutsideMount(const std::string& option, const std::string& path,
                         const std::string& mountpoint);

// Refuses a mount of the local SOURCE `source` (an absolute path) at the canonical
// `mountpoint` when either holds the other, or they are one directory, symlinks resolved as
// far as the paths exist: the mount would hide the files it serves (reads would then fail
// with EIO, and the daemon reaching SOURCE through its own mount would hang). The line
// names both and says to choose a mount point outside SOURCE.
Status CheckSourceOutsideMount(const std::string& source, const std::string& mountpoint);

// Refuses a `mountpoint` that holds any file, unless `allow_non_empty`: the mount would
// hide them (libfuse 3 mounts over them silently; rclone refuses too). The line names a
// few of them and the options that allow it (--allow-non-empty, -o allow_non_empty). A
// directory this process cannot list is left to the mount to judge.
Status CheckEmptyMountPoint(const std::string& mountpoint, bool allow_non_empty);

// Refuses a local SOURCE (an absolute path) that this process cannot reach because a
// directory on the way denies it search permission (a 0700 directory of another user),
// naming that directory, its owner and mode. Anything else is left to the opener's
// refusal.
Status CheckSourceReachable(const std::string& source);

// Refuses `dir` (given as `option`) unless it is an existing directory this process may
// create files in.
Status CheckWritableDir(const std::string& option, const std::string& dir);

}  // namespace ckptfs
