#include "core/layout/escape.h"

#include <gtest/gtest.h>

#include <set>

namespace ckptfs {
namespace {

using Parts = std::vector<std::string>;

TEST(Escape, SplitsOnDots) {
  EXPECT_EQ(TensorPathComponents("model.layers.0.weight"),
            (Parts{"model", "layers", "0", "weight"}));
  EXPECT_EQ(TensorPathComponents("w"), (Parts{"w"}));
}

TEST(Escape, ComponentRules) {
  EXPECT_EQ(EscapeComponent("a/b"), "a%2Fb");
  EXPECT_EQ(EscapeComponent("50%"), "50%25");
  EXPECT_EQ(EscapeComponent("%2F"), "%252F");
  EXPECT_EQ(EscapeComponent(""), "%");
  EXPECT_EQ(EscapeComponent("."), "%2E");
  EXPECT_EQ(EscapeComponent(".."), "%2E%2E");
  EXPECT_EQ(EscapeComponent("ünï权重"), "ünï权重");
}

TEST(Escape, EmptyComponentsAndSlashes) {
  EXPECT_EQ(TensorPathComponents("a..b"), (Parts{"a", "%", "b"}));
  EXPECT_EQ(TensorPathComponents(".a."), (Parts{"%", "a", "%"}));
  EXPECT_EQ(TensorPathComponents("../../etc/passwd"),
            (Parts{"%", "%", "%2F", "%", "%2Fetc%2Fpasswd"}));
}

TEST(Escape, NoComponentCanLeaveItsDirectory) {
  for (const char* name : {"..", "../x", "a/../b", "/abs", "...", "%2E%2E", "a/./b"}) {
    for (const std::string& part : TensorPathComponents(name)) {
      EXPECT_FALSE(part.empty()) << name;
      EXPECT_NE(part, ".") << name;
      EXPECT_NE(part, "..") << name;
      EXPECT_EQ(part.find('/'), std::string::npos) << name;
    }
  }
}

TEST(Escape, InjectiveOnTrickyNames) {
  const std::vector<std::string> names = {"a.b", "a/b",   "a%2Fb", "a..b", "a.%.b", "a.%25.b",
                                          "a%b", "a%25b", "a",     "a.",   ".a",    "%"};
  std::set<Parts> seen;
  for (const std::string& n : names) EXPECT_TRUE(seen.insert(TensorPathComponents(n)).second) << n;
}

}  // namespace
}  // namespace ckptfs
