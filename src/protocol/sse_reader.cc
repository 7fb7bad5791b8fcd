#include "protocol/sse_reader.h"

#include "common/strings.h"

namespace pillar::protocol {

[[nodiscard]] absl::Status SseReader::Feed(std::string_view bytes,
                                           absl::FunctionRef<void(const SseEvent&)> on_event) {
  if (failed_) return absl::FailedPreconditionError("the event stream already failed");
  // A byte-order mark at the very start is skipped, even when it arrives in pieces; the bytes
  // of one that turns out not to be are the start of the first line.
  static constexpr std::string_view kBom = "\xef\xbb\xbf";
  while (!started_ && !bytes.empty()) {
    if (bytes[0] != kBom[bom_matched_]) {
      started_ = true;
      line_.append(kBom.substr(0, bom_matched_));
      break;
    }
    bytes.remove_prefix(1);
    started_ = ++bom_matched_ == kBom.size();
  }
  size_t i = 0;
  while (i < bytes.size()) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (bytes[i] == '\n') {
        ++i;
        continue;
      }
    }
    // The rest of the line, up to CR or LF.
    const size_t end = bytes.find_first_of("\r\n", i);
    const std::string_view piece =
        bytes.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
    if (line_.size() + piece.size() + data_.size() > max_event_bytes_) {
      failed_ = true;
      return absl::ResourceExhaustedError(
          StrCat("an event of the stream is larger than ", max_event_bytes_, " bytes"));
    }
    if (end == std::string_view::npos) {
      line_.append(piece);
      break;
    }
    skip_lf_ = bytes[end] == '\r';
    if (line_.empty()) {
      Line(piece, on_event);
    } else {
      line_.append(piece);
      std::string line = std::move(line_);
      line_.clear();
      Line(line, on_event);
    }
    i = end + 1;
  }
  return absl::OkStatus();
}

void SseReader::Line(std::string_view line, absl::FunctionRef<void(const SseEvent&)> on_event) {
  if (line.empty()) {  // a blank line dispatches the event, if it has data
    if (has_data_) {
      on_event(SseEvent{.event = event_, .data = data_, .id = id_});
    }
    data_.clear();
    has_data_ = false;
    event_.clear();
    return;
  }
  if (line[0] == ':') return;  // a comment (often a keep-alive)
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_ = std::string(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_ = std::string(value);
  }
}

}  // namespace pillar::protocol
