// The command lines that ask for a mount, made one before CLI11 parses them.
//
// Two callers: a user typing `ckptfs mount [options] SOURCE MOUNTPOINT`, and mount(8)
// for an fstab line of type fuse.ckptfs, whose helper mount.fuse3 runs
// `ckptfs SOURCE MOUNTPOINT -o OPTS` (the FUSE convention: no subcommand). Both may spell
// any long option of `mount` either way: `--cache-size 1G` or `-o cache_size=1G`, a flag
// `--zip-crc` or `-o zip_crc`. The -o spelling is derived from the subcommand's own option
// list (LongOptionsOf), so an option added to `mount` is an -o option with no more code.
// Of the other -o options, those only mount(8) understands are dropped and the rest are
// left for libfuse (and CheckFuseOptions in fs/preflight.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}

namespace ckptfs {

// A long option as -o spells it: "cache_size" for --cache-size.
struct LongOption {
  std::string name;  // CLI11's long name, without dashes: "cache-size"
  bool needs_value;  // --name VALUE; false for flags and options whose value is optional
};

// Every long option of the CLI11 (sub)command `cmd`.
std::vector<LongOption> LongOptionsOf(const CLI::App& cmd);

// Who is asking. mount(8) adds `rw` to every fstab line that does not say `ro`; from it,
// `rw` is dropped (the mount is read-only whatever it says). From a user it is left for
// CheckFuseOptions, which refuses it.
enum class MountCaller { kUser, kMountHelper };

struct MountArgs {
  std::vector<std::string> args;          // for CLI11, every -o item of ours as --name[=value]
  std::vector<std::string> fuse_options;  // -o items for libfuse, as given (escapes kept)
};

// Rewrites the arguments that follow `mount`: each `-o A,B` (or `-oA,B`) is split at
// commas not escaped by a backslash, as libfuse splits it; an item NAME[=VALUE] whose NAME
// with '_' for '-' is in `options` becomes `--NAME[=VALUE]` in place, an item in
// IsMountOnlyOption is dropped, any other goes to fuse_options. Everything else is kept in
// order; the value after a long option that needs one is never read as -o, nor is anything
// after `--`. Fails (one line naming the item) for `-o` with nothing after it and for an
// option that needs a value given without one.
Result<MountArgs> ExpandMountArgs(const std::vector<std::string>& args,
                                  const std::vector<LongOption>& options, MountCaller caller);

// Options meant for mount(8) or mount.fuse3 alone, which libfuse would refuse: defaults,
// auto, noauto, nofail, _netdev, user, users, nouser, user=NAME, x-*, comment=*, and `ro`
// (ckptfs mounts are read-only anyway). Backslash escapes are ignored, as libfuse does.
bool IsMountOnlyOption(const std::string& option);

// The one line refusing the -o item `item` that neither ckptfs nor libfuse takes: it names
// the item and, when one of `options` is spelt within two edits of it, suggests that one
// ("did you mean -o cache_size?"); else it says where the options are listed.
std::string UnknownMountOptionLine(const std::string& item, const std::vector<LongOption>& options);

// The one line refusing the first of `args` (what follows the subcommand `command`, e.g.
// "ckptfs mount") that is spelt as a long option, --NAME or --NAME=VALUE, and is none of
// `options`: with the option spelt within two edits of it, as UnknownMountOptionLine
// ("--cache-szie: not an option of ckptfs mount; did you mean --cache-size?"); nullopt
// when every one is known. The value after an option that needs one, and whatever
// follows `--`, are not options.
std::optional<std::string> UnknownLongOptionLine(const std::vector<std::string>& args,
                                                 const std::vector<LongOption>& options,
                                                 const std::string& command);

// Whether `ckptfs ARG ...` with ARG not a subcommand nor an option is the FUSE convention
// (`ckptfs SOURCE MOUNTPOINT`): ARG names a URL, holds a '/', or exists. A bare word that
// is none of these ("inpsect") is a mistyped subcommand instead. A SOURCE that is spelt
// like a subcommand needs `ckptfs mount inspect ...` or `./inspect`.
bool LooksLikeSource(const std::string& arg);

}  // namespace ckptfs
