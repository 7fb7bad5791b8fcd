#include "protocol/number_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>

#include "common/strings.h"

namespace pillar::protocol {
namespace {

// A whole double below 1e21 as JavaScript prints it: the shortest digits that read back as the
// same double, then zeros (4.111111111111117e18 is 4111111111111117000, not the double's exact
// 4111111111111116800); Python's float prints the same digits. Empty if it cannot be written.
std::string JavaScriptDigits(double d) {
  // The shortest digits in scientific form ("4.111111111111117e+18"), then the exponent
  // written out as zeros.
  char buffer[40];
  const std::to_chars_result r =
      std::to_chars(buffer, buffer + sizeof(buffer), d, std::chars_format::scientific);
  const std::string_view written(buffer, size_t(r.ptr - buffer));
  const size_t e_at = written.find('e');
  int exponent = 0;
  if (r.ec != std::errc() || e_at == std::string_view::npos ||
      std::from_chars(written.data() + e_at + (written[e_at + 1] == '+' ? 2 : 1),
                      written.data() + written.size(), exponent)
              .ec != std::errc()) {
    return std::string();
  }
  std::string digits;
  for (char c : written.substr(0, e_at)) {
    if (c != '.') digits.push_back(c);
  }
  const int significant = int(digits.size()) - (digits.front() == '-' ? 1 : 0);
  if (exponent >= significant - 1) digits.append(size_t(exponent - (significant - 1)), '0');
  return digits;
}

}  // namespace

std::string NumberText(simdjson::dom::element e) {
  double d;
  if (e.type() == simdjson::dom::element_type::DOUBLE && e.get(d) == simdjson::SUCCESS &&
      std::isfinite(d) && std::fabs(d) < 1e21) {
    if (d == std::trunc(d)) {
      if (std::string digits = JavaScriptDigits(d); !digits.empty()) return digits;
    } else if (std::fabs(d) >= 1e-6) {
      // A fraction, as JavaScript prints it: the shortest digits in plain notation
      // (4.1111111111111115e15 is 4111111111111111.5: review helper-85).
      char buffer[64];
      const std::to_chars_result r =
          std::to_chars(buffer, buffer + sizeof(buffer), d, std::chars_format::fixed);
      if (r.ec == std::errc()) return std::string(buffer, r.ptr);
    }
  }
  std::string written = simdjson::minify(e);
  constexpr double kExact = 9007199254740992.0;  // 2^53: integers beyond lose digits as doubles
  int64_t i;
  uint64_t u;
  const double value = e.get(i) == simdjson::SUCCESS   ? double(i)
                       : e.get(u) == simdjson::SUCCESS ? double(u)
                                                       : 0;
  if (e.type() != simdjson::dom::element_type::DOUBLE && std::fabs(value) >= kExact) {
    if (std::string shown = JavaScriptDigits(value); !shown.empty() && shown != written) {
      StrAppend(&written, " ", shown);
    }
  }
  return written;
}

}  // namespace pillar::protocol
