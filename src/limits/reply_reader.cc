#include "limits/reply_reader.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include "common/strings.h"

namespace pillar::limits {
namespace {

// The budget of the reply the calling thread is parsing: the object functions below see only
// hiredis's task, so Next() names the budget here for the length of its call.
thread_local ReplyReader::Budget* parsing = nullptr;

const redisReplyObjectFunctions& HiredisFunctions() {
  static const redisReplyObjectFunctions functions = [] {
    redisReader* probe = redisReaderCreate();
    redisReplyObjectFunctions f = *probe->fn;
    redisReaderFree(probe);
    return f;
  }();
  return functions;
}

// Takes one value of `bytes` from the budget; false (the reader then fails: "out of memory")
// when the reply would pass a bound.
bool Take(size_t bytes) {
  ReplyReader::Budget* budget = parsing;
  if (budget == nullptr) return false;
  budget->objects += 1;
  budget->bytes += bytes;
  budget->exceeded =
      budget->objects > ReplyReader::kMaxObjects || budget->bytes > ReplyReader::kMaxBytes;
  return !budget->exceeded;
}

void* CreateString(const redisReadTask* task, char* text, size_t length) {
  return Take(length) ? HiredisFunctions().createString(task, text, length) : nullptr;
}

void* CreateArray(const redisReadTask* task, int elements) {
  if (elements < 0 || elements > ReplyReader::kMaxElements) {
    if (parsing != nullptr) parsing->exceeded = true;
    return nullptr;
  }
  return Take(size_t(elements) * sizeof(void*)) ? HiredisFunctions().createArray(task, elements)
                                                : nullptr;
}

void* CreateInteger(const redisReadTask* task, long long value) {
  return Take(0) ? HiredisFunctions().createInteger(task, value) : nullptr;
}

void* CreateNil(const redisReadTask* task) {
  return Take(0) ? HiredisFunctions().createNil(task) : nullptr;
}

redisReplyObjectFunctions* BoundedFunctions() {
  static redisReplyObjectFunctions functions = [] {
    redisReplyObjectFunctions f = HiredisFunctions();
    f.createString = CreateString;
    f.createArray = CreateArray;
    f.createInteger = CreateInteger;
    f.createNil = CreateNil;
    return f;
  }();
  return &functions;
}

}  // namespace

void ReplyReader::FreeReply::operator()(redisReply* reply) const { freeReplyObject(reply); }

ReplyReader::ReplyReader() : reader_(redisReaderCreateWithFunctions(BoundedFunctions())) {}

ReplyReader::~ReplyReader() { redisReaderFree(reader_); }

absl::Status ReplyReader::Feed(std::string_view bytes) {
  if (reader_ == nullptr) return absl::ResourceExhaustedError("out of memory");
  if (redisReaderFeed(reader_, bytes.data(), bytes.size()) != REDIS_OK) {
    return absl::UnavailableError(StrCat("bad reply: ", reader_->errstr));
  }
  if (reader_->len - reader_->pos > kMaxBytes) return absl::UnavailableError("reply too large");
  return absl::OkStatus();
}

absl::StatusOr<ReplyReader::Reply> ReplyReader::Next() {
  void* raw = nullptr;
  parsing = &budget_;
  const int result = redisReaderGetReply(reader_, &raw);
  parsing = nullptr;
  if (result != REDIS_OK) {
    return absl::UnavailableError(budget_.exceeded ? std::string("reply too large")
                                                   : StrCat("bad reply: ", reader_->errstr));
  }
  if (raw != nullptr) budget_ = Budget{};  // complete: the next reply starts afresh
  return Reply(static_cast<redisReply*>(raw));
}

}  // namespace pillar::limits
