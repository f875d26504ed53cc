// Ownership: who owns the files a mount shows and which permission bits they show, from
// `ckptfs mount --uid --gid --umask --file-mode --dir-mode` (mountpoint-s3's names).
//
// The rule. The core layout gives each node a source-derived mode: read and execute bits
// no wider than the SOURCE files it draws from (core/layout/layout.h, "Modes"). The mode
// shown is
//     (source-derived & requested & 0555  |  requested & 0222) & ~umask
// where `requested` is --file-mode or --dir-mode (default 0555: the source-derived mode
// as it is). So read and execute bits are never wider than SOURCE's, whatever is asked,
// and the mount shows no write bit unless asked for one: the mount is read-only (every
// write fails with EROFS whatever the bits say), but a copy keeps the bits, and `cp -r`
// of 0555 directories gives a copy its owner cannot `rm -rf`; `--dir-mode 0755
// --file-mode 0644` gives copies their owner can change and delete.
// --uid / --gid name the owner (default: the mounting user and group); the owner class's
// bits then apply to that user. The kernel checks every access against these values
// (default_permissions), so `--umask 077` leaves the files to their owner alone.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace ckptfs {

struct Ownership {
  std::optional<uid_t> uid;  // default: the mounting user
  std::optional<gid_t> gid;  // default: the mounting user's group
  uint32_t file_mode = 0555;
  uint32_t dir_mode = 0555;
  uint32_t umask = 0;
};

// The mode to show for a node whose source-derived mode is `source_mode`, given the
// requested `mode` (Ownership::file_mode or dir_mode) and `umask` (see the rule above).
uint32_t ShownMode(uint32_t source_mode, uint32_t mode, uint32_t umask);

// An octal mode from 0 to 0777 ("644", "0644", "0o644") for `option`; InvalidArgument
// "OPTION TEXT: not an octal mode from 0 to 0777" otherwise.
Result<uint32_t> ParseMode(const std::string& option, const std::string& text);

// A user (or with `group`, a group): a decimal id below 2^32 - 1 (which means "no
// change" to chown(2)), or a name the system knows; InvalidArgument naming `option`
// otherwise.
Result<uint32_t> ParseOwner(const std::string& option, const std::string& text, bool group);

}  // namespace ckptfs
