// The members of Session (session.h) that write a streamed response (ResponseSink::StartStream,
// WriteChunk, EndStream): its pieces queued and written one at a time, and the time they waited
// for the client's socket (stream_waits, timed by the session's MeteredSocket: on a TLS
// connection, the socket under the TLS stream). Defined once for a plaintext and once for a TLS
// connection; session.cc instantiates the rest of the class.
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "common/clock.h"
#include "http/session.h"

namespace pillar::http::internal {

template <bool kTls>
void Session<kTls>::StartStream(Response head) {
  BuildHead(head, true);
  core_.writing.fetch_add(1);
  streaming_ = true;
  stream_queue_.push_back({std::move(head_), nullptr, false});
  head_.clear();
  PumpStream();
}

template <bool kTls>
void Session<kTls>::WriteChunk(std::string bytes, absl::AnyInvocable<void(bool) &&> written) {
  if (!streaming_ || stream_failed_) {
    if (written) std::move(written)(false);
    return;
  }
  if (bytes.empty()) {  // an empty chunk would end the body
    if (written) std::move(written)(true);
    return;
  }
  std::string framed;
  if (http10_) {
    framed = std::move(bytes);
  } else {
    framed.reserve(bytes.size() + 12);
    framed = Hex(bytes.size(), 1);
    framed.append("\r\n");
    framed.append(bytes);
    framed.append("\r\n");
  }
  stream_queue_.push_back({std::move(framed), std::move(written), false});
  PumpStream();
}

template <bool kTls>
void Session<kTls>::EndStream() {
  if (!streaming_) return;
  stream_queue_.push_back({http10_ ? std::string() : std::string("0\r\n\r\n"), nullptr, true});
  PumpStream();
}

template <bool kTls>
std::shared_ptr<const WaitMeter> Session<kTls>::stream_waits() {
  if (waits_ == nullptr) {
    waits_ = std::make_shared<WaitMeter>();
    // The socket times it (on a TLS connection what SSL_write takes says nothing of the socket's
    // room: the socket under it is metered).
    Metered().Meter(waits_);
  }
  return waits_;
}

template <bool kTls>
void Session<kTls>::PumpStream() {
  if (stream_writing_ || stream_queue_.empty()) return;
  if (stream_failed_) return FailStream();
  stream_writing_ = true;
  Arm(Waiting::kWrite, core_.limits.write_timeout);
  net::async_write(stream_, net::buffer(stream_queue_.front().bytes),
                   [self = this->shared_from_this()](beast::error_code ec, size_t) {
                     self->OnStreamWritten(ec);
                   });
}

template <bool kTls>
void Session<kTls>::OnStreamWritten(beast::error_code ec) {
  stream_writing_ = false;
  Disarm();
  StreamPiece piece = std::move(stream_queue_.front());
  stream_queue_.pop_front();
  if (ec) {
    stream_failed_ = true;
    if (piece.written) std::move(piece.written)(false);
    return FailStream();
  }
  if (piece.written) std::move(piece.written)(true);
  if (piece.last) {
    streaming_ = false;
    core_.writing.fetch_sub(1);
    return Answered();
  }
  PumpStream();
}

template <bool kTls>
void Session<kTls>::FailStream() {
  std::deque<StreamPiece> pieces;
  pieces.swap(stream_queue_);
  for (StreamPiece& piece : pieces) {
    if (piece.written) std::move(piece.written)(false);
  }
  if (streaming_) {
    streaming_ = false;
    core_.writing.fetch_sub(1);
  }
  // Timed out: cut here, what was written before may still be read.
  timed_out_ ? Linger() : Close();
}

// The members above, for the two kinds of session (the class itself is instantiated in
// session.cc, once).
template void Session<false>::StartStream(Response);
template void Session<false>::WriteChunk(std::string, absl::AnyInvocable<void(bool) &&>);
template void Session<false>::EndStream();
template std::shared_ptr<const WaitMeter> Session<false>::stream_waits();
template void Session<false>::PumpStream();
template void Session<false>::OnStreamWritten(beast::error_code);
template void Session<false>::FailStream();
template void Session<true>::StartStream(Response);
template void Session<true>::WriteChunk(std::string, absl::AnyInvocable<void(bool) &&>);
template void Session<true>::EndStream();
template std::shared_ptr<const WaitMeter> Session<true>::stream_waits();
template void Session<true>::PumpStream();
template void Session<true>::OnStreamWritten(beast::error_code);
template void Session<true>::FailStream();

}  // namespace pillar::http::internal
