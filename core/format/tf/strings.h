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
// Strings in the JSON may not be UTF-8: they are written with error_handler_t::replace.
// Pure functions; thread-safe.
//
// Memory: WalkStringTensor copies nothing (two passes over the bytes: check, then hand
// over views), and AppendObjectGraphJson writes the JSON text straight into the caller's
// string, charging its growth to a MetadataBudget: no tree of JSON values is built
// (one per empty string or node costs many times the bytes it came from; docs/tensorflow.md).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/metadata_budget.h"
#include "core/format/tf/bundle.h"
#include "core/status.h"

namespace ckptfs::tf {

inline constexpr std::string_view kObjectGraphKey = "_CHECKPOINTABLE_OBJECT_GRAPH";

// Checks the `elements` strings in `bytes` (a string tensor's whole stored bytes), then
// calls `fn` with each in order (a view into `bytes`). Refused before any call, as a
// Corruption starting with `what` (e.g. the data file and key): a bad varint, a length
// checksum or entry CRC (`where`) mismatch, lengths that do not add up to exactly the bytes.
Status WalkStringTensor(std::string_view bytes, uint64_t elements, const TfLocation& where,
                        const std::string& what, const std::function<Status(std::string_view)>& fn);

// WalkStringTensor's strings, copied (for tests and small tensors).
Result<std::vector<std::string>> DecodeStringTensor(std::string_view bytes, uint64_t elements,
                                                    const TfLocation& where,
                                                    const std::string& what);

// The object graph in `bytes` (the graph string, already decoded) as JSON text (object
// keys sorted, as nlohmann::json writes them), appended to `out`; its growth is charged to
// `budget`, which refuses it past its limit.
Status AppendObjectGraphJson(std::string_view bytes, const std::string& what,
                             MetadataBudget& budget, std::string& out);

// The same, parsed (with a budget of 32 x the graph's bytes + 64 MiB).
Result<nlohmann::json> ObjectGraphToJson(std::string_view bytes, const std::string& what);

// `s` as a JSON string (quoted, escaped; bytes that are not UTF-8 replaced by U+FFFD).
std::string JsonQuoted(std::string_view s);

}  // namespace ckptfs::tf
