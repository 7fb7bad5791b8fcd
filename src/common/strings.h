// String helpers that take std::string_view. Debian's Abseil is built with its own
// absl::string_view (not an alias of std::string_view), so absl::StrCat and friends do not
// accept std::string_view; pillar uses these instead, and converts absl::string_view (from
// absl::Status::message()) here too.
//
//   std::string s = StrCat("model '", name, "' version ", 3);
//   int64_t v;  if (ParseInt(text, &v)) ...
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace pillar {
namespace strings_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, const std::string& s) { out.append(s); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
inline void Append(std::string& out, char c) { out.push_back(c); }
template <std::integral T>
requires(!std::same_as<T, char> && !std::same_as<T, bool>) void Append(std::string& out, T value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, end);
}
void Append(std::string& out, double value);

}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(out, args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (strings_internal::Append(*out, args), ...);
}

inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }
inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// Whole-text decimal integer parse; false on any stray character or overflow.
template <std::integral T>
bool ParseInt(std::string_view text, T* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::vector<std::string_view> Split(std::string_view text, char separator);
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
std::string JoinInts(const std::vector<int64_t>& values, std::string_view separator);

// A value someone else chose, as a message quotes it: "'value'" when it is at most `max` bytes,
// else "(N bytes)". Whole or not at all: a value cut short (a card's first twelve digits) is
// one no screen would recognize, and what pillar quotes it redacts (guard::RedactAll).
std::string Quoted(std::string_view value, size_t max);
// `text` cut to at most `max` bytes for a log line or a message, without the run of token
// characters (letters, digits and `-_.+=~%@`) the cut falls in: a secret cut short is no longer
// one a screen recognizes, and most of it would be shown (review helper-134: a key cut one
// character short was logged in clear). Cut after redacting, never before.
std::string_view CutForLog(std::string_view text, size_t max);
// `text` with each control byte (below 0x20, and 0x7f; newline and tab too) written as "\xNN",
// and each UTF-8 C1 control or bidirectional control as "\uNNNN", for a terminal: a name read
// from a file (a checkpoint's entry, an upstream's error) must not move the cursor, rewrite or
// reorder a line or set the window's title when a command prints it.
std::string ForTerminal(std::string_view text);
// Lowercase hex of `value`, zero-padded to `width` digits.
std::string Hex(uint64_t value, int width);
// The value of the hex digit `c` (either case), -1 when it is none.
constexpr int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `code_point` (up to U+10FFFF) appended to `out` as UTF-8.
void AppendUtf8(std::string& out, uint32_t code_point);

}  // namespace pillar
