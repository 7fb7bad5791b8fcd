#include "upstream/reply_parser.h"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <charconv>

namespace pillar::upstream {

std::optional<int64_t> RetryAfterSeconds(std::string_view value) {
  int64_t seconds = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (end != value.data() + value.size() || value.empty() || value.front() == '-') {
    return std::nullopt;
  }
  // More digits than an int64 holds: a long wait all the same (review helper-126: it was none).
  if (ec == std::errc::result_out_of_range) return 3600;
  if (ec != std::errc()) return std::nullopt;
  return std::min<int64_t>(seconds, 3600);
}

void ReplyParser::on_response_impl(int code, string_view, int, error_code& ec) {
  // Beast takes any three digits; HTTP's statuses start at 100.
  if (code < 100) ec = boost::beast::http::error::bad_status;
  status_ = code;
}

void ReplyParser::on_field_impl(boost::beast::http::field name, string_view name_text,
                                string_view value, error_code&) {
  const std::string_view text(value.data(), value.size());
  if (name == boost::beast::http::field::retry_after) {
    retry_after_s_ = RetryAfterSeconds(text);
  } else if (boost::beast::iequals(name_text, "X-Pillar-Shed")) {
    shed_for_deadline_ = text == "deadline";
  }
}

void ReplyParser::on_body_init_impl(const boost::optional<uint64_t>& length, error_code&) {
  // Beast has held a declared length to the body limit before this is called. Room for at most
  // 1 MiB up front: a length an upstream declares is not yet bytes it sent.
  if (length) body_.reserve(size_t(std::min<uint64_t>(*length, 1 << 20)));
}

size_t ReplyParser::on_body_impl(string_view part, error_code&) {
  body_.append(part.data(), part.size());
  return part.size();
}

size_t ReplyParser::on_chunk_body_impl(uint64_t, string_view part, error_code&) {
  body_.append(part.data(), part.size());
  return part.size();
}

}  // namespace pillar::upstream
