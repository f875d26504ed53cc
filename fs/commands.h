// The ckptfs subcommands that do not mount: inspect, verify, pack and umount. Each returns a
// process exit code (0 ok, 1 runtime failure, 2 bad usage or invalid checkpoint) and
// prints refusals as one line on stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/read_context.h"
#include "core/pack/pack.h"
#include "core/source/remote_options.h"
#include "core/status.h"

namespace ckptfs {

// "512M", "4G", "1048576", "64K" (binary units) -> bytes; nullopt if malformed, signed
// ("-1", "+5"), with blanks, or past 2^64-1.
std::optional<uint64_t> ParseByteSize(const std::string& text);

// inspect SOURCE: a run (core/run/run_listing.h) lists its checkpoints, else the one
// checkpoint's shards and tensors.
// `open` carries --model-key and the remote options.
int RunInspect(const std::string& source, bool json, const ReadOptions& options,
               const OpenOptions& open);
// When SOURCE is a run: prints its entries, latest and best (fs/run_inspect.cc) and returns
// the exit code; nullopt when it is not a run (or cannot be listed: RunInspect then reports),
// with SOURCE's listing in `not_run` when it was listed, so it is not listed twice.
std::optional<int> InspectIfRun(const std::string& source, bool json, ReadContext& context,
                                const OpenOptions& open, std::optional<SourceDir>* not_run);

// When SOURCE is a run (and so not one checkpoint pack or verify can take): the one-line
// refusal naming the entry to take instead, "SOURCE is a training run (N checkpoints);
// pack one: SOURCE/checkpoint-N" (`verb` "pack" or "verify"); nullopt otherwise.
std::optional<Status> RunInsteadOfCheckpoint(const std::string& source, std::string_view verb,
                                             const ReadOptions& read_options,
                                             const RemoteOptions& remote);

// "1.5 MiB": binary units, one decimal.
std::string HumanBytes(uint64_t n);
int RunVerify(const std::string& source, const ReadOptions& read_options, const OpenOptions& open);
// Unmounts the ckptfs mount at `mountpoint` only (fusermount3 -u, or -uz when `lazy`:
// detached at once, the daemon ends when the last open file closes). Exit 0 unmounted;
// 2 (one line) for a path that is not exactly a mount point in /proc/self/mountinfo
// ("not mounted") or is one of another file system ("not a ckptfs mount"); 1 when the
// unmount fails: "busy" with the hint to fuser/lsof and -z, or the system's reason.
int RunUmount(const std::string& mountpoint, bool lazy);
// Packs SOURCE into DEST (see core/pack/pack.h); on a terminal a progress line (bytes,
// MB/s, ETA) on stderr, rewritten in place; always, at the end, one line on stdout with
// the shards written, decoded and stored size, ratio and time.
int RunPack(const std::string& source, const std::string& dest, const PackOptions& options,
            const RemoteOptions& remote);

// What the views of `volume` leave out or shadow, one line each; the first 20 notes and a
// count of the rest, since a checkpoint of many strided tensors would flood the log.
std::vector<std::string> LayoutNotes(const class Volume& volume);

// What `ckptfs mount -v` prints once the mount answers: `source` as the user named it (a
// file SOURCE is named, not its directory), format, shards, tensors, the views, the caches,
// where the daemon logs (`log`) and the layout notes.
std::string MountSummary(const class Volume& volume, const std::string& source,
                         const std::string& mountpoint, const std::string& disk_cache,
                         const std::string& log);

// What `ckptfs mount -v` prints for a training run: its checkpoints, latest and best (or
// the one pinned at the root), the cache, the log, and what the listing skipped.
std::string RunSummary(const class RunTree& run, const std::string& mountpoint,
                       const std::string& log);

// The daemon log's one line (at info) for a mount: what MountSummary says of format,
// tensors, views and cache (or RunSummary of the run), on one line.
std::string MountLogLine(const class Volume& volume, const std::string& source,
                         const std::string& mountpoint, const std::string& disk_cache);
std::string RunLogLine(const class RunTree& run, const std::string& mountpoint);

// "ckptfs: MESSAGE" on stderr, control characters escaped: one line whatever names it holds.
void PrintRefusal(const class Status& status);

// Exit code for a failure to open a checkpoint: 2 for invalid input, 1 for I/O trouble.
int ExitCodeForOpenFailure(const class Status& status);

}  // namespace ckptfs
