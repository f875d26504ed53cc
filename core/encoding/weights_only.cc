#include "core/encoding/weights_only.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace ckptfs {
namespace {

template <size_t N>
constexpr bool Sorted(const std::string_view (&table)[N]) {
  return std::is_sorted(std::begin(table), std::end(table));
}

template <size_t N>
bool Holds(const std::string_view (&table)[N], std::string_view name) {
  return std::binary_search(std::begin(table), std::end(table), name);
}

// torch's default weights_only allowlist: torch/_weights_only_unpickler.py
// _get_allowed_globals() of torch 2.6 and later, spelled out. Exact names:
constexpr std::string_view kWeightsOnlyGlobals[] = {
    "_codecs.encode",
    "builtins.bytearray",
    "builtins.complex",
    "builtins.set",
    "collections.Counter",
    "collections.OrderedDict",
    "torch.Size",
    "torch.Tensor",
    "torch._tensor._rebuild_from_type_v2",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor",
    "torch._utils._rebuild_device_tensor_from_numpy",
    "torch._utils._rebuild_meta_tensor_no_storage",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch._utils._rebuild_qtensor",
    "torch._utils._rebuild_sparse_tensor",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_wrapper_subclass",
    "torch.device",
    "torch.nn.parameter.Parameter",
    "torch.per_channel_affine",
    "torch.per_channel_affine_float_qparams",
    "torch.per_channel_symmetric",
    "torch.per_tensor_affine",
    "torch.per_tensor_symmetric",
    "torch.serialization._get_layout",
    "torch.storage.TypedStorage",
    "torch.storage.UntypedStorage",
};
// torch.DTYPE: the keys of torch.storage._dtype_to_storage_type_map(), _new_dtypes(),
// uint1-7 and int1-7.
constexpr std::string_view kWeightsOnlyDtypes[] = {
    "bfloat16",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
    "bits8",
    "bool",
    "complex128",
    "complex32",
    "complex64",
    "float16",
    "float32",
    "float4_e2m1fn_x2",
    "float64",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "int1",
    "int16",
    "int2",
    "int3",
    "int32",
    "int4",
    "int5",
    "int6",
    "int64",
    "int7",
    "int8",
    "qint32",
    "qint8",
    "quint2x4",
    "quint4x2",
    "quint8",
    "uint1",
    "uint16",
    "uint2",
    "uint3",
    "uint32",
    "uint4",
    "uint5",
    "uint6",
    "uint64",
    "uint7",
    "uint8",
};
// torch._storage_classes (torch.X and torch.cuda.X) and torch._tensor_classes (torch,
// torch.cuda, torch.sparse, torch.cuda.sparse; the sparse ones lack Bool), X being
// KIND + "Storage" / "Tensor".
constexpr std::string_view kStorageKinds[] = {
    "BFloat16", "Bool",     "Byte",     "Char",   "ComplexDouble", "ComplexFloat",
    "Double",   "Float",    "Half",     "Int",    "Long",          "QInt32",
    "QInt8",    "QUInt2x4", "QUInt4x2", "QUInt8", "Short",
};
constexpr std::string_view kTensorKinds[] = {"BFloat16", "Bool", "Byte", "Char", "Double",
                                             "Float",    "Half", "Int",  "Long", "Short"};
static_assert(Sorted(kWeightsOnlyGlobals) && Sorted(kWeightsOnlyDtypes) && Sorted(kStorageKinds) &&
              Sorted(kTensorKinds));

bool StripPrefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}
bool StripSuffix(std::string_view& s, std::string_view suffix) {
  if (!s.ends_with(suffix)) return false;
  s.remove_suffix(suffix.size());
  return true;
}

// The opcodes torch's weights_only Unpickler.load reads (torch/_weights_only_unpickler.py),
// with their pickletools names; any other is "Unsupported operand".
struct OpcodeName {
  uint8_t code;
  std::string_view name;
};
constexpr OpcodeName kOpcodeNames[] = {
    {'(', "MARK"},
    {'.', "STOP"},
    {'0', "POP"},
    {'1', "POP_MARK"},
    {'2', "DUP"},
    {'F', "FLOAT"},
    {'I', "INT"},
    {'J', "BININT"},
    {'K', "BININT1"},
    {'L', "LONG"},
    {'M', "BININT2"},
    {'N', "NONE"},
    {'P', "PERSID"},
    {'Q', "BINPERSID"},
    {'R', "REDUCE"},
    {'S', "STRING"},
    {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"},
    {'X', "BINUNICODE"},
    {'a', "APPEND"},
    {'b', "BUILD"},
    {'c', "GLOBAL"},
    {'d', "DICT"},
    {'}', "EMPTY_DICT"},
    {'e', "APPENDS"},
    {'g', "GET"},
    {'h', "BINGET"},
    {'i', "INST"},
    {'j', "LONG_BINGET"},
    {'l', "LIST"},
    {']', "EMPTY_LIST"},
    {'o', "OBJ"},
    {'p', "PUT"},
    {'q', "BINPUT"},
    {'r', "LONG_BINPUT"},
    {'s', "SETITEM"},
    {'t', "TUPLE"},
    {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"},
    {'G', "BINFLOAT"},
    {0x80, "PROTO"},
    {0x81, "NEWOBJ"},
    {0x82, "EXT1"},
    {0x83, "EXT2"},
    {0x84, "EXT4"},
    {0x85, "TUPLE1"},
    {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},
    {0x8a, "LONG1"},
    {0x8b, "LONG4"},
    {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"},
    {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},
    {0x95, "FRAME"},
    {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};
constexpr std::string_view kWeightsOnlyOpcodes[] = {
    "APPEND",      "APPENDS",   "BINFLOAT",    "BINGET",     "BININT",          "BININT1",
    "BININT2",     "BINPERSID", "BINPUT",      "BINUNICODE", "BUILD",           "EMPTY_DICT",
    "EMPTY_LIST",  "EMPTY_SET", "EMPTY_TUPLE", "GLOBAL",     "LONG1",           "LONG_BINGET",
    "LONG_BINPUT", "MARK",      "NEWFALSE",    "NEWOBJ",     "NEWTRUE",         "NONE",
    "PROTO",       "REDUCE",    "SETITEM",     "SETITEMS",   "SHORT_BINSTRING", "STOP",
    "TUPLE",       "TUPLE1",    "TUPLE2",      "TUPLE3",
};
static_assert(Sorted(kWeightsOnlyOpcodes));

std::string OpcodeLabel(uint8_t code) {
  for (const OpcodeName& op : kOpcodeNames) {
    if (op.code == code) return std::string(op.name);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string{'0', 'x', kHex[code >> 4], kHex[code & 15]};
}

}  // namespace

bool IsWeightsOnlyAllowed(std::string_view full_name) {
  if (Holds(kWeightsOnlyGlobals, full_name)) return true;
  std::string_view rest = full_name;
  if (!StripPrefix(rest, "torch.")) return false;
  if (Holds(kWeightsOnlyDtypes, rest)) return true;
  const bool cuda = StripPrefix(rest, "cuda.");
  if (StripSuffix(rest, "Storage")) {
    // torch.cuda has no quantized storages.
    return rest.find('.') == rest.npos && Holds(kStorageKinds, rest) && !(cuda && rest[0] == 'Q');
  }
  const bool sparse = StripPrefix(rest, "sparse.");
  if (!StripSuffix(rest, "Tensor") || !Holds(kTensorKinds, rest)) return false;
  return !sparse || rest != "Bool";
}

WeightsOnlyVerdict WeightsOnlyVerdictOf(const PickleNames& names) {
  WeightsOnlyVerdict out;
  std::set<std::string> refused;
  for (const auto& [module, name] : names.globals) {
    // torch's _read_global_instruction renames as protocol 2 does, whatever the protocol.
    const auto [m, n] = CompatPickleName(module, name, 2);
    std::string full = m + "." + n;
    if (!IsWeightsOnlyAllowed(full)) refused.insert(std::move(full));
  }
  out.globals.assign(refused.begin(), refused.end());
  for (size_t code = 0; code < names.opcodes.size(); ++code) {
    if (!names.opcodes[code]) continue;
    std::string label = OpcodeLabel(static_cast<uint8_t>(code));
    if (!Holds(kWeightsOnlyOpcodes, label)) out.opcodes.push_back(std::move(label));
  }
  out.loads = out.globals.empty() && out.opcodes.empty();
  return out;
}

void MergeWeightsOnlyVerdict(WeightsOnlyVerdict& into, const WeightsOnlyVerdict& other) {
  auto merge = [](std::vector<std::string>& a, const std::vector<std::string>& b) {
    std::set<std::string> all(a.begin(), a.end());
    all.insert(b.begin(), b.end());
    a.assign(all.begin(), all.end());
  };
  merge(into.globals, other.globals);
  merge(into.opcodes, other.opcodes);
  into.loads = into.loads && other.loads;
}

namespace {

// Untrusted text on a terminal: no control bytes, bounded.
std::string Shown(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : s.substr(0, 200)) {
    const auto b = static_cast<uint8_t>(c);
    if (b < 0x20 || b == 0x7f || b == '\\') {
      out += b == '\\' ? "\\\\" : std::string{'\\', 'x', kHex[b >> 4], kHex[b & 15]};
    } else {
      out += c;
    }
  }
  return s.size() > 200 ? out + "..." : out;
}

}  // namespace

std::string WeightsOnlyLine(const WeightsOnlyVerdict& verdict) {
  if (verdict.loads) return "would load";
  constexpr size_t kShownNames = 20;
  std::string out = "would refuse:";
  size_t shown = 0, total = 0;
  auto list = [&](const std::vector<std::string>& names, std::string_view label) {
    for (const std::string& name : names) {
      if (++total > kShownNames) continue;
      out += shown++ == 0 ? " " : ", ";
      out.append(label).append(Shown(name));
    }
  };
  list(verdict.globals, "");
  list(verdict.opcodes, "opcode ");
  if (total > shown) out += " and " + std::to_string(total - shown) + " more";
  return out;
}

std::string WeightsOnlyJson(const WeightsOnlyVerdict& verdict) {
  const nlohmann::ordered_json out = {
      {"loads", verdict.loads}, {"globals", verdict.globals}, {"opcodes", verdict.opcodes}};
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ckptfs
