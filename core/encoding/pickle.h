// pickle: a restricted unpickler for the data.pkl record of torch checkpoints.
//
// It never runs code and never imports anything: it turns the opcode stream into a tree
// of plain values held in one arena, and leaves the meaning of calls to the caller
// (core/format/torch_file). A global is only a name: every GLOBAL / STACK_GLOBAL / INST
// becomes an inert kGlobal node, and calling it (REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ)
// an inert kCall node holding the callable, its arguments and, after BUILD, its state,
// so a class the reader has never heard of (argparse.Namespace, pathlib.PosixPath, a
// user's own class) is an opaque value the caller reads as data.
//
// Denylist. A pickle that names what only an attack needs is refused outright (Unsupported,
// "global os.system is not allowed (byte N)"), before anything else happens: a checkpoint
// has no business naming a way to run a command, open a file or socket, import a module or
// evaluate code, and serving such a file as data would hide that from its user. Each
// global is judged as Python's find_class would resolve it at the protocol the stream is
// at (the latest PROTO; 0 before any): _compat_pickle's renames below protocol 3, dotted
// names as attribute walks. The list, its families and the resolution rules are
// IsDeniedPickleGlobal's, in core/encoding/pickle_globals.h. It is a tripwire, not a
// guarantee: the guarantee is that nothing here runs what a pickle names.
// One exception, for the enums checkpoints hold: getattr called as getattr(E, 'name')
// (how Python 3.11.0-3.11.6 pickle an enum member), E being DeepSpeed's ZeroStageEnum (rank
// files) or DCP's _MEM_FORMAT_ENCODING (a .metadata's TensorProperties); getattr called
// any other way is refused (Unsupported, at the call's byte). Opcodes EXT1/2/4 (the copyreg
// extension registry), PERSID (text), and the out-of-band buffers of protocol 5 stay refused; BUILD
// on a number, string or global is a malformed stream.
//
// Objects. REDUCE(f, args) and NEWOBJ(cls, args) are kCall {callable, args};
// NEWOBJ_EX(cls, args, kwargs) is kCall {callable, args, kwargs}; INST and OBJ are the
// same as REDUCE. BUILD sets `state` (a dict, a (dict, slots dict) slotstate tuple, or any
// value __setstate__ takes). APPEND(S) and SETITEM(S) onto a call (a list or dict
// subclass: defaultdict, Lightning's AttributeDict) go to a kList / kDict node that the
// call's `contents` names. collections.OrderedDict() (empty args) is a kDict outright.
//
// Limits, so hostile input cannot exhaust the machine: the input is what the caller read
// (it caps the record size); values, container items and the memo are each capped by the
// input length (every opcode consumes at least one byte), and values also by
// kMaxPickleValues; strings are copies of slices of the input; MARK nesting is capped at
// kMaxPickleDepth. The memory the tree and the parser's own tables take is charged as it
// is allocated to a MetadataBudget (core/encoding/metadata_budget.h) of the input's size:
// past 32 times the pickle plus 64 MiB the pickle is refused (Unsupported, "unpickling
// would take more than N bytes of memory"). A value's tree node costs far more than its
// opcode, so input of many tiny values (millions of 2-byte ints) is what reaches that;
// torch state dicts stay within it (the ratios measured: docs/security.md). Cycles (a list
// appended to itself) are representable; walkers must bound their recursion.
//
// Thread safety: Unpickle is a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/pickle_globals.h"
#include "core/status.h"

namespace ckptfs {

inline constexpr uint32_t kMaxPickleDepth = 256;
// At most 2^22 values whatever the input; a torch pickle spends about 15 values a tensor,
// so this admits a single file of a quarter million tensors.
inline constexpr size_t kMaxPickleValues = size_t{1} << 22;

enum class PickleKind : uint8_t {
  kNone,
  kBool,        // int_value 0 or 1
  kInt,         // int_value (ints beyond 64 bits are refused)
  kFloat,       // float_value
  kString,      // text (UTF-8)
  kBytes,       // text (raw bytes; also SHORT_BINSTRING / BINSTRING). int_value: 1 + the
                // byte offset in the pickle where those bytes lie verbatim (BINBYTES,
                // SHORT_BINBYTES, BINBYTES8, BYTEARRAY8, BINSTRING...), 0 when escaped
  kTuple,       // items
  kList,        // items
  kSet,         // items (EMPTY_SET/ADDITEMS, FROZENSET)
  kDict,        // items: key0, value0, key1, value1, ... in insertion order; a repeated
                // key keeps its first position and takes the last value, as python does
  kGlobal,      // text "module.name", e.g. "torch._utils._rebuild_tensor_v2"
  kCall,        // REDUCE, NEWOBJ, INST, OBJ: items = {callable, args tuple}; NEWOBJ_EX:
                // {callable, args tuple, kwargs dict}. `state` set by BUILD, `contents`
                // by APPEND(S) / SETITEM(S). collections.OrderedDict() (empty args) is a
                // kDict instead, since torch.save fills state dicts with SETITEMS on it.
  kPersistent,  // BINPERSID: items = {the persistent id}
};

struct PickleValue {
  static constexpr uint32_t kNoState = UINT32_MAX;

  PickleKind kind = PickleKind::kNone;
  int64_t int_value = 0;
  double float_value = 0;
  std::string text;
  std::vector<uint32_t> items;   // indices into PickleTree::values
  uint32_t state = kNoState;     // kCall, kDict, kList, kSet: the BUILD argument, if any
  uint32_t contents = kNoState;  // kCall: the kList / kDict its APPEND(S) / SETITEM(S) filled
};

struct PickleTree {
  std::vector<PickleValue> values;
  uint32_t root = 0;  // the value STOP returned
  PickleNames names;  // the globals and opcodes the stream used (pickle_globals.h)

  const PickleValue& at(uint32_t index) const { return values[index]; }
};

// Which file the pickle comes from; the unpickler treats both alike (the denylist above),
// the interpreter (torch_file.h) reads a few values differently for DeepSpeed.
enum class PickleGlobals : uint8_t {
  kTorch,      // a torch.save file
  kDeepSpeed,  // a DeepSpeed rank file or client state
};

// Parses `data` (a whole pickle, STOP included). Errors are Corruption (malformed stream,
// truncated, stack underflow, limits) or Unsupported (a denied global or opcode);
// every message starts with `file_name` and `record` (the zip record the pickle is, empty
// where the file itself is the pickle, as DCP's .metadata), says what was wrong and at
// which byte offset:
//   "ckpt.bin: data.pkl: global os.system is not allowed (byte 2)"
Result<PickleTree> Unpickle(std::string_view data, const std::string& file_name,
                            PickleGlobals globals = PickleGlobals::kTorch,
                            std::string_view record = "data.pkl");

}  // namespace ckptfs
