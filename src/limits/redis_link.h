// One pipelined connection to Redis, driven by one event loop (an asio io_context): commands
// leave in batches, at most two writes awaiting their replies (so the commands of one turn of the
// loop leave together when the connection is idle, and under load what gathers during a round
// trip leaves as the next batch); the replies are parsed as they arrive (hiredis's
// reader) and handed, in order, to their commands' callbacks on that loop. A request whose
// limits live in Redis therefore costs one round trip and no thread hand-off.
//
//   auto group = std::make_shared<RedisLinkGroup>(options, std::move(password));
//   std::shared_ptr<RedisLink> link = RedisLink::Open(loop, group);
//   link->Send(RespCommand().Add("PING").Take(),      // on the loop's thread
//              [](RedisLink&, absl::StatusOr<const redisReply*> reply) { ... });
//
// Every connection first sends AUTH (when a password is set) and SCRIPT LOAD for each of the
// group's scripts, and writes the commands that wait for it only once those are answered; an
// error in either drops the connection, and so does a reply past ReplyReader's bounds. A
// connection Redis closes while nothing written waits (its idle `timeout`) is not an outage by
// itself: the link connects again at once, and only a failure then calls it down. A command has
// `timeout` from the moment it is sent to get its reply, connecting included; a connection that
// misses it, closes, or sends what is not RESP is dropped, and every command waiting on it is
// answered Unavailable. While dropped, Send() answers Unavailable at once until `retry_interval`
// has passed; the link then connects again, on the next command or on its own timer, whichever
// comes first (so the backend gauge recovers without traffic).
//
// Lifetime: the loop owns its links (an asio service of the io_context), and closes them when it
// is destroyed, before the reactor they use; Close() does the same earlier, on the loop's thread.
// A closed link holds no asio object, so whoever still holds a pointer to it may destroy it after
// the loop is gone.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/crypto.h"
#include "limits/reply_reader.h"
#include "monitor/metrics.h"

struct redisReply;

namespace pillar::limits {

struct RedisLinkOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  absl::Duration timeout = absl::Milliseconds(250);  // connect, and each reply
  absl::Duration retry_interval = absl::Milliseconds(200);
  size_t max_pending = 65536;  // commands waiting on one link; beyond it, Unavailable at once
  // Loaded on every connection (SCRIPT LOAD), so that EVALSHA finds them.
  std::vector<std::string> scripts;
  monitor::Gauge* up_gauge = nullptr;  // pillar_limiter_backend_up, when set
};

// What the links of one client share: where Redis is, how to log in, what to load, and whether
// they are up. Thread-safe.
class RedisLinkGroup {
 public:
  RedisLinkGroup(RedisLinkOptions options, SecretString password);

  const RedisLinkOptions& options() const { return options_; }
  const SecretString& password() const { return password_; }
  // SHA-1 of each script, lowercase hex, as EVALSHA names it.
  const std::vector<std::string>& script_shas() const { return script_shas_; }
  // True once a link has connected, while none is down.
  bool up() const;

  // From the links: a link became usable, was dropped, or was closed for good. One log line per
  // episode of the group, not per link.
  void LinkUp(bool was_down);
  void LinkDown(bool was_up, std::string_view why);
  void LinkClosed(bool was_up, bool was_down);

 private:
  void Report() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RedisLinkOptions options_;
  const SecretString password_;
  const std::vector<std::string> script_shas_;
  absl::Mutex mu_;
  int64_t links_up_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t links_down_ ABSL_GUARDED_BY(mu_) = 0;
  enum class Reported { kNothing, kUp, kDown };
  Reported reported_ ABSL_GUARDED_BY(mu_) = Reported::kNothing;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> up_{false};
};

class RedisLink : public std::enable_shared_from_this<RedisLink> {
 public:
  // The reply lives only during the call. An error status means no reply came (Unavailable:
  // the link is down, dropped, full or closing); a reply of Redis's own error type is a reply.
  using Reply = absl::AnyInvocable<void(RedisLink&, absl::StatusOr<const redisReply*>) &&>;

  // A link on `loop`, owned by it; connects on the first command. Any thread.
  [[nodiscard]] static std::shared_ptr<RedisLink> Open(boost::asio::io_context& loop,
                                                       std::shared_ptr<RedisLinkGroup> group);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  // On the loop's thread. `command` is one whole RESP command (RespCommand); `reply` may be
  // empty for a command whose answer nobody reads (it is still matched, and an error counted).
  // May call `reply` before returning (the link is down, or full). `pending` says whether the
  // max_pending cap applies: kUncapped is for a command that gives back what answered commands
  // took (a release; they bound its number), which, refused, would wait for a reconnect that a
  // link that stays up never makes.
  enum class Pending { kCapped, kUncapped };
  void Send(std::string_view command, Reply reply, Pending pending = Pending::kCapped);
  // On the loop's thread: connects now if the link never has (a client that wants to know early
  // whether Redis answers).
  void ConnectNow();
  // During a Reply's call with an error: whether its command had been written, so that Redis
  // may still run it (a reply cut off by the timeout, a connection dropped after the write).
  bool may_have_run() const { return failing_written_; }
  // On the loop's thread: sends `command` (one whole RESP command, its reply unread) first thing
  // on the next connection, once its handshake is answered: what undoes a command that may have
  // run after the link gave up on it. At most kMaxDeferred wait; more are dropped.
  void SendOnReconnect(std::string command);
  static constexpr size_t kMaxDeferred = 4096;
  // On the loop's thread: Send(command, reply, pending) after `delay` (a command Redis refused
  // for now: BUSY, LOADING). Nothing if the link is gone by then.
  void SendAfter(std::chrono::steady_clock::duration delay, std::string command, Reply reply,
                 Pending pending);
  // On the loop's thread, or while the loop is destroyed: answers what waits with Unavailable
  // naming `why`, closes the socket and lets go of every asio object.
  void Close(std::string_view why);

  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // The loop the link runs on; gone, possibly, once the link is closed.
  boost::asio::io_context& loop() const { return loop_; }
  // Commands sent and writes made, over the link's life (any thread; for tests of pipelining).
  uint64_t commands() const { return commands_.load(std::memory_order_relaxed); }
  uint64_t writes() const { return writes_.load(std::memory_order_relaxed); }

 private:
  enum class State { kIdle, kConnecting, kHandshake, kUp, kDown, kClosed };
  using SteadyTime = std::chrono::steady_clock::time_point;
  struct Waiting {
    SteadyTime deadline;
    Reply reply;
  };

  RedisLink(boost::asio::io_context& loop, std::shared_ptr<RedisLinkGroup> group);

  void Connect();
  void OnConnected(uint64_t generation, const boost::system::error_code& error);
  // Builds AUTH and the script loads in handshake_, each checked by its reply; once all are
  // answered, MarkUp() lets the requests' commands go.
  void QueueHandshake();
  void MarkUp();
  // Whether a write may start now, and of what: the handshake alone, or the requests' commands.
  bool WriteDue() const;
  void Enqueue(std::string_view command, Reply reply);
  void ScheduleFlush();
  void Flush();
  void OnWritten(uint64_t generation, const boost::system::error_code& error);
  void StartRead();
  void OnRead(uint64_t generation, const boost::system::error_code& error, size_t bytes);
  // Hands each complete reply to its command; false when the link was dropped meanwhile.
  bool DeliverReplies(uint64_t generation);
  // Drops the connection: every waiting command is answered Unavailable.
  void Fail(std::string_view why);
  // Connects again after Redis closed a connection with nothing written awaiting a reply,
  // without calling the link down, keeping the commands not yet written.
  void Reconnect();
  // Answers every waiting command with Unavailable; the first `written` had been written.
  void FailWaiting(std::string_view why, size_t written);
  void ArmTimer();
  void OnTimer(const boost::system::error_code& error);

  boost::asio::io_context& loop_;
  const std::shared_ptr<RedisLinkGroup> group_;
  // Reset by Close(): a closed link owns nothing of the loop's.
  std::unique_ptr<boost::asio::ip::tcp::socket> socket_;
  std::unique_ptr<boost::asio::ip::tcp::resolver> resolver_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::unique_ptr<ReplyReader> reader_;  // one per connection

  State state_ = State::kIdle;
  uint64_t generation_ = 0;  // one per connection: handlers of an older one do nothing
  SteadyTime connect_deadline_{};
  SteadyTime retry_at_{};
  std::deque<Waiting> waiting_;    // sent or queued, in order; replies answer the front
  std::string out_;                // commands not yet written
  std::string handshake_;          // AUTH and the script loads, not yet written (wiped)
  size_t handshake_commands_ = 0;  // of the handshake, not yet answered
  size_t unwritten_ = 0;           // commands in out_
  std::deque<size_t> batches_;     // per write awaiting replies: how many it still waits for
  std::string writing_;            // the write in flight (one at a time, across connections)
  bool writing_in_flight_ = false;
  bool wipe_after_write_ = false;  // writing_ holds the handshake, AUTH's password in it
  bool flush_posted_ = false;
  bool reading_ = false;  // a read in flight into read_buffer_ (one at a time)
  bool timer_armed_ = false;
  bool failing_written_ = false;       // see may_have_run()
  std::vector<std::string> deferred_;  // SendOnReconnect's commands
  // How the group counts this link (RedisLinkGroup::LinkUp, LinkDown).
  bool counted_up_ = false;
  bool counted_down_ = false;
  std::array<char, 16384> read_buffer_{};

  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> commands_{0};
  std::atomic<uint64_t> writes_{0};
};

}  // namespace pillar::limits
