#include "common/crypto.h"

#include <gtest/gtest.h>

namespace pillar {
namespace {

TEST(CryptoTest, Sha256MatchesTheStandardVector) {
  EXPECT_EQ(HexEncode(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CryptoTest, RandomBytesDiffer) {
  EXPECT_EQ(RandomBytes(32).size(), 32u);
  EXPECT_NE(RandomBytes(32), RandomBytes(32));
}

TEST(CryptoTest, Base64UrlRoundTripsEveryLength) {
  for (size_t n = 0; n < 70; ++n) {
    std::string bytes = RandomBytes(n);
    std::string text = Base64UrlEncode(bytes);
    EXPECT_EQ(text.find_first_of("+/="), std::string::npos);
    absl::StatusOr<std::string> back = Base64UrlDecode(text);
    ASSERT_TRUE(back.ok()) << n;
    EXPECT_EQ(*back, bytes);
  }
}

TEST(CryptoTest, Base64UrlRejectsForeignCharactersAndNonCanonicalText) {
  EXPECT_FALSE(Base64UrlDecode("ab+d").ok());
  EXPECT_FALSE(Base64UrlDecode("abcde").ok());  // a length no encoding produces
  EXPECT_FALSE(Base64UrlDecode("AB").ok());     // trailing bits set
  EXPECT_TRUE(Base64UrlDecode("AA").ok());
}

TEST(CryptoTest, HexEncodesLowercase) {
  EXPECT_EQ(HexEncode(std::string("\x00\xff\x10", 3)), "00ff10");
}

TEST(CryptoTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("same", "same"));
  EXPECT_FALSE(ConstantTimeEquals("same", "sama"));
  EXPECT_FALSE(ConstantTimeEquals("same", "samey"));
}

}  // namespace
}  // namespace pillar
