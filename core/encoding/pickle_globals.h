// pickle_globals: what the globals a pickle names would be to Python, and ckptfs's
// denylist of them (a tripwire).
//
// Resolution. A GLOBAL / STACK_GLOBAL / INST names (module, name); Python's
// pickle.Unpickler.find_class (Lib/pickle.py, and _pickle.c alike) does not import that
// pair as written:
//   - at protocol < 3 (the protocol the last PROTO opcode set; 0 before any) it first
//     applies _compat_pickle's tables: (module, name) in NAME_MAPPING is replaced whole,
//     else a module in IMPORT_MAPPING is renamed ("urllib2" + "urlopen" is
//     urllib.request.urlopen, "thread" is _thread);
//   - at protocol >= 4 a dotted name is an attribute walk (_getattribute): "torch" +
//     "os.system" reaches torch.os, the os module, and so posix.system.
// The module string is a real import path; only the name's components can alias another
// module, through attributes. So each candidate (the pair as written, and at protocol < 3
// its mapped form) is judged as its whole path and as every suffix that starts at a name
// component ("inspect" + "builtins.exec" is judged as inspect.builtins.exec, builtins.exec
// and exec). Dotted names are judged at every protocol, though Python < 3.14 fails them
// below protocol 4: stricter than Python, never looser.
//
// Denylist (IsDeniedPickleGlobal). A path is denied when it lies under (equals, or
// continues with '.') a denied module or global, when it is builtins.X (or __builtin__,
// __builtins__) with X a denied builtin, or when a name component past the first walks
// into what only an attack needs (kDeniedAttributes in the .cc: __globals__, __subclasses__,
// open, load, system, tofile...). Anything under a denied global is denied:
// builtins.eval.__call__, torch.load.__wrapped__. The families, in pickle_globals.cc:
// running commands, opening or creating files and sockets, importing or compiling code,
// loading other pickles or arrays from paths, and reaching any attribute by name. The one
// exception is types.SimpleNamespace, an attribute bag configs pickle. The list is a
// tripwire, not a guarantee (docs/security.md): ckptfs never runs a pickle, whatever
// it names.
//
// The weights_only verdict on the names a pickle uses (PickleNames) is
// core/encoding/weights_only.h's.
//
// Thread safety: every function here is pure.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs {

// Whether the global (module, name), read when the stream was at pickle protocol
// `protocol`, may resolve to something on the denylist (above).
bool IsDeniedPickleGlobal(std::string_view module, std::string_view name, uint32_t protocol = 2);

// Whether getattr(`global`, `attribute`), `global` a "module.name" the denylist allows, is
// only a name, as Python 3.11.0-3.11.6 pickle an enum member (getattr(Phase, 'TRAIN')):
// `attribute` is a name in capitals (a constant or enum member by PEP 8; what the
// denylist guards against, system, open, __globals__, is lower case), and the walk
// global.attribute is judged by IsDeniedPickleGlobal from the global's first component
// on (stricter than any split of module and name).
bool IsEnumMemberGetattr(std::string_view global, std::string_view attribute);

// The (module, name) a GLOBAL at `protocol` names after _compat_pickle's renames
// (Lib/pickle.py Unpickler.find_class; none at protocol >= 3).
std::pair<std::string, std::string> CompatPickleName(std::string_view module, std::string_view name,
                                                     uint32_t protocol);

// What a pickle names, as the unpickler saw it: each distinct (module, name) pair as
// written, in first-seen order, and which opcodes occur.
struct PickleNames {
  std::vector<std::pair<std::string, std::string>> globals;
  std::bitset<256> opcodes;
};

}  // namespace ckptfs
