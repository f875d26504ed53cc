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

namespace ckptfs {

// Empty if `name` (a tensor name or raw key, from any format's parser) may name files,
// else why not: it holds a NUL byte, which every path, listing and xattr would cut short,
// so that two tensors could meet. One rule for every format: ReadCheckpoint
// (core/checkpoint/formats.h) refuses a checkpoint with such a name, whatever its format.
std::string TensorNameProblem(std::string_view name);

std::string EscapeComponent(std::string_view component);

// The escaped directory components and leaf of `tensor_name`, leaf last (without suffix).
std::vector<std::string> TensorPathComponents(std::string_view tensor_name);

// The same for a TensorFlow tensor, from its raw index key: the path follows the key's
// segments (tf::TfKeyToName), so a segment holding '.' stays one component.
std::vector<std::string> TfTensorPathComponents(std::string_view key);

// Per-key split files (pytorch_model/<name>.pt, docs/split.md): the whole key is one file
// name, escaped so that every key gets its own and none is map.pt: '%' -> "%25", '/' ->
// "%2F", the key "map" -> "%6Dap"; then ".pt". A name that would exceed kMaxFileName bytes
// is its first kSplitPrefixBytes bytes, '~', the 16 lowercase hex digits of the key's
// FNV-1a 64 and ".pt" (kSplitHashedSize bytes). Short names are injective; hashed ones
// are told apart by the hash, so two keys meeting there is a refusal (reader) or a note
// (view). NUL bytes are refused earlier (TensorNameProblem).
inline constexpr size_t kMaxFileName = 255;
inline constexpr size_t kSplitPrefixBytes = 200;
inline constexpr size_t kSplitHashedSize = kSplitPrefixBytes + 1 + 16 + 3;
inline constexpr std::string_view kSplitMapFile = "map.pt";

uint64_t Fnv1a64(std::string_view bytes);
std::string SplitKeyFileName(std::string_view key);

// What a split file name stands for: the key of a short name, or for a hashed one the
// escaped prefix (`hashed` set; the key itself cannot be recovered). nullopt for a name
// SplitKeyFileName never makes (no ".pt", a '%' that is not "%25", "%2F" or a leading
// "%6Dap" alone, a '/' or NUL, a short name past kMaxFileName, map.pt itself).
struct SplitName {
  std::string key;
  bool hashed = false;
};
std::optional<SplitName> DecodeSplitFileName(std::string_view name);

}  // namespace ckptfs
