// Fuzzes what pillar does with the bytes of an HTTP request before any stage runs: Beast's
// parser under pillar's limits, fed as the session feeds it (HeaderReader for the header, then
// BodyReader for the body), the router's matching and percent-decoding of the target, and the
// API key parser on the Authorization header.
//
// The request is read twice: in one read, and split after the byte that follows every CRLF, as
// a client sends it whose every write ends one byte into the next field name (the pattern that
// once got 40 MiB of header past a 16 KiB limit). Neither may accept a header over the limits,
// and a header both accept must parse the same; a body must get the same result and the same
// bytes both ways, and a chunked body accepted must have no chunk-size line, nor trailer
// section, over the header's byte limit (one read on top of a line just under it once passed
// lines of twice the limit). A Transfer-Encoding the session accepts (CheckFraming) must be
// one Beast frames as chunked: any other is read by Beast as no body, and the body's
// bytes as the next request. Trailer fields never survive as headers: after a body, the fields
// are the header's, whatever came after it.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "http/router.h"
#include "http/session.h"
#include "identity/api_key.h"

namespace {

namespace bhttp = boost::beast::http;
using pillar::http::internal::BodyReader;
using pillar::http::internal::CheckFraming;
using pillar::http::internal::HeaderReader;
using pillar::http::internal::RequestParser;

constexpr size_t kHeaderLimit = 16 * 1024;
constexpr size_t kFieldLimit = 100;
constexpr size_t kBodyLimit = 64 * 1024;

const pillar::http::Router& TheRouter() {
  static const pillar::http::Router router = [] {
    pillar::http::Router r;
    r.Add({"GET", "/v2/health/live", 1, "live", true});
    r.Add({"GET", "/v2/models/{model}", 2, "meta", false});
    r.Add({"GET", "/v2/models/{model}/versions/{version}/ready", 3, "ready", false});
    r.Add({"POST", "/v2/models/{model}/versions/{version}/infer", 4, "infer", false});
    return r;
  }();
  return router;
}

// Reads `input` into `parser` with `reader` (a HeaderReader or a BodyReader) as a session does:
// each read is appended to what the parser left unconsumed, and the whole of that is put again.
// `split` makes every read end one byte after a CRLF. Returns the result and leaves in `rest`
// what the parser did not consume.
template <typename Reader>
typename Reader::Result Read(std::string_view input, bool split, RequestParser& parser,
                             Reader& reader, std::string& rest) {
  rest.clear();
  size_t at = 0;
  while (at < input.size()) {
    size_t end = input.size();
    if (split) {
      const size_t crlf = input.find("\r\n", at);
      if (crlf != std::string_view::npos && crlf + 3 < input.size()) end = crlf + 3;
    }
    rest.append(input.substr(at, end - at));
    at = end;
    size_t used = 0;
    boost::beast::error_code ec;
    typename Reader::Result result = reader.Put(parser, boost::asio::buffer(rest), used, ec);
    rest.erase(0, used);
    if (result != Reader::Result::kNeedMore) {
      rest.append(input.substr(at));
      return result;
    }
  }
  return Reader::Result::kNeedMore;
}

// Whether each chunk-size line of `body`, a chunked body Beast parsed to its end, and its trailer
// section (the last chunk's line to the blank line) are at most `limit` bytes.
bool FramingWithin(std::string_view body, size_t limit) {
  size_t at = 0;
  while (at < body.size()) {
    const size_t eol = body.find("\r\n", at);
    if (eol == std::string_view::npos) return false;
    uint64_t size = 0;
    for (size_t i = at; i < eol && std::isxdigit(static_cast<unsigned char>(body[i])); ++i) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(body[i])));
      size = size * 16 + uint64_t(c <= '9' ? c - '0' : c - 'a' + 10);
      if (size > kBodyLimit) return false;  // Beast refuses such a chunk
    }
    if (size == 0) {
      const size_t end = body.find("\r\n\r\n", eol);
      return end != std::string_view::npos && end + 4 - at <= limit;
    }
    if (eol + 2 - at > limit) return false;
    at = eol + 2 + size + 2;
  }
  return false;  // the last chunk never came
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  RequestParser split_parser;
  split_parser.body_limit(kBodyLimit);
  HeaderReader split_reader(kHeaderLimit, kFieldLimit);
  std::string split_rest;
  const HeaderReader::Result split_result =
      Read(input, true, split_parser, split_reader, split_rest);
  if (split_result == HeaderReader::Result::kDone &&
      (split_reader.bytes() > kHeaderLimit || split_reader.fields() > kFieldLimit)) {
    __builtin_trap();  // a header over the limits was accepted
  }

  RequestParser parser;
  parser.body_limit(kBodyLimit);
  HeaderReader reader(kHeaderLimit, kFieldLimit);
  std::string rest;
  if (Read(input, false, parser, reader, rest) != HeaderReader::Result::kDone) return 0;
  if (reader.bytes() > kHeaderLimit || reader.fields() > kFieldLimit) __builtin_trap();
  const auto& request = parser.get();
  if (split_result == HeaderReader::Result::kDone &&
      (split_reader.bytes() != reader.bytes() || split_parser.get().target() != request.target())) {
    __builtin_trap();  // how the header was split changed what it says
  }
  // The session's own check of the header's framing: what it refuses gets 400 and a close.
  if (CheckFraming(request)) return 0;
  if (request.find(bhttp::field::transfer_encoding) != request.end() && !parser.chunked()) {
    __builtin_trap();  // accepted, but its body would be read as a request
  }
  if (!parser.is_done()) {
    const auto header_fields = std::distance(request.begin(), request.end());
    BodyReader body_reader(kHeaderLimit, kFieldLimit);
    const std::string body_input = rest;
    const BodyReader::Result result = Read(body_input, false, parser, body_reader, rest);
    if (result == BodyReader::Result::kDone && parser.chunked() &&
        !FramingWithin(std::string_view(body_input).substr(0, body_input.size() - rest.size()),
                       kHeaderLimit)) {
      __builtin_trap();  // a chunk-size line or trailer section over the limit was accepted
    }
    if (result == BodyReader::Result::kDone &&
        std::distance(request.begin(), request.end()) != header_fields) {
      __builtin_trap();  // a trailer field was kept, where it would be read as a header
    }
    if (split_result == HeaderReader::Result::kDone) {
      BodyReader split_body_reader(kHeaderLimit, kFieldLimit);
      const std::string split_body_input = split_rest;
      if (Read(split_body_input, true, split_parser, split_body_reader, split_rest) != result ||
          split_rest.size() != rest.size() || split_parser.get().body() != parser.get().body()) {
        __builtin_trap();  // how the body was split changed what was read of it
      }
    }
  }
  std::string method(request.method_string().data(), request.method_string().size());
  std::string target(request.target().data(), request.target().size());
  pillar::http::RouteResult route = TheRouter().Match(method, target);
  if (route.kind == pillar::http::RouteResult::Kind::kFound) {
    for (const auto& [name, value] : route.params) {
      if (value.find('/') != std::string::npos) __builtin_trap();  // a capture never holds a slash
    }
  }
  auto authorization = request[bhttp::field::authorization];
  if (authorization.size() > 7) {
    (void)pillar::identity::ParseApiKey(
        std::string_view(authorization.data() + 7, authorization.size() - 7));
  }
  return 0;
}
