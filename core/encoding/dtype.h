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
  // Complex (real, imaginary) pairs: torch's complex64 / complex128, numpy's c8 / c16.
  // safetensors has no C128, and C64 only since 0.6 (readers before it refuse the whole
  // file), so no safetensors file ckptfs writes holds them (layout.h).
  kC64,
  kC128,
};

// "F32" -> kF32; nullopt for a name safetensors does not define.
std::optional<Dtype> ParseDtype(std::string_view name);

// The Dtype of a torch dtype as a pickle names it: the global `torch.<canonical name>`
// ("torch.bfloat16"; torch.float and torch.half are aliases that pickle as their canonical
// names). nullopt for a dtype ckptfs has not (torch.qint8) or any other global.
std::optional<Dtype> TorchDtypeGlobal(std::string_view global);
std::string_view DtypeName(Dtype dtype);
// Bytes per element: 1, 2, 4, 8 or 16 (C128).
uint32_t DtypeSize(Dtype dtype);
// The numpy array-protocol descriptor ("<f4", "|b1"), or empty where numpy has no
// such type (BF16, F8 variants): those tensors are exposed as one-tensor safetensors.
std::string_view NumpyDescr(Dtype dtype);
// Whether `dtype` is complex (kC64, kC128).
bool IsComplex(Dtype dtype);

}  // namespace ckptfs
