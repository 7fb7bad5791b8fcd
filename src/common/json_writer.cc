#include "common/json_writer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

namespace pillar {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) {
    n = 2;
    cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3;
    cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (byte(i + k) & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace

namespace {

static_assert(std::endian::native == std::endian::little, "PlainRunEnd reads words in order");

// Bytes that JSON strings may carry as they are: printable ASCII other than '"' and '\\'.
constexpr std::array<bool, 256> kPlainByte = [] {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  return plain;
}();

// The special bytes of `word` (eight bytes of text, the first in its lowest byte), each marked
// by its high bit: a byte is special when it is below 0x20, has its high bit set, or is '"' or
// '\\'. Exact up to the first special byte (a borrow can only mark bytes above it), which is all
// that is read of the result.
uint64_t SpecialBytes(uint64_t word) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  constexpr uint64_t kHigh = 0x8080808080808080ull;
  const auto zero_bytes = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  return (((word - kOnes * 0x20) & ~word) | word | zero_bytes(word ^ (kOnes * '"')) |
          zero_bytes(word ^ (kOnes * '\\'))) &
         kHigh;
}

uint64_t LoadWord(const char* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof word);  // a fixed size: one unaligned load, not a call
  return word;
}

// The end of the run of plain bytes that starts at `i`, eight bytes at a time while a whole word
// is left, then a byte at a time (no load of a variable size, which would be a call). Most strings
// a server writes (keys, names, ids, timestamps) are one run.
size_t PlainRunEnd(std::string_view value, size_t i) {
  const size_t size = value.size();
  for (; i + 8 <= size; i += 8) {
    if (const uint64_t special = SpecialBytes(LoadWord(value.data() + i)); special != 0) {
      // Bytes are in memory order in the word on a little-endian machine: the lowest first.
      return i + size_t(std::countr_zero(special)) / 8;
    }
  }
  while (i < size && kPlainByte[static_cast<unsigned char>(value[i])]) ++i;
  return i;
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t i = PlainRunEnd(value, 0);
  out.append(value.data(), i);
  if (i == value.size()) {  // the common case: nothing to escape
    out.push_back('"');
    return;
  }
  out.reserve(out.size() + value.size() - i + 8);
  while (i < value.size()) {
    // Copy the longest run of plain bytes at once; most strings are one run.
    const size_t run = PlainRunEnd(value, i);
    out.append(value.data() + i, run - i);
    i = run;
    if (i == value.size()) break;
    unsigned char c = static_cast<unsigned char>(value[i]);
    if (c >= 0x80) {
      size_t n = Utf8SequenceLength(value, i);
      if (n == 0) {
        out.append("\xef\xbf\xbd");
        ++i;
      } else {
        out.append(value.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 0xf]);
    }
    ++i;
  }
  out.push_back('"');
}

void JsonWriter::Separate() {
  if (need_comma_) out_.push_back(',');
  need_comma_ = true;
}

void JsonWriter::Open(char c) {
  Separate();
  out_.push_back(c);
  need_comma_ = false;
}

void JsonWriter::Close(char c) {
  out_.push_back(c);
  need_comma_ = true;
}

void JsonWriter::Key(std::string_view key) {
  Separate();
  AppendJsonString(out_, key);
  out_.push_back(':');
  need_comma_ = false;
}

void JsonWriter::String(std::string_view value) {
  Separate();
  AppendJsonString(out_, value);
}

namespace {

// The shortest form that reads back to the same value. `to_chars` writes 1.1e20 as the 21-digit
// integer 110000000000000000000, which is valid JSON but which readers that keep integers in 64
// bits (simdjson among them) refuse; such a value is written in scientific form instead. And it
// writes negative zero as "-0", an integer in JSON's grammar, which such readers (simdjson,
// Python's json) take as the integer 0: a pillar in front of another turned a model's -0.0 into
// 0.0. "-0.0" reads back as negative zero everywhere.
template <typename T>
void AppendShortestNumber(std::string& out, T value) {
  if (value == 0 && std::signbit(value)) {
    out.append("-0.0");
    return;
  }
  char buf[48];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  const std::string_view text(buf, end - buf);
  const size_t digits = text.size() - (text.front() == '-' ? 1 : 0);
  if (digits > 18 && text.find_first_of(".e") == std::string_view::npos) {
    end = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific).ptr;
  }
  out.append(buf, end);
}

}  // namespace

void JsonWriter::Int(int64_t value) {
  Separate();
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out_.append(buf, end);
}

void JsonWriter::Thousandths(int64_t value) {
  Separate();
  // Integer arithmetic, not a double's shortest form: the same value (the decimal with at most
  // three places reads back as value / 1000.0), never in scientific form, at a tenth of the cost.
  char buf[32];
  char* p = buf;
  uint64_t magnitude = uint64_t(value);
  if (value < 0) {
    *p++ = '-';
    magnitude = 0 - magnitude;
  }
  p = std::to_chars(p, buf + sizeof buf, magnitude / 1000).ptr;
  if (uint64_t fraction = magnitude % 1000; fraction != 0) {
    char digits[3] = {char('0' + fraction / 100), char('0' + fraction / 10 % 10),
                      char('0' + fraction % 10)};
    size_t n = 3;
    while (digits[n - 1] == '0') --n;
    *p++ = '.';
    std::memcpy(p, digits, n);
    p += n;
  }
  out_.append(buf, p);
}

void JsonWriter::Uint(uint64_t value) {
  Separate();
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out_.append(buf, end);
}

void JsonWriter::Double(double value) {
  Separate();
  if (!std::isfinite(value)) {
    out_.append("null");
    return;
  }
  AppendShortestNumber(out_, value);
}

void JsonWriter::Float(float value) {
  Separate();
  if (!std::isfinite(value)) {
    out_.append("null");
    return;
  }
  AppendShortestNumber(out_, value);
}

void JsonWriter::Bool(bool value) {
  Separate();
  out_.append(value ? "true" : "false");
}

void JsonWriter::Null() {
  Separate();
  out_.append("null");
}

}  // namespace pillar
