// LocalDirectory: a checkpoint directory on local disk, and the boundary of everything
// ckptfs serves from it. Every local format and run directory lists and opens its files
// here, so one rule holds for all of them:
//
// - Only regular files are opened. A FIFO, socket or device is refused without ever
//   being opened for reading (it is resolved with O_PATH first), so nothing blocks.
// - A file is served only if it lies inside the directory (the real directory, after
//   following symlinks in the directory's own path). Symlinks that stay inside work,
//   relative or absolute, through any chain; one that leaves is refused, naming it.
// - One exception: a Hugging Face hub cache snapshot
//   (`.../models--ORG--NAME/snapshots/REV/`, likewise `datasets--` and `spaces--`) links
//   every file to `../../blobs/HASH`; files in that same repo's `blobs/` count as inside.
//   That is the repo's own blobs/ directory only: a blobs/ that is a symlink (to `/`,
//   to another repo) gets no exception.
// - No file is shown more readable than in SOURCE, the directories on its way included:
//   the group or other class keeps its read bits only where it may search every
//   directory from SOURCE's root (or the hub repo's blobs/) down to the file's real path,
//   as the kernel would require of it there (OpenFile passes that to LocalFileSource).
//   Directories above SOURCE are not counted: mounting SOURCE is the user's choice to
//   share it.
//
// Resolution first tries openat2(RESOLVE_BENEATH), which cannot leave the directory;
// when that refuses (an absolute link, `..`, the hub's blobs) the name is resolved
// with O_PATH, which has no effect on the file, and its real path (/proc/self/fd)
// checked against the boundary. The file is then opened from that very descriptor, so
// nothing can be swapped in between. Requires /proc for those fallback cases.
//
// Errors: NotFound (no such file, or a dangling link), InvalidArgument (not a regular
// file; leads outside the directory), IoError otherwise. Every message starts with
// the name. Thread-safe: immutable after Open.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs {

class LocalDirectory {
 public:
  // Opens directory `path` as the boundary. A SOURCE that is a single file is bounded
  // by its directory: open that.
  static Result<std::shared_ptr<const LocalDirectory>> Open(const std::string& path);
  ~LocalDirectory();
  LocalDirectory(const LocalDirectory&) = delete;
  LocalDirectory& operator=(const LocalDirectory&) = delete;

  // As given to Open, for messages.
  const std::string& path() const { return path_; }

  // What List found, sorted by name: `files` are the regular files (symlinks to
  // regular files inside included); `outside` the symlinks that lead out of the
  // boundary to a regular file; `dirs` the subdirectories (links to directories inside
  // included) and `outside_dirs` the links to directories out of the boundary. Dangling
  // links, link loops and special files are in none: they are not part of a checkpoint
  // (`unresolved` says, one line each, which names could not be resolved and why). A
  // name that cannot be resolved for a reason that may pass (EMFILE, ENFILE, ENOMEM:
  // IsTransient) fails the whole listing with that IoError: a file is never reported
  // missing because descriptors ran out.
  struct Listing {
    std::vector<std::string> files;
    std::vector<std::string> outside;
    std::vector<std::string> dirs;
    std::vector<std::string> outside_dirs;
    std::vector<std::string> unresolved;
  };
  Result<Listing> List() const;

  // stat of regular file or directory `name`, under the rule above (a link that leaves
  // the boundary is refused as OpenFile refuses it).
  Result<struct stat> Stat(const std::string& name) const;

  // The most a file in this directory may show (LocalFileSource::Mode): the search bits of
  // this directory and of those above it up to SOURCE (or the hub repo's blobs/), as the
  // kernel walks them; 0555 when all of them let every class through.
  uint32_t DirectoryReach() const;

  // Opens regular file `name` (a plain name in the directory) under the rule above.
  Result<std::unique_ptr<LocalFileSource>> OpenFile(const std::string& name) const;

  // Opens subdirectory `name` (a plain name; a symlink to a directory inside the boundary
  // works) as a LocalDirectory whose boundary stays this one's: a file in it may link to
  // a sibling of the subdirectory, never out of SOURCE. Errors as OpenFile's, and
  // InvalidArgument when `name` is not a directory.
  Result<std::shared_ptr<const LocalDirectory>> OpenSubdirectory(const std::string& name) const;

 private:
  // What a name resolved to: an O_PATH descriptor (owned by the holder) and whether it
  // lies inside the boundary.
  struct Resolved {
    int fd = -1;
    bool inside = false;
    mode_t type = 0;   // st_mode & S_IFMT
    std::string real;  // the real path, when it had to be checked
  };
  LocalDirectory(int fd, std::string path, std::string real, std::string boundary,
                 std::string blobs)
      : fd_(fd),
        path_(std::move(path)),
        real_(std::move(real)),
        boundary_(std::move(boundary)),
        blobs_(std::move(blobs)) {}

  Status Resolve(const std::string& name, Resolved* out) const;
  // The refusal of `name`, which resolved to `r` outside the boundary.
  Status LeadsOutside(const std::string& name, const Resolved& r) const;
  bool Inside(const std::string& real) const;
  // The most a file at real path `real` (inside) may show, by the directories on its way
  // from SOURCE's root, or from the hub repo's blobs/ for a blob (LocalFileSource::Adopt).
  uint32_t Reach(const std::string& real) const;

  int fd_;                // O_PATH descriptor of the directory
  std::string path_;      // as given
  std::string real_;      // its real path
  std::string boundary_;  // the real path of SOURCE: real_, or a parent's for a subdirectory
  std::string blobs_;     // hub cache snapshot: the real path of the repo's blobs/, else ""
};

}  // namespace ckptfs
