// Tensor names to paths under tensors/.
//
// A dotted name is split into components ("model.layers.0.weight" -> model/layers/0/weight)
// and each component is escaped so that no name can leave tensors/ or collide with
// another: '%' -> "%25", '/' -> "%2F", a component "." or ".." -> "%2E" / "%2E%2E", an
// empty component (from "a..b") -> "%". The mapping is injective. NUL bytes are refused
// before, by TensorNameProblem, for every format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/names.h"

namespace ckptfs {

std::string EscapeComponent(std::string_view component);

// The escaped directory components and leaf of `tensor_name`, leaf last (without suffix).
std::vector<std::string> TensorPathComponents(std::string_view tensor_name);

// The same for a tensor stored under a key of `segments` (FormatReader::key_segments, a
// TF key's): the path follows them, so a segment holding '.' stays one component.
std::vector<std::string> KeyPathComponents(std::vector<std::string> segments);

}  // namespace ckptfs
