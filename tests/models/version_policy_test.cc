#include "models/version_policy.h"

#include <gtest/gtest.h>

namespace pillar::models {
namespace {

std::vector<int64_t> Select(std::string_view policy, std::vector<int64_t> available) {
  absl::StatusOr<VersionPolicy> p = VersionPolicy::Parse(policy);
  EXPECT_TRUE(p.ok()) << policy;
  return p->Select(std::move(available));
}

TEST(VersionPolicyTest, SelectsAsTritonDoes) {
  EXPECT_EQ(Select("latest", {3, 1, 2}), (std::vector<int64_t>{3}));
  EXPECT_EQ(Select("latest:2", {3, 1, 2}), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Select("latest:5", {1}), (std::vector<int64_t>{1}));
  EXPECT_EQ(Select("all", {2, 1}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Select("specific:1,3,9", {1, 2, 3}), (std::vector<int64_t>{1, 3}));
}

TEST(VersionPolicyTest, RejectsBadText) {
  for (const char* bad :
       {"", "newest", "latest:0", "latest:x", "specific:", "specific:1,,2", "specific:-1"}) {
    EXPECT_FALSE(VersionPolicy::Parse(bad).ok()) << bad;
  }
}

TEST(VersionPolicyTest, RoundTripsThroughText) {
  for (const char* text : {"all", "latest:3", "specific:1,4"}) {
    EXPECT_EQ(VersionPolicy::Parse(text)->ToString(), text);
  }
}

}  // namespace
}  // namespace pillar::models
