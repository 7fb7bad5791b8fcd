// Redis replies parsed from the bytes a connection reads (hiredis's reader), within bounds: a
// reply pillar reads is a few hundred bytes, so one that grows past what the bounds allow is
// not Redis answering pillar, and is refused before it takes the memory it asks for.
//
//   ReplyReader reader;
//   PILLAR_RETURN_IF_ERROR(reader.Feed(bytes));
//   while (true) {
//     PILLAR_ASSIGN_OR_RETURN(ReplyReader::Reply reply, reader.Next());
//     if (reply == nullptr) break;  // wait for more bytes
//     ... reply.get() ...
//   }
// Bounds, per reply: at most kMaxElements in any array (hiredis allocates an array for the count
// it reads before any element arrives), kMaxObjects values in all (arrays nested seven deep
// could hold 1024^7), kMaxBytes of strings and of bytes waiting to be parsed. An error leaves
// the reader unusable: the connection is dropped.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"

struct redisReader;
struct redisReply;

namespace pillar::limits {

class ReplyReader {
 public:
  static constexpr int kMaxElements = 1024;
  static constexpr size_t kMaxObjects = 4096;
  static constexpr size_t kMaxBytes = size_t{1} << 20;

  struct FreeReply {
    void operator()(redisReply* reply) const;
  };
  using Reply = std::unique_ptr<redisReply, FreeReply>;

  ReplyReader();
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  [[nodiscard]] absl::Status Feed(std::string_view bytes);
  // The next complete reply; null when the bytes so far end inside one.
  [[nodiscard]] absl::StatusOr<Reply> Next();

  // What the reply being parsed has taken so far (the reader's object functions count it).
  struct Budget {
    size_t objects = 0;
    size_t bytes = 0;
    bool exceeded = false;
  };

 private:
  redisReader* reader_;
  Budget budget_;
};

}  // namespace pillar::limits
