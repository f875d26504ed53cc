// Alone in its file: when HEAD moves, only this file recompiles and the binary relinks.
#include "fs/version.h"

#include "git_version.h"  // generated at build time by cmake/git_version.cmake

namespace ckptfs {

const char* VersionString() { return CKPTFS_VERSION_STRING; }

}  // namespace ckptfs
