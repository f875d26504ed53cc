// How a dict key of a torch pickle reads in tensor names: a state dict's keys are strings,
// but torch.save takes any hashable key. Scalars read as Python's str() writes them
// ("3", "True", "None"). An enum member, which only names a class (nothing here imports or
// runs it), reads as its class's last name joined to what the pickle says of the member:
//   - getattr(Phase, 'TRAIN'), as Python 3.11.0-3.11.6 pickle a member: "Phase.TRAIN",
//     which is str(Phase.TRAIN) for a plain Enum;
//   - Phase(1), as other Pythons do (the member's value; its name is not in the pickle):
//     "Phase(1)", and for a str value Split('val'): "Split('val')", as Python writes the
//     call that rebuilds it.
// The same for any class called with one scalar (an IntEnum, a str-mixin Enum, a Flag).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/encoding/pickle.h"

namespace ckptfs {

// The name of key `v` of `tree`, or nullopt for a key of another kind (a tuple, a float,
// a call of more than one argument).
std::optional<std::string> PickleKeyName(const PickleTree& tree, uint32_t v);

}  // namespace ckptfs
