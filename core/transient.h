// IsTransient: which failures a caller tries again rather than remembers (a run's entries,
// core/run/run_tree.h; listings that must not report a file missing, core/source/local_dir.h).
// Beside core/status.h rather than in it: a rule about errno classes, not part of the type.
#pragma once

#include <cerrno>

#include "core/status.h"

namespace ckptfs {

// Whether `status` may clear by itself, so that it is tried again later: an IoError (out
// of descriptors or memory: EMFILE, ENFILE, ENOMEM; a timeout; a server error, 5xx or 429,
// or a server away; a failed read), except denied access. Everything else (a broken
// format, a link out of SOURCE, a missing file, EACCES/EPERM) stays until what it names
// changes.
inline bool IsTransient(const Status& status) {
  return status.code() == Status::Code::kIoError && status.errno_value() != EACCES &&
         status.errno_value() != EPERM;
}

}  // namespace ckptfs
