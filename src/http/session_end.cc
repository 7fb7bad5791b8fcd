// The members of Session (session.h) that end a connection: the TLS shutdown, the linger that
// keeps it counted until the client has taken what it was written, the close, and the cut
// answers told to the handler (OnAnswerCut) on the way. Defined once for a plaintext and once
// for a TLS connection; session.cc instantiates the rest of the class.
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <string_view>

#include "http/session.h"

namespace pillar::http::internal {

template <bool kTls>
void Session<kTls>::Shutdown() {
  if constexpr (kTls) {
    // A close_notify, and a wait for the client's, which clients seldom send: 2 s at most.
    Arm(Waiting::kShutdown, absl::Seconds(2));
    after_answer_ += kTlsRecordBytes;
    stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
      self->Disarm();
      self->Linger();
    });
  } else {
    Linger();
  }
}

template <bool kTls>
void Session<kTls>::Linger() {
  if (waiting_ == Waiting::kLinger) return;
  Disarm();
  handling_ = false;
  on_gone_ = nullptr;
  watch_from_ns = 0;
  beast::error_code ec;
  Socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec || Delivered()) return Close(/*delivered=*/true);
  waiting_ = Waiting::kLinger;
  const int64_t now = CoarseNowNanos();
  linger_until_ns_ = now + absl::ToInt64Nanoseconds(core_.limits.write_timeout);
  deadline_ns = now;                     // looked at by every sweep
  loop_.Keep(this->shared_from_this());  // no read is pending once the client's side ends
  kept_by_loop_ = true;
  DropWhatComes();
}

template <bool kTls>
void Session<kTls>::DropWhatComes() {
  // Below the TLS layer, if any: this side has ended the TLS session or cut it.
  Socket().async_read_some(buffer_.prepare(kReadChunk),
                           [self = this->shared_from_this()](beast::error_code ec, size_t) {
                             if (self->waiting_ != Waiting::kLinger) return;  // closed since
                             // Its acknowledgements come with what it sends, and its end once it
                             // has read: looked at then, not only by the next sweep (review
                             // helper-116 F2: a place held 100 ms longer than the client needed
                             // refused clients of a small listener one after another).
                             if (self->Delivered()) return self->Close(/*delivered=*/true);
                             if (ec == net::error::eof)
                               return;  // its side ended: the sweeps wait for the rest
                             if (ec) return self->Close();  // reset: nothing can be delivered
                             self->DropWhatComes();         // what it read is never committed
                           });
}

template <bool kTls>
void Session<kTls>::OnLingerDeadline() {
  if (Delivered()) return Close(/*delivered=*/true);
  const int64_t now = CoarseNowNanos();
  if (now < linger_until_ns_) {
    deadline_ns = now;  // the next sweep looks again
    return;
  }
  listener_.Reject(core_, "answer_unread");
  TellUnsent("answer_unread", Unacknowledged());
  Close();  // resets: the rest is owed
}

template <bool kTls>
uint64_t Session<kTls>::Unacknowledged() {
  int bytes = 0;
  if (::ioctl(Socket().native_handle(), SIOCOUTQ, &bytes) != 0) return 0;
  return bytes <= 1 ? 0 : uint64_t(bytes);  // this side is shut: its FIN takes one
}

template <bool kTls>
bool Session<kTls>::Delivered() {
  if (Unacknowledged() == 0) return true;
  // A reset leaves the count as it was, and a read after the client's FIN never sees it.
  tcp_info info{};
  socklen_t size = sizeof info;
  return ::getsockopt(Socket().native_handle(), IPPROTO_TCP, TCP_INFO, &info, &size) != 0 ||
         info.tcpi_state == TCP_CLOSE;
}

template <bool kTls>
void Session<kTls>::TellUnsent(std::string_view reason, uint64_t socket_bytes) {
  if (socket_bytes > after_answer_) AnswerCut(reason, socket_bytes - after_answer_);
}

template <bool kTls>
void Session<kTls>::Close(bool delivered) {
  // Bytes the socket never sent will never reach the client, whatever it read of the rest: an
  // answer written to the kernel, then the client's reset (review helper-120). Those sent and
  // not acknowledged are not told: the client's acknowledgement may be on its way (helper-119).
  if (Socket().is_open()) {
    int never_sent = 0;
    if (::ioctl(Socket().native_handle(), SIOCOUTQNSD, &never_sent) == 0 && never_sent > 0) {
      TellUnsent("client_gone", uint64_t(never_sent));
    }
  }
  Disarm();
  handling_ = false;
  on_gone_ = nullptr;
  watch_from_ns = 0;
  held_.clear();  // nothing more reaches the client
  holding = false;
  beast::error_code ignored;
  if (!delivered && Socket().is_open() && !Delivered()) {
    Socket().set_option(net::socket_base::linger(true, 0), ignored);  // close() resets
  }
  Socket().close(ignored);
  if (kept_by_loop_) {
    kept_by_loop_ = false;
    loop_.LetGo(this);  // last: the caller's own reference keeps this alive until it returns
  }
}

template <bool kTls>
void Session<kTls>::AnswerCut(std::string_view reason, uint64_t unsent) {
  // Told where pillar knows the answer did not reach the client: its write failed or timed out,
  // its bytes were still unacknowledged when the linger's deadline reset the connection, or the
  // socket had not sent them when the connection ended. Not for bytes sent and unacknowledged
  // when the client resets the connection: its acknowledgement may be on its way (delayed up to
  // 40 ms), and a reset carries none, so an answer the client read whole would be told as cut
  // (review helper-119 F1).
  // Read back from the head last written, so that an answer that goes out whole pays nothing
  // for it. The handler's answers carry their request's id; the HTTP layer's own refusals, in
  // the access log as such already, do not.
  if (cut_told_) return;  // once: a write cut at its timeout then lingers, and may end unread
  constexpr std::string_view kId = "\r\nX-Request-Id: ";
  const size_t at = head_.find(kId);
  if (at == std::string::npos) return;
  cut_told_ = true;
  const size_t from = at + kId.size();
  const std::string_view id = std::string_view(head_).substr(from, head_.find('\r', from) - from);
  int status = 0;  // "HTTP/1.1 200 ..."
  if (head_.size() > 12) std::from_chars(head_.data() + 9, head_.data() + 12, status);
  core_.handler.OnAnswerCut(CutAnswer{.listener = listener_.options.name,
                                      .request_id = id,
                                      .status = status,
                                      .reason = reason,
                                      .remote = remote_,
                                      .unsent = unsent});
}

// The members above, for the two kinds of session (the class itself is instantiated in
// session.cc, once).
template void Session<false>::Shutdown();
template void Session<false>::Linger();
template void Session<false>::DropWhatComes();
template void Session<false>::OnLingerDeadline();
template uint64_t Session<false>::Unacknowledged();
template bool Session<false>::Delivered();
template void Session<false>::TellUnsent(std::string_view, uint64_t);
template void Session<false>::Close(bool);
template void Session<false>::AnswerCut(std::string_view, uint64_t);
template void Session<true>::Shutdown();
template void Session<true>::Linger();
template void Session<true>::DropWhatComes();
template void Session<true>::OnLingerDeadline();
template uint64_t Session<true>::Unacknowledged();
template bool Session<true>::Delivered();
template void Session<true>::TellUnsent(std::string_view, uint64_t);
template void Session<true>::Close(bool);
template void Session<true>::AnswerCut(std::string_view, uint64_t);

}  // namespace pillar::http::internal
