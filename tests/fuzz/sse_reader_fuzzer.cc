// Fuzzes the server-sent events reader (protocol/sse_reader.h): an upstream's stream is
// untrusted. The first byte sets the size of the pieces the rest arrives in; whatever the bytes
// and however they are split, the events read are those read from the whole stream at once, and
// none is larger than the limit.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/sse_reader.h"

namespace {

struct Read {
  std::vector<std::string> events;
  bool ok = true;
  bool mid = false;
};

Read ReadAll(std::string_view stream, size_t piece) {
  constexpr size_t kLimit = 256;
  pillar::protocol::SseReader reader(kLimit);
  Read out;
  for (size_t i = 0; i < stream.size() && out.ok; i += piece) {
    out.ok = reader
                 .Feed(stream.substr(i, piece),
                       [&](const pillar::protocol::SseEvent& e) {
                         if (e.data.size() > kLimit) __builtin_trap();
                         out.events.push_back(std::string(e.event) + "|" + std::string(e.data) +
                                              "|" + std::string(e.id));
                       })
                 .ok();
  }
  out.mid = reader.mid_event();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = size_t(data[0] % 16) + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Read whole = ReadAll(stream, stream.size() + 1);
  const Read pieces = ReadAll(stream, piece);
  if (whole.ok != pieces.ok) __builtin_trap();
  if (whole.ok && (whole.events != pieces.events || whole.mid != pieces.mid)) __builtin_trap();
  return 0;
}
