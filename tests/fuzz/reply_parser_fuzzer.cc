// Fuzzes the framing of an upstream's HTTP reply (upstream::ReplyParser): an upstream's bytes are
// untrusted input. The first byte sets the size of the pieces the rest arrives in, as a socket
// would split it; whatever the bytes, a finished reply has a three-digit status and a body within
// the limit, and the parser never takes more than it was given.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "upstream/reply_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = size_t(data[0] % 64) + 1;
  const std::string_view wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr uint64_t kLimit = 1024;
  pillar::upstream::ReplyParser parser;
  parser.body_limit(kLimit);
  parser.header_limit(4096);
  std::string pending;
  size_t at = 0;
  boost::system::error_code ec;
  while (!parser.is_done() && at < wire.size()) {
    const size_t n = std::min(step, wire.size() - at);
    pending.append(wire.substr(at, n));
    at += n;
    const size_t used = parser.put(boost::asio::buffer(pending), ec);
    if (used > pending.size()) __builtin_trap();
    if (ec == boost::beast::http::error::need_more) {
      ec = {};
    } else if (ec) {
      return 0;
    }
    pending.erase(0, used);
  }
  if (parser.is_done()) {
    if (parser.status() < 100 || parser.status() > 999) __builtin_trap();
    if (parser.body().size() > kLimit) __builtin_trap();
    if (parser.retry_after_s() && (*parser.retry_after_s() < 0 || *parser.retry_after_s() > 3600)) {
      __builtin_trap();
    }
  }
  return 0;
}
