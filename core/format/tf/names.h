// names: a TensorBundle key as ckptfs names it.
//
// TF object-based keys look like `model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE`; slot
// variables like `model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE`.
// Inside a segment TF escapes `.` as `..` and `/` as `.S`; a segment starting with a lone
// dot (`.ATTRIBUTES`, `.OPTIMIZER_SLOT`) is one of TF's own markers. The mapping:
//   1. strip a trailing `/.ATTRIBUTES/VARIABLE_VALUE`;
//   2. split on `/` into segments;
//   3. in each segment, scanning left to right, `..` -> `.` and `.S` -> `/`; a lone `.` at
//      the start of the segment (a marker) is dropped so nothing is hidden;
//   4. the state-dict name joins the segments with `.`.
// `dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE` ->
// segments [dense, kernel, OPTIMIZER_SLOT, optimizer, m], name
// `dense.kernel.OPTIMIZER_SLOT.optimizer.m`. TF1 keys (`dense/kernel`) have no escapes and
// map to `dense.kernel`. Segments may hold `/` or `.` or be empty; escaping them for paths
// is the layout's job. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::tf {

inline constexpr std::string_view kVariableValueSuffix = "/.ATTRIBUTES/VARIABLE_VALUE";

struct TfName {
  std::vector<std::string> segments;
  std::string dotted;  // segments joined with '.'
};

TfName TfKeyToName(std::string_view key);

// One segment with TF's escapes undone and a leading marker dot dropped.
std::string UnescapeTfSegment(std::string_view segment);

// Whether `key` is an object-based checkpoint's (tf.train.Checkpoint, Keras
// save_weights): such keys carry a `.ATTRIBUTES` segment; TF1 name-based keys never do.
bool IsObjectBasedKey(std::string_view key);

// The training state of an object-based checkpoint, which its model view leaves out:
// an optimizer slot (a `.OPTIMIZER_SLOT` segment), the checkpoint's `save_counter`, or
// a variable of the optimizer itself (first segment `optimizer`: `optimizer/iter`,
// `optimizer/learning_rate`). Segments are compared raw, as TF writes them.
bool IsTrainingStateKey(std::string_view key);

}  // namespace ckptfs::tf
