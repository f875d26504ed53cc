// weights_only: whether torch.load(f, weights_only=True) would load a pickle, judged on the
// names it uses (PickleNames, core/encoding/pickle_globals.h) without running anything.
//
// The verdict is whether current torch (2.6 and later, where weights_only=True is the
// default) would accept the globals and opcodes a pickle uses: torch/_weights_only_unpickler.py's
// _get_allowed_globals() (the default allowlist, no add_safe_globals), with its
// _read_global_instruction's Python 2 renames, and its Unpickler.load opcode set. It does not judge
// what torch checks on values (which objects BUILD or APPEND may touch, persistent ids other than
// storages, sparse tensor invariants); a pickle whose globals are all allowed builds only allowed
// types, so those checks refuse only malformed files.
//
// Thread safety: every function here is pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/pickle_globals.h"

namespace ckptfs {

// Whether torch.load(weights_only=True) would accept what `names` holds (above). `globals`
// lists each refused global as torch would name it ("argparse.Namespace"), sorted and
// distinct; `opcodes` each opcode its unpickler lacks ("SHORT_BINUNICODE").
struct WeightsOnlyVerdict {
  bool loads = true;
  std::vector<std::string> globals;
  std::vector<std::string> opcodes;
};
WeightsOnlyVerdict WeightsOnlyVerdictOf(const PickleNames& names);

// Adds `other`'s refusals to `into` (a checkpoint of several files loads when each does).
void MergeWeightsOnlyVerdict(WeightsOnlyVerdict& into, const WeightsOnlyVerdict& other);

// One line for `inspect`: "would load", or "would refuse: argparse.Namespace, ..." naming
// at most 20 globals then "and N more" (opcodes likewise, after them), control bytes
// escaped as \xHH and each name cut at 200 bytes.
std::string WeightsOnlyLine(const WeightsOnlyVerdict& verdict);
// The verdict as compact JSON: {"loads": BOOL, "globals": [...], "opcodes": [...]}, every
// list whole. Names not valid UTF-8 have their bad bytes replaced (U+FFFD).
std::string WeightsOnlyJson(const WeightsOnlyVerdict& verdict);

// Whether "module.name" (after renames) is on torch's default weights_only allowlist.
bool IsWeightsOnlyAllowed(std::string_view full_name);

}  // namespace ckptfs
