// TensorFlow's own part of a Checkpoint (Checkpoint::format_state of a TF checkpoint, kept
// by tf_reader.cc): what no other format has.
#pragma once

#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"

namespace ckptfs {

struct TfState final : FormatState {
  // The raw index key of each tensor, parallel to Checkpoint::tensors (a tensor's name is
  // tf::TfKeyToName of it): TensorKeys (checkpoint.h) returns them.
  std::vector<std::string> keys;
};

}  // namespace ckptfs
