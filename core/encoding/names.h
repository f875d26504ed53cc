// Names every format and view agree on: which tensor names may name files at all, and the
// per-key split file names (pytorch_model/<key>.pt), which the split reader parses and the
// pytorch_model/ view writes. Below both: a parser needs no view to read a split file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// Empty if `name` (a tensor name or raw key, from any format's parser) may name files,
// else why not: it holds a NUL byte, which every path, listing and xattr would cut short,
// so that two tensors could meet. One rule for every format: OpenCheckpointIn
// (core/format/formats.h) refuses a checkpoint with such a name, whatever its format.
std::string TensorNameProblem(std::string_view name);

// `text` with '%' -> "%25" and '/' -> "%2F": the escapes both name rules share.
std::string PercentEscapeSlash(std::string_view text);

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
