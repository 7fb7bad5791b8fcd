// Server-sent events (the HTML living standard's event stream format) read incrementally, as an
// upstream's stream arrives in pieces: lines end with CRLF, LF or CR; "data:" lines accumulate
// (joined by newlines) until a blank line dispatches the event; ':' lines are comments; "event"
// and "id" are kept; other fields are ignored. An event larger than the limit is an error, not a
// buffer that grows with what an upstream sends.
//
//   SseReader reader(1 << 20);
//   absl::Status s = reader.Feed(bytes, [&](const SseEvent& e) { ... e.data ... });
//   if (reader.mid_event()) ...   // the stream ended inside an event: it was cut
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace pillar::protocol {

struct SseEvent {
  std::string_view event;  // empty: "message"
  std::string_view data;
  std::string_view id;
};

class SseReader {
 public:
  explicit SseReader(size_t max_event_bytes) : max_event_bytes_(max_event_bytes) {}

  // Reads `bytes`, calling `on_event` for each event they complete (the views live until it
  // returns). ResourceExhausted when an event or a line grows past the limit; the reader is
  // then spent.
  [[nodiscard]] absl::Status Feed(std::string_view bytes,
                                  absl::FunctionRef<void(const SseEvent&)> on_event);

  // Whether bytes of an unfinished event are held: a stream that ends now was cut mid-event.
  bool mid_event() const {
    return !line_.empty() || has_data_ || !event_.empty() || (!started_ && bom_matched_ > 0);
  }

 private:
  void Line(std::string_view line, absl::FunctionRef<void(const SseEvent&)> on_event);

  size_t max_event_bytes_;
  std::string line_;      // the unfinished line
  bool skip_lf_ = false;  // the last line ended with CR: an LF right after it ends nothing
  bool started_ = false;  // a byte-order mark is skipped only at the very start
  size_t bom_matched_ = 0;
  std::string data_;
  bool has_data_ = false;
  std::string event_;
  std::string id_;
  bool failed_ = false;
};

}  // namespace pillar::protocol
