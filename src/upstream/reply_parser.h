// The parser of an upstream's HTTP/1.1 reply: Beast's parser does the framing (status line,
// Content-Length or chunks, limits on the header and the body, keep-alive); this keeps only what
// pillar reads of a reply: its status, Retry-After, X-Pillar-Shed and the body.
//
//   ReplyParser parser;
//   parser.body_limit(max_body_bytes);
//   parser.header_limit(16 * 1024);
//   http::async_read(stream, buffer, parser, ...);   // or parser.put(bytes, ec) by hand
//   if (parser.is_done()) use(parser.status(), parser.body());
//
// Beast's own response type keeps every field in an allocated, indexed node: on the proxy's hot
// path that cost more than the rest of reading a reply.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pillar::upstream {

// The seconds of a Retry-After in its delta-seconds form, at most an hour; none for the HTTP-date
// form or anything else (an upstream that sends one gets the default back-off).
std::optional<int64_t> RetryAfterSeconds(std::string_view value);

class ReplyParser final : public boost::beast::http::basic_parser<false> {
 public:
  int status() const { return status_; }
  std::optional<int64_t> retry_after_s() const { return retry_after_s_; }
  // X-Pillar-Shed: deadline, from a pillar upstream that refused the request only because the
  // caller's deadline is too short for its queue (runtime/admission.h).
  bool shed_for_deadline() const { return shed_for_deadline_; }
  std::string& body() { return body_; }

 private:
  using error_code = boost::system::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       error_code&) override {}
  void on_response_impl(int code, string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_text, string_view value,
                     error_code&) override;
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<uint64_t>& length, error_code&) override;
  size_t on_body_impl(string_view part, error_code&) override;
  void on_chunk_header_impl(uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(uint64_t, string_view part, error_code&) override;
  void on_finish_impl(error_code&) override {}

  int status_ = 0;
  std::optional<int64_t> retry_after_s_;
  bool shed_for_deadline_ = false;
  std::string body_;
};

}  // namespace pillar::upstream
