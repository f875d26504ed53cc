// Fuzz target: any bytes as untrusted JSON (a Keras config or metadata.json, a sharded
// weight map, DCP sharding info, trainer_state.json) must parse or be refused through
// ParseJson, never crash or recurse without bound; what is accepted must quote within
// QuoteJson's bound and lay out as metadata.json within 12 times its compact text.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/checkpoint/checkpoint.h"
#include "core/encoding/metadata_budget.h"
#include "core/encoding/ordered_json.h"
#include "core/format/formats.h"
#include "core/format/keras/keras.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // A small budget, so inputs of many tiny values reach the refusal.
  ckptfs::MetadataBudget budget("fuzz.json", size, 1 << 20);
  auto ordered = ckptfs::ParseJson<nlohmann::ordered_json>(text, "fuzz.json", &budget);
  auto plain = ckptfs::ParseJson<nlohmann::json>(text, "fuzz.json");
  (void)ckptfs::ParseOrderedJson(text);
  (void)ckptfs::keras::ShardFiles(text, "fuzz.weights.json");
  (void)ckptfs::keras::ParseJsonText(text, "fuzz/config.json");
  if (plain.ok() && ckptfs::QuoteJson(*plain, 40).size() > 43) std::abort();
  if (!ordered.ok()) return 0;
  if (ckptfs::QuoteJson(*ordered, 40).size() > 43) std::abort();
  ckptfs::Checkpoint ckpt;
  ckpt.format = ckptfs::FormatNamed("keras");
  ckpt.state_json = ordered->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  const uint64_t laid_out = ckptfs::MetadataJsonSize(ckpt);
  if (laid_out > 12 * ckpt.state_json.size() + 16) std::abort();
  return 0;
}
