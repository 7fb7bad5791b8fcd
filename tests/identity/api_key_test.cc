#include "identity/api_key.h"

#include <gtest/gtest.h>

#include <set>

namespace pillar::identity {
namespace {

TEST(ApiKeyTest, GeneratedKeysParseBackToTheirIdAndHash) {
  NewApiKey key = GenerateApiKey();
  EXPECT_EQ(key.text.size(), 3u + 12 + 1 + 43);
  EXPECT_TRUE(key.text.starts_with("pk_" + key.id + "_"));
  absl::StatusOr<ParsedApiKey> parsed = ParseApiKey(key.text);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->id, key.id);
  EXPECT_EQ(HashApiKeySecret(parsed->secret), key.secret_hash);
}

TEST(ApiKeyTest, KeysAreUnique) {
  std::set<std::string> ids, texts;
  for (int i = 0; i < 1000; ++i) {
    NewApiKey key = GenerateApiKey();
    ids.insert(key.id);
    texts.insert(key.text);
  }
  EXPECT_EQ(texts.size(), 1000u);
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(ApiKeyTest, RejectsEveryOtherShape) {
  std::string good = GenerateApiKey().text;
  std::vector<std::string> bad = {"",
                                  "pk_",
                                  good + "A",
                                  good.substr(1),
                                  "sk" + good.substr(2),
                                  good.substr(0, 15) + "-" + good.substr(16)};
  std::string upper_id = good;
  upper_id[3] = 'G';
  bad.push_back(upper_id);
  std::string bad_secret = good;
  bad_secret.back() = '+';
  bad.push_back(bad_secret);
  for (const std::string& text : bad) EXPECT_FALSE(ParseApiKey(text).ok()) << text;
}

}  // namespace
}  // namespace pillar::identity
