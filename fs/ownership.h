// Ownership options: the parsers of `ckptfs mount --uid --gid --umask --file-mode
// --dir-mode`. The rule they feed (Ownership, ShownMode) is core's: core/mount/mount_tree.h.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/mount/mount_tree.h"
#include "core/status.h"

namespace ckptfs {

// An octal mode from 0 to 0777 ("644", "0644", "0o644") for `option`; InvalidArgument
// "OPTION TEXT: not an octal mode from 0 to 0777" otherwise.
Result<uint32_t> ParseMode(const std::string& option, const std::string& text);

// A user (or with `group`, a group): a decimal id below 2^32 - 1 (which means "no
// change" to chown(2)), or a name the system knows; InvalidArgument naming `option`
// otherwise.
Result<uint32_t> ParseOwner(const std::string& option, const std::string& text, bool group);

}  // namespace ckptfs
