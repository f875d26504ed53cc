// Untrusted JSON (core/encoding/ordered_json.h): ParseJson's depth bound and budget, the
// bounded QuoteJson, metadata.json's layout staying linear in its text, and the Keras
// callers that once crashed on deep JSON (issue 37: 100,000 levels overflowed the stack
// wherever the parsed value was copied or dumped).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/encoding/ordered_json.h"
#include "core/format/formats.h"
#include "core/format/keras/keras.h"

namespace ckptfs {
namespace {

std::string DeepArray(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(UntrustedJson, DepthPastTheLimitIsRefusedBeforeAnythingIsBuilt) {
  EXPECT_TRUE(ParseJson<nlohmann::json>(DeepArray(kMaxJsonDepth), "a.json").ok());
  EXPECT_TRUE(ParseJson<nlohmann::ordered_json>(DeepArray(kMaxJsonDepth), "a.json").ok());
  for (size_t depth : {kMaxJsonDepth + 1, size_t{100000}}) {
    SCOPED_TRACE(depth);
    auto plain = ParseJson<nlohmann::json>(DeepArray(depth), "a.json");
    ASSERT_FALSE(plain.ok());
    EXPECT_EQ(plain.status().message(), "a.json: JSON nested deeper than 100 levels");
    auto ordered = ParseJson<nlohmann::ordered_json>(DeepArray(depth), "a.json");
    ASSERT_FALSE(ordered.ok());
    EXPECT_EQ(ordered.status().code(), Status::Code::kUnsupported);
  }
  // JSON ckptfs wrote nests untrusted values a few levels down: up to twice the bound.
  EXPECT_TRUE(ParseOrderedJson(DeepArray(2 * kMaxJsonDepth)).is_array());
  EXPECT_TRUE(ParseOrderedJson(DeepArray(2 * kMaxJsonDepth + 1)).is_discarded());
  EXPECT_TRUE(ParseOrderedJson(DeepArray(100000)).is_discarded());
  // Unclosed: refused as deep, not walked as a tree.
  EXPECT_FALSE(ParseJson<nlohmann::json>(std::string(100000, '{'), "a.json").ok());
}

TEST(UntrustedJson, BracketsInStringsAreNotNesting) {
  const std::string text = R"({"name": ")" + std::string(500, '[') + R"(\"]", "x": [[1]]})";
  auto parsed = ParseJson<nlohmann::ordered_json>(text, "a.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)["x"][0][0], 1);
  auto bad = ParseJson<nlohmann::json>("{\"a\": [1,}", "a.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "a.json: not valid JSON");
}

// Many tiny values cost far more as a tree than as text: charged before the tree is built.
TEST(UntrustedJson, TheTreeIsChargedToTheBudget) {
  std::string many = "[0";
  for (int i = 0; i < 200000; ++i) many += ",0";
  many += "]";
  MetadataBudget small("many.json", many.size(), 1 << 20);
  auto refused = ParseJson<nlohmann::ordered_json>(many, "many.json", &small);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().rfind("many.json: metadata would take more than", 0), 0u)
      << refused.status().message();
  MetadataBudget normal("many.json", many.size());
  auto parsed = ParseJson<nlohmann::ordered_json>(many, "many.json", &normal);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->size(), 200001u);
  EXPECT_GT(normal.used(), 200000 * kJsonNodeBytes);
}

TEST(UntrustedJson, QuoteJsonIsBoundedWhateverTheValue) {
  nlohmann::json big = {{"k", std::string(1 << 20, 'a')}, {"esc", "\x1b[2J"}};
  const std::string quoted = QuoteJson(big, 120);
  EXPECT_LE(quoted.size(), 123u);
  EXPECT_EQ(quoted.substr(0, 12), R"({"esc":"\u00)");
  // 10,000 levels built one at a time (no parse): printed as "..." past 16 levels.
  nlohmann::json deep = 1;
  for (int i = 0; i < 10000; ++i) deep = nlohmann::json::array({std::move(deep)});
  EXPECT_EQ(QuoteJson(deep, 1000), std::string(17, '[') + "..." + std::string(17, ']'));
  EXPECT_EQ(QuoteJson(nlohmann::ordered_json{{"a", 1}}), R"({"a":1})");
}

// metadata.json lays out the first 10 levels as dump(2) does and keeps deeper ones
// compact: its size stays within 12 times the compact text (an indent per level made a
// 30 KB Keras config nested 15,000 deep lay out to 880 MiB).
TEST(UntrustedJson, MetadataJsonStaysLinearInItsText) {
  Checkpoint ckpt;
  ckpt.format = FormatNamed("keras");
  ckpt.state_json = R"({"config":)" + DeepArray(kMaxJsonDepth) + "}";
  const std::string laid_out = MetadataJson(ckpt);
  EXPECT_EQ(laid_out.size(), MetadataJsonSize(ckpt));
  EXPECT_LE(laid_out.size(), 12 * ckpt.state_json.size());
  EXPECT_EQ(nlohmann::json::parse(laid_out), nlohmann::json::parse(ckpt.state_json));
  // Shallow JSON is laid out exactly as dump(2).
  ckpt.state_json = R"({"a":{"b":[1,{"c":null}]},"d":[]})";
  EXPECT_EQ(MetadataJson(ckpt), nlohmann::ordered_json::parse(ckpt.state_json).dump(2) + "\n");
}

TEST(UntrustedJson, KerasJsonTextIsKeptRefusedOrParsed) {
  auto text = keras::ParseJsonText("not json", "m/config.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "not json");
  auto deep = keras::ParseJsonText(R"({"a":)" + DeepArray(100000) + "}", "m/config.json");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(), "m/config.json: JSON nested deeper than 100 levels");
  auto parsed = keras::ParseJsonText(R"({"class_name": "Sequential"})", "m/config.json");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ((*parsed)["class_name"], "Sequential");
}

// A weight map whose value nests deep, or is huge, once crashed or flooded the refusal
// (it serialized the whole value): refused, and quoted within a bound.
TEST(UntrustedJson, KerasWeightMapRefusalsAreBounded) {
  auto deep = keras::ShardFiles(R"({"weight_map": {"/vars": )" + DeepArray(100000) + "}}",
                                "m.weights.json");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(), "m.weights.json: JSON nested deeper than 100 levels");
  auto huge = keras::ShardFiles(
      R"({"weight_map": {"/vars": {"x": ")" + std::string(1 << 20, 'a') + R"("}}})",
      "m.weights.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_LT(huge.status().message().size(), 250u) << huge.status().message().substr(0, 300);
}

}  // namespace
}  // namespace ckptfs
