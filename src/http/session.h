// Internal to src/http: one client connection (plain or TLS) and the per-thread event loop it
// lives on. Included only by server.cc and its own .cc files; the public door of the part is
// server.h. How a request's bytes are fed to the parser under the limits is request_reader.h; the
// members that read and answer are defined in session.cc, those that stream in session_stream.cc,
// for the two kinds this header declares there.
//
// A Session reads a request under the limits, answers protocol errors itself, hands good
// requests to the Handler, and writes the answer; deadlines are checked by its Loop's sweep.
// It drives Beast's parser itself (read, put, count) instead of bhttp::async_read, so that every
// byte of a header and of a chunked body's framing is counted (HeaderReader, BodyReader) and a
// body is charged to the server-wide in-flight budget (Core::Reserve) before it is held.
// All of a session's handlers run on its loop's single thread; Send() and Post() may be called
// from any thread and hop onto it.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> under C++20: before it.
// clang-format off
#include <utility>
// clang-format on

#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "http/metered_socket.h"
#include "http/peer_identity.h"
#include "http/request_reader.h"
#include "http/response_head.h"
#include "http/server.h"
#include "http/server_state.h"
#include "http/tls_client.h"

namespace pillar::http::internal {

namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

// Every read, header or body. The parser consumes a body as it arrives and holds back less than
// header_limit_bytes of a header, or of a chunk-size line or trailers (and the CRLF before it),
// so a connection's read buffer never grows past header_limit_bytes + 2 + kReadChunk.
constexpr size_t kReadChunk = 16 * 1024;

template <bool kTls>
class Session final : public ResponseSink,
                      public Deadlined,
                      public std::enable_shared_from_this<Session<kTls>> {
  // Every write goes through a MeteredSocket (under the TLS stream on a TLS connection), which
  // times its writes' waits for the client once a streamed response asks (stream_waits).
  using Stream = std::conditional_t<kTls, ssl::stream<MeteredSocket>, MeteredSocket>;

 public:
  Session(tcp::socket&& socket, Core& core, Listener& listener, Loop& loop)
      : tls_(CurrentTls(listener)),
        stream_(MakeStream(std::move(socket), tls_.context.get())),
        core_(core),
        listener_(listener),
        loop_(loop) {
    ++*listener_.connections;
    if (listener_.open) listener_.open->Add(1);
  }

  ~Session() override {
    core_.Release(reserved_);  // the connection went away before its request was answered
    --*listener_.connections;
    if (listener_.open) listener_.open->Add(-1);
  }

  void Run() {
    beast::error_code ec;
    tcp::endpoint peer = Socket().remote_endpoint(ec);
    if (!ec) remote_ = StrCat(peer.address().to_string(), ":", peer.port());
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Begin(); });
  }

  void Send(Response response) override {
    net::dispatch(stream_.get_executor(),
                  [self = this->shared_from_this(), response = std::move(response)]() mutable {
                    self->Write(std::move(response));
                  });
  }

  void Post(absl::AnyInvocable<void() &&> task) override {
    net::post(stream_.get_executor(), [self = this->shared_from_this(),
                                       task = std::move(task)]() mutable { std::move(task)(); });
  }

  void OnClientGone(absl::AnyInvocable<void() &&> gone) override {
    if (!handling_) return;  // answered already
    on_gone_ = std::move(gone);
    probed_ns_ = 0;
    watch_from_ns = CoarseNowNanos() + kWatchAfterNs;
  }

 private:
  enum class Waiting { kNothing, kIdle, kRequest, kHandshake, kWrite, kShutdown, kLinger };

  static ListenerTls::Current CurrentTls(const Listener& listener) {
    if constexpr (kTls) {
      return listener.tls->Get();
    } else {
      return {};
    }
  }

  static Stream MakeStream(tcp::socket&& socket, ssl::context* context) {
    if constexpr (kTls) {
      return Stream(MeteredSocket(std::move(socket)), *context);
    } else {
      return Stream(std::move(socket));
    }
  }

  MeteredSocket& Metered() {
    if constexpr (kTls) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  tcp::socket& Socket() { return Metered().socket(); }

  // One deadline for whatever the session is waiting for. On expiry the socket's pending
  // operation is cancelled (not the socket closed), so a slow request can still get its 408.
  void Arm(Waiting what, absl::Duration after) {
    waiting_ = what;
    timed_out_ = false;
    slow_body_ = false;
    deadline_ns = CoarseNowNanos() + absl::ToInt64Nanoseconds(after);
    request_deadline_ns_ = deadline_ns;
  }

  void Disarm() {
    waiting_ = Waiting::kNothing;
    deadline_ns = 0;
  }

  void OnDeadline() override;
  // Whether the client is still there, while a request it waits for is handled (OnClientGone).
  void OnWatch() override;
  void OnHolding() override;
  // After an answer's write: lets its held places go if the client has every byte, else holds
  // them until a sweep finds it has.
  void HoldUntilTaken();

  void Begin();

  // `idle_until_ns`: when the idle wait ends (0: idle_timeout from now). Line ends alone
  // between requests keep the deadline they found, so that they cannot hold a connection open.
  void WaitForRequest(int64_t idle_until_ns = 0);

  // Parses what the buffer holds and reads more until the header is complete. The parser
  // stops at the end of the header, so the body and pipelined requests stay in the buffer.
  void ParseHeader();

  // Reads what the peer sends next into the buffer, then calls `then`. A failed read (the peer
  // went away, the request deadline cancelled it) goes to OnReadError as Beast reports it.
  void ReadMore(void (Session::*then)());

  void OnHeader();

  // Parses what the buffer holds and reads more until the body is complete. The parser stops
  // at the end of the body, so pipelined requests stay in the buffer.
  void ParseBody();

  // A chunked body declares no size, so it is charged as its payload is kept, before the memory
  // is taken, and only for that: the parser drops chunk-size lines and extensions as it goes
  // (each bounded by header_limit_bytes: BodyReader), and trailers are fields, bounded with
  // the header. Beast's string_body would append the payload with std::string's growth, which
  // allocates before anyone could charge it and can reach twice body_limit_bytes; this grows
  // the string the same way (doubling, so a body of 1-byte chunks is not copied once per
  // chunk) but never past body_limit_bytes, and charges its capacity: what the server holds.
  // Beast refuses a chunk that would pass body_limit_bytes before its payload arrives.
  size_t OnChunkBody(beast::string_view data, beast::error_code& ec);

  // Called by the parser for each piece of chunk payload, in place of string_body's reader.
  struct ChunkBodySink {
    Session* session;
    size_t operator()(uint64_t /*remain*/, beast::string_view data, beast::error_code& ec) {
      return session->OnChunkBody(data, ec);
    }
  };

  // A body holds its reservation while it is read: past the grace, it must have brought
  // body_min_bytes_per_second for every second since its header (Limits), or the deadline
  // fires and it gets 408. Bytes the parser consumed count, framing included: a chunked body's
  // reservation grows only with its payload, so framing keeps alive a connection that holds
  // little. Called when the body starts and after every read of it.
  void ArmBodyRate();

  void RejectOverBudget();

  void OnReadError(beast::error_code ec);

  // The request's header read into request_ (all but its body), its TLS client checked and
  // named: before the body, so that Handler::BeforeBody can judge its sender.
  void ReadHead(const bhttp::request<bhttp::string_body>& message);
  void OnRequest();

  void Reject(int status, std::string message, std::string_view reason, bool keep_alive = false,
              std::string_view method = {}, std::string_view target = {});

  // The request is answered: what it held goes back to the budget, and its head is made.
  // `streamed`: no length is known (chunked, or to the connection's end for HTTP/1.0).
  void BuildHead(const Response& response, bool streamed);

  void Write(Response response);

  // The response is on the wire: the next request, or the end of the connection.
  void Answered();

  // --- Streamed responses (ResponseSink::StartStream). Pieces queue in `stream_queue_` and are
  // written one at a time; each write has the write timeout, and the stream has none while it
  // waits for its producer (whose own deadline bounds it).
  struct StreamPiece {
    std::string bytes;
    absl::AnyInvocable<void(bool) &&> written;
    bool last = false;
  };

  void StartStream(Response head) override;

  void WriteChunk(std::string bytes, absl::AnyInvocable<void(bool) &&> written) override;

  void EndStream() override;

  std::shared_ptr<const WaitMeter> stream_waits() override;

  void PumpStream();

  void OnStreamWritten(beast::error_code ec);

  // The client went away or stopped reading: every piece still queued is told so, and the
  // connection closes (a stream cut short has no clean end to write).
  void FailStream();

  void Shutdown();

  // The end of a connection that may still owe the client bytes: this side is shut (a FIN
  // after what the socket holds), and the session lives on, counted against max_connections,
  // until the client has acknowledged all of it; what the client sends meanwhile is read and
  // dropped, as a byte arriving at a closed socket draws a reset, which throws away what the
  // socket still holds (review helper-113 F3: late bytes cut whole answers). A client that has
  // not taken it within write_timeout is reset, which frees the socket's memory (F2: slow
  // readers held kernel memory past max_connections, in sockets pillar had closed). Most
  // connections owe nothing by then (one ioctl tells) and close at once.
  void Linger();

  // Reads and drops what the client sends while the session lingers, until its side ends.
  void DropWhatComes();

  // Each sweep while the session lingers: closed once the client has everything, reset when
  // the time it had is up.
  void OnLingerDeadline();

  // Whether the client has acknowledged every byte this side sent (the connection shut), or
  // the connection is gone.
  bool Delivered();

  // Ends the connection at once: the ends that owe the client nothing (the handshake timed out,
  // the socket failed or was reset, the client went away) and Linger's. What the socket still
  // owes is reset away rather than left to the kernel after the session stopped counting (the
  // bound Linger keeps); `delivered`: the caller just saw that nothing is owed.
  void Close(bool delivered = false);
  // The answer last written did not reach the client whole, for `reason`, `unsent` bytes short
  // (CutAnswer): tells the handler, once an answer.
  void AnswerCut(std::string_view reason, uint64_t unsent);
  // AnswerCut for what of `socket_bytes` (the last bytes written to the socket) is the last
  // answer's: past what was written after it (after_answer_).
  void TellUnsent(std::string_view reason, uint64_t socket_bytes);
  // Bytes written to the socket that the client has not acknowledged (its FIN not counted).
  uint64_t Unacknowledged();

  // The TLS context this connection was made with (null on a plaintext one), and its
  // generation, which the client was verified under: declared before the stream, which uses it.
  ListenerTls::Current tls_;
  Stream stream_;
  Core& core_;
  Listener& listener_;
  Loop& loop_;
  Waiting waiting_ = Waiting::kNothing;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  HeaderReader header_reader_{0, 0};
  BodyReader body_reader_{0, 0};
  // Taken from the in-flight budget by the request being served.
  size_t reserved_ = 0;
  // Of reserved_, what the chunked body's string has been charged (OnChunkBody).
  size_t body_charged_ = 0;
  ChunkBodySink chunk_body_sink_{this};
  // ArmBodyRate: when the body's reading began, how much of it the parser has consumed, the
  // request's own deadline, and whether the deadline armed is the rate's.
  int64_t body_started_ns_ = 0;
  uint64_t body_bytes_ = 0;
  int64_t request_deadline_ns_ = 0;
  int64_t idle_deadline_ns_ = 0;  // the idle wait's, kept across line ends alone (0: none yet)
  bool slow_body_ = false;
  std::string head_;  // the response being written: head and body
  std::string body_;
  // The written answers' Response::held, kept until the client has taken their bytes (not only the
  // kernel: review helper-134 pinned 150 answers of 1 MB in socket buffers, each answer's place
  // given back as its write completed): OnHolding, or the connection's end.
  std::vector<std::shared_ptr<HeldBytes>> held_;
  bool cut_told_ = false;  // AnswerCut has told of the answer last written
  // Bytes written since the answer that are not part of it: interim 100s, over TLS the
  // close_notify (at most, TLS's record overhead being counted at kTlsRecordBytes).
  static constexpr uint64_t kInterimBytes = 25;  // "HTTP/1.1 100 Continue\r\n\r\n"
  static constexpr uint64_t kTlsRecordBytes = 64;
  uint64_t after_answer_ = 0;
  // A streamed response in progress: pieces waiting to be written, the one being written first.
  bool streaming_ = false;
  bool stream_writing_ = false;
  bool stream_failed_ = false;
  std::deque<StreamPiece> stream_queue_;
  std::shared_ptr<WaitMeter> waits_;  // made by stream_waits()
  bool response_keep_alive_ = true;
  bool keep_alive_ = true;
  bool http10_ = false;
  std::string remote_;
  Request request_;             // the request being read, from its header on (ReadHead)
  bool same_tls_files_ = true;  // its TLS client was verified under the listener's files now
  bool body_unread_ = false;    // BeforeBody refused its sender: its body is not read
  int64_t named_ns_ = 0;        // when ReadHead named its TLS client
  TlsClient client_;            // a TLS connection's client certificate, kept current
  std::string extra_header_;
  // From the request's hand-off to the handler until its answer starts; what runs if the client
  // goes away meanwhile (OnClientGone), watched from 100 ms after it was set.
  static constexpr int64_t kWatchAfterNs = 100'000'000;
  bool handling_ = false;
  absl::AnyInvocable<void() &&> on_gone_;
  // When the request's client was last written a 100 to tell a close from a half-close (OnWatch;
  // 0: never), and how often that is done while its side stays ended.
  static constexpr int64_t kProbeEveryNs = 1'000'000'000;
  int64_t probed_ns_ = 0;
  int64_t linger_until_ns_ = 0;  // when a lingering session is reset (Linger)
  bool kept_by_loop_ = false;    // in loop_.lingering
};

// Defined in session.cc, once each.
extern template class Session<false>;
extern template class Session<true>;

}  // namespace pillar::http::internal
