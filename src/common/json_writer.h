// An append-only JSON text builder for responses and log lines: no DOM, no allocation beyond
// the output string. The caller is responsible for structure (keys inside objects, commas are
// handled here).
//
//   JsonWriter w;
//   w.BeginObject(); w.Key("error"); w.String(message); w.EndObject();
//   std::string body = std::move(w).Take();
// Not thread-safe; one writer per response.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pillar {

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
