// The version ckptfs reports (--version, -V, the man page): "0.1.0 (git v0.1.0-12-gabcdef)",
// the git part from `git describe --always --dirty` when the binary was built from a
// checkout, absent otherwise.
#pragma once

namespace ckptfs {

const char* VersionString();

}  // namespace ckptfs
