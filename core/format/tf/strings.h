// strings: DT_STRING tensors and the object graph, decoded for .ckptfs/metadata.json.
//
// A DT_STRING tensor of N elements is stored as N varint64 lengths, then the masked
// CRC32C of those lengths (each as a little-endian uint32, or uint64 if over 4 GiB: TF's
// rule), then the string bytes back to back. The entry's CRC covers the lengths as summed
// for that checksum, the 4 checksum bytes and the string bytes (not the stored varints).
//
// `_CHECKPOINTABLE_OBJECT_GRAPH` is a scalar string holding a TrackableObjectGraph:
//   nodes = 1 { children = 1 { node_id = 1; local_name = 2 }
//               attributes = 2 { name = 1; full_name = 2; checkpoint_key = 3 }
//               slot_variables = 3 { original_variable_node_id = 1; slot_name = 2;
//                                    slot_variable_node_id = 3 } }
// ObjectGraphToJson turns it into {"nodes": [{"id", "children": [{"name", "node_id"}],
// "attributes": [...], "slot_variables": [...]}]}; child ids must name a node.
// Strings in the JSON may not be UTF-8: dump with error_handler_t::replace. Pure
// functions; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/format/tf/bundle.h"
#include "core/status.h"

namespace ckptfs::tf {

inline constexpr std::string_view kObjectGraphKey = "_CHECKPOINTABLE_OBJECT_GRAPH";

// The `elements` strings in `bytes` (a string tensor's whole stored bytes). Refused, as a
// Corruption starting with `what` (e.g. the data file and key): a bad varint, a length
// checksum or entry CRC (`where`) mismatch, lengths that do not add up to exactly the bytes.
Result<std::vector<std::string>> DecodeStringTensor(std::string_view bytes, uint64_t elements,
                                                    const TfLocation& where,
                                                    const std::string& what);

// The object graph in `bytes` (the graph string, already decoded) as JSON.
Result<nlohmann::json> ObjectGraphToJson(std::string_view bytes, const std::string& what);

}  // namespace ckptfs::tf
