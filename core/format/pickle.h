// pickle: a restricted unpickler for the data.pkl record of torch checkpoints.
//
// It never runs code and never imports anything: it turns the opcode stream into a tree
// of plain values held in one arena, and leaves the meaning of calls to the caller
// (core/format/torch_checkpoint). Only the globals torch's weights_only loader accepts
// may be named (collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch storage
// classes, ...); any other GLOBAL / STACK_GLOBAL is an error naming it, before anything
// else happens. Opcodes are the data-only subset of protocols 0-5 that torch.save and
// python's pickle emit for dicts, lists, tuples, numbers, strings and bytes; INST, OBJ,
// NEWOBJ_EX, EXT*, PERSID (text) and BUILD on anything but a call result are refused.
//
// Limits, so hostile input cannot exhaust the machine: the input is what the caller read
// (it caps the record size); values, container items and the memo are each capped by the
// input length (every opcode consumes at least one byte), and values also by
// kMaxPickleValues; strings are copies of slices of the input; MARK nesting is capped at
// kMaxPickleDepth. The memory the tree and the parser's own tables take is charged as it
// is allocated to a MetadataBudget (core/format/metadata_budget.h) of the input's size:
// past 32 times the pickle plus 64 MiB the pickle is refused (Unsupported, "unpickling
// would take more than N bytes of memory"). A value costs ~100 bytes however small its
// opcode, so millions of 2-byte ints (~50 times) are what reaches that; torch state dicts
// (~20 times their pickle) do not. Cycles (a list appended to itself) are representable; walkers
// must bound their recursion.
//
// DeepSpeed mode (PickleGlobals::kDeepSpeed) additionally admits the few classes DeepSpeed's
// rank files and a user's client_state pickle (kDeepSpeedGlobals), still as inert kGlobal and
// kCall nodes: nothing is imported or called, the caller reads the arguments as data. The one
// builtin that could reach anything, getattr, may only be called as getattr(ZeroStageEnum,
// 'name') (how Python 3.11.0-3.11.6 pickle an enum member); a call on anything else is
// refused (Unsupported).
//
// Thread safety: Unpickle is a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ckptfs {

inline constexpr uint32_t kMaxPickleDepth = 256;
// About 350 MB of tree at most; a torch pickle spends ~15 values per tensor, so this
// still admits a single file of a quarter million tensors.
inline constexpr size_t kMaxPickleValues = size_t{1} << 22;

enum class PickleKind : uint8_t {
  kNone,
  kBool,        // int_value 0 or 1
  kInt,         // int_value (ints beyond 64 bits are refused)
  kFloat,       // float_value
  kString,      // text (UTF-8)
  kBytes,       // text (raw bytes; also SHORT_BINSTRING / BINSTRING)
  kTuple,       // items
  kList,        // items
  kSet,         // items (EMPTY_SET/ADDITEMS, FROZENSET)
  kDict,        // items: key0, value0, key1, value1, ... in insertion order; a repeated
                // key keeps its first position and takes the last value, as python does
  kGlobal,      // text "module.name", e.g. "torch._utils._rebuild_tensor_v2"
  kCall,        // REDUCE or NEWOBJ: items = {callable, args tuple}; `state` set by BUILD.
                // collections.OrderedDict() (empty args) is a kDict instead, since
                // torch.save fills state dicts with SETITEMS on that call's result.
  kPersistent,  // BINPERSID: items = {the persistent id}
};

struct PickleValue {
  static constexpr uint32_t kNoState = UINT32_MAX;

  PickleKind kind = PickleKind::kNone;
  int64_t int_value = 0;
  double float_value = 0;
  std::string text;
  std::vector<uint32_t> items;  // indices into PickleTree::values
  uint32_t state = kNoState;    // kCall: the BUILD argument, if any
};

struct PickleTree {
  std::vector<PickleValue> values;
  uint32_t root = 0;  // the value STOP returned

  const PickleValue& at(uint32_t index) const { return values[index]; }
};

// Which globals a pickle may name (see the top of this file).
enum class PickleGlobals : uint8_t {
  kTorch,      // torch's weights_only list
  kDeepSpeed,  // that list and kDeepSpeedGlobals (getattr only as said above)
};

// What kDeepSpeed adds to torch's list, sorted: the DeepSpeed classes its checkpoints pickle,
// the builtins protocol 2 needs for sets and bytes, argparse.Namespace and numpy's array,
// dtype and scalar reconstructors (a client_state's args and np.random.get_state()).
inline constexpr std::string_view kDeepSpeedGlobals[] = {
    "__builtin__.getattr",
    "__builtin__.set",
    "_codecs.encode",
    "argparse.Namespace",
    "builtins.getattr",
    "builtins.set",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
    "numpy._core.multiarray._reconstruct",
    "numpy._core.multiarray.scalar",
    "numpy.core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy.dtype",
    "numpy.ndarray",
};

// Whether `globals` admits the global `module.name` (kTorch: whether the weights_only
// loader of torch accepts it).
bool IsAllowedPickleGlobal(std::string_view module, std::string_view name,
                           PickleGlobals globals = PickleGlobals::kTorch);

// Parses `data` (a whole pickle, STOP included). Errors are Corruption (malformed stream,
// truncated, stack underflow, limits) or Unsupported (a disallowed global or opcode);
// every message starts with `file_name`, says what was wrong and at which byte offset:
//   "ckpt.bin: data.pkl: global os.system is not allowed (byte 2)"
Result<PickleTree> Unpickle(std::string_view data, const std::string& file_name,
                            PickleGlobals globals = PickleGlobals::kTorch);

}  // namespace ckptfs
