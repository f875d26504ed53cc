// checkpoint_state: the text-format CheckpointState TF keeps in a directory's `checkpoint`
// file, and which prefix it names (tf.train.latest_checkpoint's rule).
//
//   model_checkpoint_path: "ckpt-3"
//   all_model_checkpoint_paths: "ckpt-2"
//   all_model_checkpoint_paths: "ckpt-3"
//   all_model_checkpoint_timestamps: 1700000000.5
//
// The parser reads the text-proto subset TF writes: `name: value` fields, values a quoted
// string (single or double quotes, C escapes \n \t \\ \' \" \NNN octal \xHH) or a number,
// `#` comments. An unknown field is skipped; a malformed line is refused. Pure functions;
// thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ckptfs::tf {

struct CheckpointState {
  std::string model_checkpoint_path;  // as written (may be absolute and stale)
  std::vector<std::string> all_model_checkpoint_paths;
};

Result<CheckpointState> ParseCheckpointState(std::string_view text, const std::string& file_name);

// The prefix to open inside SOURCE for `path` from the state file, as a relative path:
// an absolute path, or one with a `..` component, is reduced to its base name (a stale
// absolute path from another machine names the checkpoint beside the state file; nothing
// outside SOURCE is ever named); `.` and empty components are dropped. InvalidArgument
// naming `file_name` if nothing is left or a NUL or control character is in it.
Result<std::string> StatePathInSource(std::string_view path, const std::string& file_name);

// ParseCheckpointState, then StatePathInSource of model_checkpoint_path; NotFound if the
// file names no checkpoint.
Result<std::string> LatestCheckpointPrefix(std::string_view text, const std::string& file_name);

}  // namespace ckptfs::tf
