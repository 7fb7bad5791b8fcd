#include "common/sha256.h"

#include <gtest/gtest.h>

#include <string>

#include "common/crypto.h"

namespace pillar {
namespace {

std::string Hex(const Sha256Hasher::Digest& digest) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

// FIPS 180-2 appendix B's vectors.
TEST(Sha256HasherTest, MatchesTheStandardVectors) {
  EXPECT_EQ(Hex(Sha256Hasher::Hash("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256Hasher::Hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256Hasher million;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) million.Update(chunk);
  EXPECT_EQ(Hex(million.Finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256HasherTest, AnySplitGivesTheSameDigest) {
  const std::string data = RandomBytes(300);
  const Sha256Hasher::Digest whole = Sha256Hasher::Hash(data);
  for (size_t cut = 0; cut <= data.size(); cut += 7) {
    Sha256Hasher hasher;
    hasher.Update(std::string_view(data).substr(0, cut));
    hasher.Update(std::string_view(data).substr(cut));
    EXPECT_EQ(hasher.Finish(), whole) << "cut at " << cut;
  }
}

TEST(Sha256HasherTest, FinishStartsOver) {
  Sha256Hasher hasher;
  hasher.Update("not part of the next digest");
  (void)hasher.Finish();
  hasher.Update("abc");
  EXPECT_EQ(Hex(hasher.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace pillar
