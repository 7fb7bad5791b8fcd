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
  // In a whole group and in each length of a last, short one.
  EXPECT_FALSE(Base64UrlDecode("AAAAab.d").ok());
  EXPECT_FALSE(Base64UrlDecode("AAAAA=").ok());
  EXPECT_FALSE(Base64UrlDecode("AAAAAA=").ok());
  EXPECT_FALSE(Base64UrlDecode("AAB").ok());  // two trailing bits set
  EXPECT_EQ(Base64UrlDecode("AAE").value_or("?"), std::string("\0\x01", 2));
  EXPECT_EQ(Base64UrlDecode("_-8").value_or("?"), "\xff\xef");
  EXPECT_EQ(Base64UrlDecode("").value_or("?"), "");
}

TEST(CryptoTest, HexEncodesLowercase) {
  EXPECT_EQ(HexEncode(std::string("\x00\xff\x10", 3)), "00ff10");
}

TEST(CryptoTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("same", "same"));
  EXPECT_FALSE(ConstantTimeEquals("same", "sama"));
  EXPECT_FALSE(ConstantTimeEquals("same", "samey"));
}

// True when the `n` bytes at `p` are all zero.
bool AllZero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

TEST(CryptoTest, WipeStringZeroesTheBufferItKeeps) {
  for (std::string secret : {std::string("hunter2"), std::string(100, 'k')}) {  // inline, heap
    const char* buffer = secret.data();
    const size_t length = secret.size();
    const size_t capacity = secret.capacity();
    WipeString(secret);
    EXPECT_TRUE(secret.empty());
    ASSERT_EQ(secret.data(), buffer);  // the same buffer, not a new one
    EXPECT_EQ(secret.capacity(), capacity);
    EXPECT_TRUE(AllZero(buffer, length)) << length;
  }
}

TEST(CryptoTest, SecretStringWipesWhatAMoveLeavesBehind) {
  std::string short_text = "hunter2";  // held inline: a move copies it and leaves it there
  const char* left = short_text.data();
  SecretString secret(std::move(short_text));
  EXPECT_EQ(secret.view(), "hunter2");
  EXPECT_TRUE(AllZero(left, 7));

  const char* inline_buffer = secret.data();
  SecretString moved(std::move(secret));
  EXPECT_EQ(moved.view(), "hunter2");
  EXPECT_TRUE(secret.empty());  // NOLINT(bugprone-use-after-move): checking the moved-from
  EXPECT_TRUE(AllZero(inline_buffer, 7));

  SecretString assigned(std::string(40, 's'));
  const char* old_buffer = assigned.data();
  assigned = moved;
  EXPECT_EQ(assigned.view(), "hunter2");
  EXPECT_EQ(moved.view(), "hunter2");
  // The old bytes past the new value were wiped before the buffer was reused.
  ASSERT_EQ(assigned.data(), old_buffer);
  EXPECT_TRUE(AllZero(old_buffer + 8, 32));
}

}  // namespace
}  // namespace pillar
