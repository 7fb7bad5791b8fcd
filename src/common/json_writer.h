// An append-only JSON text builder for responses and log lines: no DOM, no allocation beyond
// the output string. The caller is responsible for structure (keys inside objects, commas are
// handled here).
//
//   JsonWriter w;
//   w.BeginObject(); w.Key("error"); w.String(message); w.EndObject();
//   std::string body = std::move(w).Take();
// Not thread-safe; one writer per response.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pillar {

// A member name known when the program is compiled, checked then to need no escaping and kept
// quoted with its colon, so that writing it is one copy: `w.Key<"status">()`. A log line or an
// audit record writes a dozen names per request, where scanning each for escapes cost more
// than the rest of the line.
template <size_t N>
struct JsonName {
  consteval JsonName(const char (&name)[N]) {  // NOLINT: implicit, for Key<"name">
    text[0] = '"';
    for (size_t i = 0; i + 1 < N; ++i) {
      const char c = name[i];
      // Not a constant expression when reached: a name that would need escaping does not build.
      if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') throw "a JsonName needs no escaping";
      text[i + 1] = c;
    }
    text[N] = '"';
    text[N + 1] = ':';
  }
  char text[N + 2] = {};  // "name":
};

class JsonWriter {
 public:
  JsonWriter() = default;
  explicit JsonWriter(size_t reserve) { out_.reserve(reserve); }
  // Continues `text` (already-written JSON, moved in), e.g. to fill in one value of a larger
  // document without a copy; take it back with Take().
  explicit JsonWriter(std::string text) : out_(std::move(text)) {}

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view key);
  template <JsonName Name>
  void Key() {
    if (need_comma_) out_.push_back(',');
    out_.append(Name.text, sizeof Name.text);
    need_comma_ = false;
  }
  void String(std::string_view value);
  void Int(int64_t value);
  void Uint(uint64_t value);
  // value / 1000 as a decimal with at most three places: 12500 is written 12.5, 3000 is written
  // 3 (e.g. nanoseconds as microseconds).
  void Thousandths(int64_t value);
  // Non-finite values have no JSON spelling; they are written as null.
  void Double(double value);
  void Float(float value);
  void Bool(bool value);
  void Null();

  const std::string& str() const { return out_; }
  std::string Take() && { return std::move(out_); }

 private:
  void Separate();
  void Open(char c);
  void Close(char c);

  std::string out_;
  bool need_comma_ = false;
};

// Appends `value` to `out` as a quoted JSON string. Bytes that are not valid UTF-8 are replaced
// with U+FFFD so that a log line or error body is always valid JSON.
void AppendJsonString(std::string& out, std::string_view value);

}  // namespace pillar
