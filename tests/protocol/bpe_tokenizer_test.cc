#include "protocol/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/escaping.h"

namespace pillar::protocol {
namespace {

// Every single byte (ranks 0-255), then `merges` in rank order, as a tiktoken file.
std::string Vocabulary(const std::vector<std::string>& merges, int skip_byte = -1) {
  std::string file;
  int rank = 0;
  for (int b = 0; b < 256; ++b, ++rank) {
    if (b == skip_byte) continue;
    file += absl::Base64Escape(std::string(1, char(b))) + " " + std::to_string(rank) + "\n";
  }
  for (const std::string& token : merges) {
    file += absl::Base64Escape(token) + " " + std::to_string(rank++) + "\n";
  }
  return file;
}

std::shared_ptr<const BpeTokenizer> Tokenizer(const std::vector<std::string>& merges) {
  auto bpe = BpeTokenizer::Parse(Vocabulary(merges), "t.tiktoken");
  EXPECT_TRUE(bpe.ok()) << bpe.status();
  return *bpe;
}

TEST(BpeTokenizerTest, PairsMergeLowestRankFirstWithinEachPiece) {
  // "he" ranks below "th": "then" merges t|he|n, then the|n; never th|en.
  auto bpe = Tokenizer({"he", "th", "the"});
  EXPECT_EQ(bpe->vocabulary_size(), 259u);
  EXPECT_EQ(bpe->Count("the"), 1);
  EXPECT_EQ(bpe->Count("then"), 2);
  EXPECT_EQ(bpe->Count("hen"), 2);
  EXPECT_EQ(bpe->Count(" then"), 3);  // " " | "the" | "n": the space is part of the word's piece
  EXPECT_EQ(bpe->Count(""), 0);
  // Without "he", "th" goes first and "the" is reached all the same.
  EXPECT_EQ(Tokenizer({"th", "the"})->Count("then"), 2);
  // Only pairs in the vocabulary merge: "ht" is not one.
  EXPECT_EQ(Tokenizer({"ht"})->Count("then"), 4);
}

TEST(BpeTokenizerTest, TheTextIsSplitAsCl100kSplitsIt) {
  auto bpe = Tokenizer({});
  EXPECT_EQ(bpe->Count("12345"), 5);   // "123" "45", each digit a byte here
  EXPECT_EQ(bpe->Count("a  b"), 4);    // "a" " " " b" -> 1 + 1 + 2
  EXPECT_EQ(bpe->Count("don't"), 5);   // "don" "'t"
  EXPECT_EQ(bpe->Count("x\n\ny"), 4);  // "x" "\n\n" "y"
  // A piece longer than 64 bytes is merged in slices: the cost stays linear.
  auto xx = Tokenizer({"xx"});
  EXPECT_EQ(xx->Count(std::string(600, 'x')), 300);
  EXPECT_EQ(xx->Count(std::string(1 << 20, 'x')), 1 << 19);
  // Bytes that are not UTF-8 are counted a byte at a time, not refused.
  EXPECT_EQ(bpe->Count(std::string("\xff\xfe", 2)), 2);
}

TEST(BpeTokenizerTest, AMalformedVocabularyIsRefusedNamingTheLine) {
  auto error = [](const std::string& text) {
    return std::string(BpeTokenizer::Parse(text, "t.tiktoken").status().message());
  };
  EXPECT_EQ(error(Vocabulary({}) + "not-base64! 300\n"),
            "t.tiktoken:257: expected \"<base64 of a token> <rank>\"");
  EXPECT_EQ(error(Vocabulary({}) + absl::Base64Escape("ab") + " x\n"),
            "t.tiktoken:257: expected \"<base64 of a token> <rank>\"");
  EXPECT_EQ(error(Vocabulary({}) + absl::Base64Escape("ab") + " 7\n"),
            "t.tiktoken:257: the rank or the token appears twice");
  EXPECT_EQ(error(Vocabulary({}) + absl::Base64Escape("a") + " 999\n"),
            "t.tiktoken:257: the rank or the token appears twice");
  EXPECT_NE(error(Vocabulary({}, 65)).find("lacks the single byte 65"), std::string::npos);
}

}  // namespace
}  // namespace pillar::protocol
