#include "core/encoding/dtype.h"

#include <array>
#include <utility>

namespace ckptfs {
namespace {

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  uint32_t size;
  std::string_view numpy;
};

constexpr std::array<DtypeInfo, 17> kDtypes = {{
    {Dtype::kBool, "BOOL", 1, "|b1"},
    {Dtype::kU8, "U8", 1, "|u1"},
    {Dtype::kI8, "I8", 1, "|i1"},
    {Dtype::kF8E4M3, "F8_E4M3", 1, ""},
    {Dtype::kF8E5M2, "F8_E5M2", 1, ""},
    {Dtype::kI16, "I16", 2, "<i2"},
    {Dtype::kU16, "U16", 2, "<u2"},
    {Dtype::kF16, "F16", 2, "<f2"},
    {Dtype::kBF16, "BF16", 2, ""},
    {Dtype::kI32, "I32", 4, "<i4"},
    {Dtype::kU32, "U32", 4, "<u4"},
    {Dtype::kF32, "F32", 4, "<f4"},
    {Dtype::kF64, "F64", 8, "<f8"},
    {Dtype::kI64, "I64", 8, "<i8"},
    {Dtype::kU64, "U64", 8, "<u8"},
    {Dtype::kC64, "C64", 8, "<c8"},
    {Dtype::kC128, "C128", 16, "<c16"},
}};

const DtypeInfo& Info(Dtype dtype) { return kDtypes[static_cast<size_t>(dtype)]; }

}  // namespace

std::optional<Dtype> ParseDtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

std::string_view DtypeName(Dtype dtype) { return Info(dtype).name; }
uint32_t DtypeSize(Dtype dtype) { return Info(dtype).size; }
std::string_view NumpyDescr(Dtype dtype) { return Info(dtype).numpy; }
bool IsComplex(Dtype dtype) { return dtype == Dtype::kC64 || dtype == Dtype::kC128; }

std::optional<Dtype> TorchDtypeGlobal(std::string_view global) {
  static constexpr std::pair<std::string_view, Dtype> kTorchDtypes[] = {
      {"torch.float32", Dtype::kF32},        {"torch.float64", Dtype::kF64},
      {"torch.float16", Dtype::kF16},        {"torch.bfloat16", Dtype::kBF16},
      {"torch.int64", Dtype::kI64},          {"torch.int32", Dtype::kI32},
      {"torch.int16", Dtype::kI16},          {"torch.int8", Dtype::kI8},
      {"torch.uint8", Dtype::kU8},           {"torch.uint16", Dtype::kU16},
      {"torch.uint32", Dtype::kU32},         {"torch.uint64", Dtype::kU64},
      {"torch.bool", Dtype::kBool},          {"torch.complex64", Dtype::kC64},
      {"torch.complex128", Dtype::kC128},    {"torch.float8_e4m3fn", Dtype::kF8E4M3},
      {"torch.float8_e5m2", Dtype::kF8E5M2},
  };
  for (const auto& [name, dtype] : kTorchDtypes) {
    if (name == global) return dtype;
  }
  return std::nullopt;
}

}  // namespace ckptfs
