// Tensor element types as safetensors names them, with their sizes and, where numpy has
// the type, the .npy descriptor. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ckptfs {

enum class Dtype : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// "F32" -> kF32; nullopt for a name safetensors does not define.
std::optional<Dtype> ParseDtype(std::string_view name);
std::string_view DtypeName(Dtype dtype);
// Bytes per element: 1, 2, 4 or 8.
uint32_t DtypeSize(Dtype dtype);
// The numpy array-protocol descriptor ("<f4", "|b1"), or empty where numpy has no
// such type (BF16, F8 variants): those tensors are exposed as one-tensor safetensors.
std::string_view NumpyDescr(Dtype dtype);

}  // namespace ckptfs
