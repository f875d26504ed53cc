// The ckptfs subcommands that do not mount: inspect, verify and umount. Each returns a
// process exit code (0 ok, 1 runtime failure, 2 bad usage or invalid checkpoint) and
// prints refusals as one line on stderr.
#pragma once

#include <string>

namespace ckptfs {

int RunInspect(const std::string& source, bool json);
int RunVerify(const std::string& source);
int RunUmount(const std::string& mountpoint);

// Exit code for a failure to open a checkpoint: 2 for invalid input, 1 for I/O trouble.
int ExitCodeForOpenFailure(const class Status& status);

}  // namespace ckptfs
