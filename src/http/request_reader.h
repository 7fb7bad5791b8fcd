// Internal to src/http: feeding a request's bytes to Beast's parser under pillar's limits, as
// plain data with no I/O, so that the session (session.h) and the request fuzzer drive the same
// code with the same reads: HeaderReader for the header, BodyReader for a body and a chunked
// body's framing and trailers, the checks of the header the session makes once it ends, and
// the pillar headers it reads from it.
#pragma once

#include <algorithm>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "common/strings.h"
#include "http/message.h"

namespace pillar::http::internal {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// Beast's string_view is boost::string_view; pillar's helpers take std::string_view.
template <typename BoostView>
std::string_view ToStd(BoostView view) {
  return std::string_view(view.data(), view.size());
}

using RequestParser = bhttp::request_parser<bhttp::string_body>;

// Feeds a request header to the parser under the limits, counting every byte the parser
// consumes and every field it has parsed. Beast's own header_limit is compared only with the
// bytes one put() has not parsed yet, and a caller discards the parsed ones: a client whose
// every write ended one byte into the next field name sent 40 MiB of header past a 16 KiB
// limit, and nothing capped the number of fields. Plain data, no I/O, so the request fuzzer
// drives it with the same reads split as the attack.
//
//   HeaderReader reader(limits.header_limit_bytes, limits.header_fields_limit);
//   for each read: result = reader.Put(parser, buffer.data(), used, ec); buffer.consume(used);
class HeaderReader {
 public:
  enum class Result {
    kNeedMore,       // the header has not ended: read more, then Put() again
    kDone,           // the parser's header is complete
    kTooLarge,       // the header exceeds the byte limit: 431
    kTooManyFields,  // the header has more fields than the field limit: 431
    kError,          // `ec` says what Beast refused (malformed, body_limit ...)
  };

  HeaderReader(size_t byte_limit, size_t field_limit)
      : byte_limit_(byte_limit), field_limit_(field_limit) {}

  // `input` is everything buffered and not consumed yet; `used` is how much of it the parser
  // consumed (to drop from the buffer). Only called while the header is not complete.
  [[nodiscard]] Result Put(RequestParser& parser, net::const_buffer input, size_t& used,
                           beast::error_code& ec) {
    // The parser gets only what is left of the limit, so one put() cannot take more.
    const size_t left = bytes_ < byte_limit_ ? byte_limit_ - bytes_ : 0;
    parser.header_limit(static_cast<uint32_t>(std::min<size_t>(left, UINT32_MAX)));
    used = parser.put(input, ec);
    bytes_ += used;
    if (used > 0) {
      // Only consuming bytes adds fields, so the list (at most field_limit_ long until the
      // last put) is walked once per put that parsed some.
      const auto& fields = parser.get();
      fields_ = size_t(std::distance(fields.begin(), fields.end()));
      if (fields_ > field_limit_) return Result::kTooManyFields;
    }
    // A start line and the fields after it are each held to the parser's limit within one
    // put(), so together they can pass it.
    if (bytes_ > byte_limit_) return Result::kTooLarge;
    if (ec == bhttp::error::need_more) {
      ec = {};
      // What is left unconsumed is the start of a header that has not ended yet, so the header
      // will be longer than that.
      if (bytes_ + (input.size() - used) >= byte_limit_) return Result::kTooLarge;
      return Result::kNeedMore;
    }
    if (ec == bhttp::error::header_limit) return Result::kTooLarge;
    if (ec) return Result::kError;
    return Result::kDone;
  }

  size_t bytes() const { return bytes_; }    // consumed for the header so far
  size_t fields() const { return fields_; }  // parsed so far

 private:
  size_t byte_limit_;
  size_t field_limit_;
  size_t bytes_ = 0;
  size_t fields_ = 0;
};

// Feeds a request body to the parser once its header is complete, holding a chunked body's
// framing to the header's limits: each chunk-size line (size, extensions, CRLF) and the trailer
// section (the last chunk's line, the trailer fields, the blank line) is at most `byte_limit`
// bytes, and the trailers count toward the header's `field_limit`. Beast consumes such a line
// only once it has all of it, and puts no limit on it; a check of what stayed buffered between
// reads let one read complete a line of twice the limit (a 32,500-byte extension or trailer
// passed a 16 KiB limit). So the parser takes one step per put() (a line, or a piece of a chunk)
// and is given at most byte_limit bytes past the CRLF that ends the previous chunk: a line that
// has not ended within them is over the limit, however the client split its writes. Plain data,
// no I/O, so the request fuzzer drives it with the same reads split as an attack.
//
// Trailer fields are dropped once the body ends. Beast appends them to the header's fields,
// where they would be read as headers that every check made at the end of the header missed:
// an Authorization sent after the body (past a proxy that strips or checks credentials in the
// header), a second Host or Authorization past the singleton check. RFC 9110 6.5.1 lets a
// recipient discard trailers, and pillar gives none of them a meaning.
//
//   BodyReader reader(limits.header_limit_bytes, limits.header_fields_limit);
//   for each read: result = reader.Put(parser, buffer.data(), used, ec); buffer.consume(used);
class BodyReader {
 public:
  enum class Result {
    kNeedMore,       // the body has not ended: read more, then Put() again
    kDone,           // the parser's message is complete
    kTooLarge,       // a chunk-size line or the trailer section exceeds the byte limit: 431
    kTooManyFields,  // the header and trailers have more fields than the field limit: 431
    kError,          // `ec` says what Beast or the parser's body callback refused
  };

  BodyReader(size_t byte_limit, size_t field_limit)
      : byte_limit_(byte_limit), field_limit_(field_limit) {}

  // `input` is everything buffered and not consumed yet; `used` is how much of it the parser
  // consumed (to drop from the buffer). Only called once the header is complete, while the
  // message is not.
  [[nodiscard]] Result Put(RequestParser& parser, net::const_buffer input, size_t& used,
                           beast::error_code& ec) {
    used = 0;
    ec = {};
    if (!started_ && parser.chunked() && !header_) {
      // Beast files a trailer next to the header field of the same name, so the header's
      // fields cannot be told from the trailers by position afterwards: keep a copy.
      header_fields_ = FieldCount(parser);
      header_.emplace(parser.get().base());
    }
    // Beast's eager mode would run on through every chunk the input holds; one step per put()
    // lets each line be given no more than its limit.
    parser.eager(false);
    const char* data = static_cast<const char*>(input.data());
    while (used < input.size() && !parser.is_done()) {
      // What one step may be given: for a Content-Length body, all of it.
      size_t most = SIZE_MAX;
      if (parser.chunked()) {
        // Beast reads the CRLF that ends a chunk's data as the start of the next chunk-size
        // line. Pieces of chunk data are given as much, and simply take several steps.
        most = (started_ ? 2 : 0) + byte_limit_;
      }
      const size_t allowed = std::min(input.size() - used, most);
      const size_t n = parser.put(net::const_buffer(data + used, allowed), ec);
      used += n;
      started_ = started_ || n > 0;
      if (ec == bhttp::error::need_more) {
        // Only a line (a chunk-size line or the trailer section) leaves input unconsumed, and
        // only while its end is not in what it was given.
        ec = {};
        return allowed < most ? Result::kNeedMore : Result::kTooLarge;
      }
      if (ec) return Result::kError;
      if (n == 0) return Result::kNeedMore;  // a step that took nothing waits for more
    }
    if (!parser.is_done()) return Result::kNeedMore;
    if (parser.chunked()) {
      // The header's fields and the trailers.
      const size_t fields = FieldCount(parser);
      if (fields > field_limit_) return Result::kTooManyFields;
      if (header_ && fields != header_fields_) parser.get().base() = std::move(*header_);
    }
    return Result::kDone;
  }

 private:
  static size_t FieldCount(RequestParser& parser) {
    const auto& fields = parser.get();
    return size_t(std::distance(fields.begin(), fields.end()));
  }

  size_t byte_limit_;
  size_t field_limit_;
  // A chunked request's header as it ended, and its number of fields.
  std::optional<bhttp::request_header<>> header_;
  size_t header_fields_ = 0;
  bool started_ = false;  // the parser has consumed some of the body
};

// Headers that must appear at most once: a second copy is either an attack (request smuggling,
// credential confusion) or a broken client, and either way the request is ambiguous.
constexpr bhttp::field kSingletonHeaders[] = {
    bhttp::field::authorization, bhttp::field::content_length,    bhttp::field::content_type,
    bhttp::field::host,          bhttp::field::transfer_encoding,
};

// Whether a request's Transfer-Encoding value frames a body pillar can read: exactly one
// `chunked` (any case, optional whitespace), since pillar decodes no other transfer coding.
// Beast sets a body's framing only when `chunked` is the last coding, and reads every other
// value (`gzip`, `chunked, gzip`, `chunked, chunked`) as no body at all, so the body's bytes
// would be parsed as the next request on the connection (smuggled past whatever sits in front).
// RFC 9112 6.3: a request whose final coding is not chunked gets 400 and its connection closed;
// `gzip, chunked` is framed right but pillar cannot decode it, so it gets the same.
inline bool IsChunkedOnly(std::string_view value) {
  const size_t first = value.find_first_not_of(" \t");
  if (first == std::string_view::npos) return false;
  value = value.substr(first, value.find_last_not_of(" \t") + 1 - first);
  return EqualsIgnoreCase(value, "chunked");
}

// Why a request's header, once it ended, frames nothing pillar will read (answered 400, the
// connection closed): a header that must be single twice, an HTTP/1.1 request without Host
// (RFC 9112 3.2: 400; nothing here routes by it, but a proxy in front may read such a request
// otherwise), or a Transfer-Encoding other than `chunked` or in an HTTP/1.0 request. Nullopt when
// its framing is sound. Checked before the parser's is_done(): Beast reads a body of any other
// coding as no body, and what follows the header must never be read as a request (Content-Length
// along with it is refused by Beast already).
struct FramingError {
  std::string message;
  std::string_view reason;  // the access log's and the rejection counter's
};
inline std::optional<FramingError> CheckFraming(const bhttp::request_header<>& request) {
  // One pass over the fields, by their enum: a request has a handful, and a lookup of each
  // singleton by name cost more than the pass (callgrind).
  int seen[std::size(kSingletonHeaders)] = {};
  const bhttp::request_header<>::value_type* te = nullptr;
  for (const auto& f : request) {
    const bhttp::field name = f.name();
    if (name == bhttp::field::unknown) continue;
    for (size_t i = 0; i < std::size(kSingletonHeaders); ++i) {
      if (name != kSingletonHeaders[i]) continue;
      if (++seen[i] > 1) {
        return FramingError{StrCat("duplicate header '", ToStd(bhttp::to_string(name)), "'"),
                            "duplicate_header"};
      }
      if (name == bhttp::field::transfer_encoding) te = &f;
    }
  }
  constexpr size_t kHost = size_t(
      std::find(std::begin(kSingletonHeaders), std::end(kSingletonHeaders), bhttp::field::host) -
      std::begin(kSingletonHeaders));
  if (seen[kHost] == 0 && request.version() >= 11) {
    return FramingError{"an HTTP/1.1 request without a Host header", "missing_host"};
  }
  if (te == nullptr) return std::nullopt;
  // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing (an HTTP/1.0 hop
  // in front may frame the body otherwise). Beast decodes it and keeps the connection alive;
  // pillar has no HTTP/1.0 clients that chunk, so it refuses the request and closes.
  if (request.version() < 11) {
    return FramingError{"Transfer-Encoding in an HTTP/1.0 request",
                        "unsupported_transfer_encoding"};
  }
  if (!IsChunkedOnly(ToStd(te->value()))) {
    return FramingError{"unsupported Transfer-Encoding: pillar accepts only chunked",
                        "unsupported_transfer_encoding"};
  }
  return std::nullopt;
}

// The headers with which a client tells pillar how to treat its request, read into `request`:
// X-Pillar-Timeout-Ms (1 ms .. a day, else ignored), X-Pillar-Priority (cut to 16 bytes; the
// execute stage judges it) and Prefer: respond-async (in any of the Prefer headers).
inline void ReadPillarHeaders(const bhttp::request<bhttp::string_body>& message, Request& request) {
  // One pass over the fields: most requests have none of these, and three lookups by name cost
  // more than the pass. Of a header sent twice, the first copy counts, as a lookup finds it.
  bool timeout_seen = false, priority_seen = false;
  for (const auto& f : message) {
    if (f.name() == bhttp::field::prefer) {
      request.respond_async = request.respond_async || PrefersRespondAsync(ToStd(f.value()));
      continue;
    }
    if (f.name() != bhttp::field::unknown) continue;
    const std::string_view name = ToStd(f.name_string());
    if (!timeout_seen && EqualsIgnoreCase(name, kTimeoutHeader)) {
      timeout_seen = true;
      int64_t ms = 0;
      if (ParseInt(ToStd(f.value()), &ms) && ms >= 1 && ms <= 86'400'000) request.timeout_ms = ms;
    } else if (!priority_seen && EqualsIgnoreCase(name, kPriorityHeader)) {
      priority_seen = true;
      request.priority = std::string(ToStd(f.value()).substr(0, 16));
    }
  }
}

}  // namespace pillar::http::internal
