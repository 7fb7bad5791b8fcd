#include "protocol/sse_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pillar::protocol {
namespace {

struct Seen {
  std::string event, data, id;
  bool operator==(const Seen&) const = default;
};

std::vector<Seen> ReadInPieces(std::string_view stream, size_t piece, bool* mid = nullptr) {
  SseReader reader(1024);
  std::vector<Seen> seen;
  for (size_t i = 0; i < stream.size(); i += piece) {
    absl::Status s = reader.Feed(stream.substr(i, piece), [&](const SseEvent& e) {
      seen.push_back({std::string(e.event), std::string(e.data), std::string(e.id)});
    });
    EXPECT_TRUE(s.ok()) << s;
  }
  if (mid != nullptr) *mid = reader.mid_event();
  return seen;
}

TEST(SseReaderTest, EventsWhateverTheLineEndsAndHoweverTheBytesArrive) {
  const std::string stream =
      "\xef\xbb\xbf: keep-alive\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: error\ndata: first\ndata:second\nid: 7\n\n"
      "data\r\r"
      "retry: 10\nunknown: x\ndata:  two spaces\n\n"
      "data: [DONE]\n\n";
  const std::vector<Seen> want = {{"", "{\"a\":1}", ""},
                                  {"error", "first\nsecond", "7"},
                                  {"", "", "7"},
                                  {"", " two spaces", "7"},
                                  {"", "[DONE]", "7"}};
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    bool mid = true;
    EXPECT_EQ(ReadInPieces(stream, piece, &mid), want) << "pieces of " << piece;
    EXPECT_FALSE(mid);
  }
}

TEST(SseReaderTest, AByteOrderMarkInPiecesIsSkippedAndHalfOfOneIsText) {
  for (size_t piece = 1; piece <= 3; ++piece) {
    bool mid = true;
    EXPECT_TRUE(ReadInPieces("\xef\xbb\xbf", piece, &mid).empty());
    EXPECT_FALSE(mid) << piece;
    // Half a mark is the start of a field name ("\xef\xbb" "data"), which no field has.
    EXPECT_EQ(ReadInPieces("\xef\xbb"
                           "data: x\n\n",
                           piece, &mid),
              (std::vector<Seen>{}));
    // Only the first mark is skipped.
    EXPECT_EQ(ReadInPieces("\xef\xbb\xbf\xef\xbb\xbf"
                           "data: x\n\n",
                           piece, &mid),
              (std::vector<Seen>{}));
  }
  EXPECT_EQ(ReadInPieces("\xef\xbb\xbf"
                         "data: x\n\n",
                         1),
            (std::vector<Seen>{{"", "x", ""}}));
}

TEST(SseReaderTest, AStreamCutInsideAnEventIsSeenAsCut) {
  bool mid = false;
  EXPECT_TRUE(ReadInPieces("data: {\"a\"", 4, &mid).empty());
  EXPECT_TRUE(mid);
  EXPECT_TRUE(ReadInPieces("data: x\n", 4, &mid).empty());  // no blank line: not dispatched
  EXPECT_TRUE(mid);
  EXPECT_TRUE(ReadInPieces(": only a comment\n", 4, &mid).empty());
  EXPECT_FALSE(mid);
}

TEST(SseReaderTest, AnEventLargerThanTheLimitIsAnErrorNotABuffer) {
  SseReader reader(16);
  auto ignore = [](const SseEvent&) {};
  EXPECT_TRUE(reader.Feed("data: 0123456789\n", ignore).ok());
  absl::Status s = reader.Feed("data: 0123456789\n", ignore);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_FALSE(reader.Feed("\n", ignore).ok());  // spent
  SseReader lines(16);
  EXPECT_FALSE(lines.Feed(std::string(17, 'x'), ignore).ok());  // one line, no end yet
}

}  // namespace
}  // namespace pillar::protocol
