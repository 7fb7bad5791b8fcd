// Fuzzes what pillar does with the bytes of an HTTP request before any stage runs: Beast's
// parser under pillar's limits, fed as the session feeds it (HeaderReader for the header, then
// an eager parse of the body), the router's matching and percent-decoding of the target, and
// the API key parser on the Authorization header.
//
// The header is read twice: in one read, and split after the byte that follows every CRLF, as
// a client sends it whose every write ends one byte into the next field name (the pattern that
// once got 40 MiB of header past a 16 KiB limit). Neither may accept a header over the limits,
// and a header both accept must parse the same. A Transfer-Encoding the session accepts
// (IsChunkedOnly) must be one Beast frames as chunked: any other is read by Beast as no body, and
// the body's bytes as the next request.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "http/router.h"
#include "http/session.h"
#include "identity/api_key.h"

namespace {

namespace bhttp = boost::beast::http;
using pillar::http::internal::HeaderReader;
using pillar::http::internal::IsChunkedOnly;
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

// Reads `input` into `parser` as a session does: each read is appended to what the parser left
// unconsumed, and the whole of that is put again. `split` makes every read end one byte after a
// CRLF. Returns the result and leaves in `rest` what the parser did not consume.
HeaderReader::Result ReadHeader(std::string_view input, bool split, RequestParser& parser,
                                HeaderReader& reader, std::string& rest) {
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
    HeaderReader::Result result = reader.Put(parser, boost::asio::buffer(rest), used, ec);
    rest.erase(0, used);
    if (result != HeaderReader::Result::kNeedMore) {
      rest.append(input.substr(at));
      return result;
    }
  }
  return HeaderReader::Result::kNeedMore;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  RequestParser split_parser;
  split_parser.body_limit(kBodyLimit);
  HeaderReader split_reader(kHeaderLimit, kFieldLimit);
  std::string split_rest;
  const HeaderReader::Result split_result =
      ReadHeader(input, true, split_parser, split_reader, split_rest);
  if (split_result == HeaderReader::Result::kDone &&
      (split_reader.bytes() > kHeaderLimit || split_reader.fields() > kFieldLimit)) {
    __builtin_trap();  // a header over the limits was accepted
  }

  RequestParser parser;
  parser.body_limit(kBodyLimit);
  HeaderReader reader(kHeaderLimit, kFieldLimit);
  std::string rest;
  if (ReadHeader(input, false, parser, reader, rest) != HeaderReader::Result::kDone) return 0;
  if (reader.bytes() > kHeaderLimit || reader.fields() > kFieldLimit) __builtin_trap();
  const auto& request = parser.get();
  if (split_result == HeaderReader::Result::kDone &&
      (split_reader.bytes() != reader.bytes() || split_parser.get().target() != request.target())) {
    __builtin_trap();  // how the header was split changed what it says
  }
  if (auto te = request.find(bhttp::field::transfer_encoding); te != request.end()) {
    if (!IsChunkedOnly(std::string_view(te->value().data(), te->value().size()))) {
      return 0;  // the session answers 400 and closes the connection
    }
    if (!parser.chunked()) __builtin_trap();  // accepted, but its body would be a request
  }
  if (!parser.is_done() && !rest.empty()) {
    parser.eager(true);
    boost::beast::error_code ec;
    (void)parser.put(boost::asio::buffer(rest), ec);
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
