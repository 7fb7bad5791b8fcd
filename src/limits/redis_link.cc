#include "limits/redis_link.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>

#include "common/strings.h"
#include "limits/reply_reader.h"
#include "limits/resp_command.h"

namespace pillar::limits {
namespace asio = boost::asio;
namespace {

// Writes whose replies are awaited at once, per connection: a few, not one per turn of the loop,
// so that under load each batch holds what a round trip gathered and Redis reads it at once
// (writing every turn's commands at once cut throughput by a quarter). Two, not one: with one, a
// request's admission waited behind the previous request's release (measured: +30 to +50 us at
// the median with one client); four gained nothing over two at 64 clients.
constexpr size_t kBatchesInFlight = 2;

std::chrono::steady_clock::duration ToSteady(absl::Duration d) {
  return std::chrono::nanoseconds(absl::ToInt64Nanoseconds(d));
}

// The links of one io_context. Registered after the link's socket and timer made the loop's
// reactor, so the io_context shuts it down first, while the reactor still works.
class LinkService final : public asio::execution_context::service {
 public:
  using key_type = LinkService;
  static asio::execution_context::id id;

  explicit LinkService(asio::execution_context& context) : service(context) {}

  void Add(std::shared_ptr<RedisLink> link) {
    absl::MutexLock lock(&mu_);
    std::erase_if(links_, [](const std::shared_ptr<RedisLink>& l) { return l->closed(); });
    links_.push_back(std::move(link));
  }

 private:
  void shutdown() override {
    std::vector<std::shared_ptr<RedisLink>> links;
    {
      absl::MutexLock lock(&mu_);
      links.swap(links_);
    }
    for (const std::shared_ptr<RedisLink>& link : links) {
      if (!link->closed()) link->Close("the event loop is stopping");
    }
  }

  absl::Mutex mu_;
  std::vector<std::shared_ptr<RedisLink>> links_ ABSL_GUARDED_BY(mu_);
};

asio::execution_context::id LinkService::id;

// `text` from Redis (an error's message) as a log line may quote it: controls and bytes outside
// ASCII escaped, at most 200 bytes, so that a server cannot write lines of its own into pillar's.
std::string Printable(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && out.size() < 200; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(char(c));
    } else {
      StrAppend(&out, "\\x", Hex(c, 2));
    }
  }
  return out;
}

std::vector<std::string> Shas(const std::vector<std::string>& scripts) {
  std::vector<std::string> shas;
  for (const std::string& script : scripts) shas.push_back(HexEncode(Sha1(script)));
  return shas;
}

}  // namespace

RedisLinkGroup::RedisLinkGroup(RedisLinkOptions options, SecretString password)
    : options_(std::move(options)),
      password_(std::move(password)),
      script_shas_(Shas(options_.scripts)) {}

bool RedisLinkGroup::up() const { return up_.load(std::memory_order_acquire); }

void RedisLinkGroup::LinkUp(bool was_down) {
  absl::MutexLock lock(&mu_);
  if (was_down) --links_down_;
  ++links_up_;
  Report();
}

void RedisLinkGroup::LinkDown(bool was_up, std::string_view why) {
  absl::MutexLock lock(&mu_);
  if (was_up) --links_up_;
  ++links_down_;
  last_error_ = std::string(why);
  Report();
}

void RedisLinkGroup::LinkClosed(bool was_up, bool was_down) {
  // Counted out, but reported on by the next link that connects or fails: a link closed at
  // shutdown says nothing of whether Redis answers.
  absl::MutexLock lock(&mu_);
  if (was_up) --links_up_;
  if (was_down) --links_down_;
}

void RedisLinkGroup::Report() {
  const bool up = links_up_ > 0 && links_down_ == 0;
  up_.store(up, std::memory_order_release);
  if (options_.up_gauge != nullptr) options_.up_gauge->Set(up ? 1 : 0);
  // One line per change between reachable and not (a link that is merely connecting, or closed,
  // changes nothing to say).
  const Reported now = up ? Reported::kUp : links_down_ > 0 ? Reported::kDown : reported_;
  if (now == reported_) return;
  reported_ = now;
  if (up) {
    std::fprintf(stderr, "pillar: limit store redis %s:%d reachable\n", options_.host.c_str(),
                 options_.port);
  } else {
    std::fprintf(stderr, "pillar: limit store redis %s:%d unreachable: %s\n", options_.host.c_str(),
                 options_.port, last_error_.c_str());
  }
}

std::shared_ptr<RedisLink> RedisLink::Open(asio::io_context& loop,
                                           std::shared_ptr<RedisLinkGroup> group) {
  std::shared_ptr<RedisLink> link(new RedisLink(loop, std::move(group)));
  asio::use_service<LinkService>(loop).Add(link);
  return link;
}

RedisLink::RedisLink(asio::io_context& loop, std::shared_ptr<RedisLinkGroup> group)
    : loop_(loop),
      group_(std::move(group)),
      socket_(std::make_unique<asio::ip::tcp::socket>(loop)),
      resolver_(std::make_unique<asio::ip::tcp::resolver>(loop)),
      timer_(std::make_unique<asio::steady_timer>(loop)) {}

RedisLink::~RedisLink() {
  WipeString(writing_);
  WipeString(handshake_);
}

void RedisLink::Send(std::string_view command, Reply reply, Pending pending) {
  commands_.fetch_add(1, std::memory_order_relaxed);
  if (state_ == State::kClosed) {
    if (reply) std::move(reply)(*this, absl::UnavailableError("redis: the connection is closed"));
    return;
  }
  if (state_ == State::kIdle ||
      (state_ == State::kDown && std::chrono::steady_clock::now() >= retry_at_)) {
    Connect();
  }
  if (state_ == State::kDown) {  // failing fast until the next attempt
    if (reply) std::move(reply)(*this, absl::UnavailableError("limit store redis unreachable"));
    return;
  }
  if (pending == Pending::kCapped && waiting_.size() >= group_->options().max_pending) {
    if (reply) std::move(reply)(*this, absl::UnavailableError("redis: too many pending"));
    return;
  }
  Enqueue(command, std::move(reply));
}

void RedisLink::ConnectNow() {
  if (state_ == State::kIdle) Connect();
}

void RedisLink::Enqueue(std::string_view command, Reply reply) {
  out_.append(command);
  ++unwritten_;
  waiting_.push_back(
      {std::chrono::steady_clock::now() + ToSteady(group_->options().timeout), std::move(reply)});
  ArmTimer();
  ScheduleFlush();
}

void RedisLink::Connect() {
  const RedisLinkOptions& options = group_->options();
  ++generation_;
  state_ = State::kConnecting;
  connect_deadline_ = std::chrono::steady_clock::now() + ToSteady(options.timeout);
  reader_ = std::make_unique<ReplyReader>();
  QueueHandshake();
  ArmTimer();
  const uint64_t generation = generation_;
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options.host, ec);
  if (!ec) {
    socket_->async_connect(
        {address, uint16_t(options.port)},
        [self = shared_from_this(), generation](const boost::system::error_code& error) {
          self->OnConnected(generation, error);
        });
    return;
  }
  resolver_->async_resolve(
      options.host, StrCat(options.port),
      [self = shared_from_this(), generation](const boost::system::error_code& error,
                                              asio::ip::tcp::resolver::results_type results) {
        if (generation != self->generation_ || self->state_ != State::kConnecting) return;
        if (error) return self->Fail(StrCat("cannot resolve: ", error.message()));
        asio::async_connect(
            *self->socket_, results,
            [self, generation](const boost::system::error_code& e, const asio::ip::tcp::endpoint&) {
              self->OnConnected(generation, e);
            });
      });
}

void RedisLink::QueueHandshake() {
  const std::vector<std::string>& scripts = group_->options().scripts;
  const std::vector<std::string>& shas = group_->script_shas();
  // Ahead of the commands that wait (queued before a reconnection), as it is written first.
  std::vector<Waiting> entries;
  const auto wait_for = [&](Reply reply) {
    entries.push_back(
        {std::chrono::steady_clock::now() + ToSteady(group_->options().timeout), std::move(reply)});
  };
  std::vector<std::string> loads;
  size_t size = 0;
  for (const std::string& script : scripts) {
    loads.push_back(RespCommand().Add("SCRIPT").Add("LOAD").Add(script).Take());
    size += loads.back().size();
  }
  // One buffer, sized first: the password is never in a buffer that grows (and is freed
  // unwiped), and is wiped once written (review helper-54 found it in freed blocks).
  WipeString(handshake_);
  const std::string_view password = group_->password().view();
  const std::string length = StrCat(password.size());
  handshake_.reserve(size + (password.empty() ? 0 : 20 + length.size() + password.size()));
  if (!password.empty()) {
    StrAppend(&handshake_, "*2\r\n$4\r\nAUTH\r\n$", length, "\r\n", password, "\r\n");
    wait_for([](RedisLink& link, absl::StatusOr<const redisReply*> reply) {
      const bool ok = reply.ok() && (*reply)->type == REDIS_REPLY_STATUS &&
                      std::string_view((*reply)->str, (*reply)->len) == "OK";
      if (reply.ok() && !ok) link.Fail("AUTH refused");
    });
  }
  for (size_t i = 0; i < loads.size(); ++i) {
    handshake_ += loads[i];
    wait_for([sha = shas[i]](RedisLink& link, absl::StatusOr<const redisReply*> reply) {
      if (!reply.ok()) return;
      const redisReply* r = *reply;
      if (r->type != REDIS_REPLY_STRING || std::string_view(r->str, r->len) != sha) {
        return link.Fail(r->type == REDIS_REPLY_ERROR
                             ? StrCat("SCRIPT LOAD: ", std::string_view(r->str, r->len))
                             : std::string("SCRIPT LOAD: digest mismatch"));
      }
    });
  }
  handshake_commands_ = entries.size();
  waiting_.insert(waiting_.begin(), std::make_move_iterator(entries.begin()),
                  std::make_move_iterator(entries.end()));
}

void RedisLink::SendAfter(std::chrono::steady_clock::duration delay, std::string command,
                          Reply reply, Pending pending) {
  auto timer = std::make_shared<asio::steady_timer>(loop_, delay);
  timer->async_wait([weak = weak_from_this(), timer, command = std::move(command),
                     reply = std::move(reply),
                     pending](const boost::system::error_code& error) mutable {
    std::shared_ptr<RedisLink> link = weak.lock();
    if (error || link == nullptr) return;  // the loop stopped, or the limiter went
    link->Send(command, std::move(reply), pending);
  });
}

void RedisLink::SendOnReconnect(std::string command) {
  if (state_ == State::kClosed || deferred_.size() >= kMaxDeferred) return;
  deferred_.push_back(std::move(command));
}

void RedisLink::MarkUp() {
  state_ = State::kUp;
  // Ahead of the commands queued while connecting (review helper-55: behind them, an admission
  // found the slots these release still taken). Each is saved again if this connection fails
  // before it is answered.
  std::string first;
  const auto deadline = std::chrono::steady_clock::now() + ToSteady(group_->options().timeout);
  for (size_t i = deferred_.size(); i-- > 0;) {
    first.insert(0, deferred_[i]);
    waiting_.push_front(
        {deadline, [command = std::move(deferred_[i])](
                       RedisLink& link, absl::StatusOr<const redisReply*> answer) mutable {
           if (!answer.ok()) link.SendOnReconnect(std::move(command));
         }});
  }
  unwritten_ += deferred_.size();
  out_.insert(0, first);
  deferred_.clear();
  if (!counted_up_) {
    const bool was_down = counted_down_;
    counted_down_ = false;
    counted_up_ = true;
    group_->LinkUp(was_down);
  }
  ScheduleFlush();  // the requests' commands, held back while the handshake was answered
}

void RedisLink::OnConnected(uint64_t generation, const boost::system::error_code& error) {
  if (generation != generation_ || state_ != State::kConnecting) return;
  if (error) return Fail(StrCat("cannot connect: ", error.message()));
  boost::system::error_code ignored;
  socket_->set_option(asio::ip::tcp::no_delay(true), ignored);  // writes are batched here
  state_ = State::kHandshake;
  StartRead();
  if (handshake_commands_ == 0) return MarkUp();
  ScheduleFlush();
}

bool RedisLink::WriteDue() const {
  if (writing_in_flight_ || batches_.size() >= kBatchesInFlight) return false;
  // The handshake goes alone: a request's command is not written before AUTH and the scripts
  // are answered, so that a refused AUTH lets no command run (review helper-54: with a password
  // Redis did not need, the commands behind a refused AUTH took quota and slots).
  if (state_ == State::kHandshake) return handshake_commands_ > 0 && !handshake_.empty();
  return state_ == State::kUp && unwritten_ > 0;
}

void RedisLink::ScheduleFlush() {
  if (flush_posted_ || !WriteDue()) return;
  // Posted, not written now: the commands of every request this turn of the loop handles leave
  // together. And only when fewer than kBatchesInFlight writes await their replies: what comes
  // meanwhile waits and leaves as the next batch, so under load a batch holds everything one
  // round trip gathered, and Redis reads it at once rather than one small write at a time.
  flush_posted_ = true;
  asio::post(loop_, [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->Flush();
  });
}

void RedisLink::Flush() {
  if (!WriteDue()) return;
  if (state_ == State::kHandshake) {
    writing_.swap(handshake_);
    wipe_after_write_ = true;
    batches_.push_back(handshake_commands_);
  } else {
    writing_.swap(out_);
    batches_.push_back(unwritten_);
    unwritten_ = 0;
  }
  writing_in_flight_ = true;
  writes_.fetch_add(1, std::memory_order_relaxed);
  asio::async_write(
      *socket_, asio::buffer(writing_),
      [self = shared_from_this(), generation = generation_](
          const boost::system::error_code& error, size_t) { self->OnWritten(generation, error); });
}

void RedisLink::OnWritten(uint64_t generation, const boost::system::error_code& error) {
  writing_in_flight_ = false;
  if (wipe_after_write_) {
    WipeString(writing_);
    wipe_after_write_ = false;
  }
  writing_.clear();
  if (state_ == State::kClosed) return;
  // An older connection's write: that connection is gone, this one may have waited for it.
  if (error && generation == generation_) return Fail(StrCat("write failed: ", error.message()));
  ScheduleFlush();
}

void RedisLink::StartRead() {
  if (reading_) return;  // the previous connection's read has not come back yet
  reading_ = true;
  socket_->async_read_some(asio::buffer(read_buffer_),
                           [self = shared_from_this(), generation = generation_](
                               const boost::system::error_code& error, size_t bytes) {
                             self->reading_ = false;
                             self->OnRead(generation, error, bytes);
                           });
}

void RedisLink::OnRead(uint64_t generation, const boost::system::error_code& error, size_t bytes) {
  if (state_ == State::kClosed) return;
  if (generation != generation_) {  // a new connection is waiting for this buffer
    if (state_ == State::kHandshake || state_ == State::kUp) StartRead();
    return;
  }
  if (error && state_ == State::kUp && batches_.empty()) {
    // Closed with nothing written awaiting a reply (Redis's idle `timeout`, a proxy's idle
    // limit): not an outage by itself. Connect again at once, keeping the commands not yet
    // written: only a failure to connect says that Redis is down (and says it now, not at the
    // next request: review helper-55 found a Redis that died while pillar was idle unnoticed).
    return Reconnect();
  }
  if (error) {
    return Fail(error == asio::error::eof ? std::string("connection closed by redis")
                                          : StrCat("read failed: ", error.message()));
  }
  if (absl::Status fed = reader_->Feed(std::string_view(read_buffer_.data(), bytes)); !fed.ok()) {
    return Fail(ToStd(fed.message()));
  }
  if (!DeliverReplies(generation)) return;
  StartRead();
}

bool RedisLink::DeliverReplies(uint64_t generation) {
  while (true) {
    absl::StatusOr<ReplyReader::Reply> reply = reader_->Next();
    if (!reply.ok()) {
      Fail(ToStd(reply.status().message()));
      return false;
    }
    if (*reply == nullptr) {
      ScheduleFlush();  // the batch may be answered in full
      return true;
    }
    if (batches_.empty()) {  // a reply to a command not yet written, or to none
      Fail("a reply to no command");
      return false;
    }
    if (--batches_.front() == 0) batches_.pop_front();
    Reply callback = std::move(waiting_.front().reply);
    waiting_.pop_front();
    if (callback) std::move(callback)(*this, reply->get());
    if (generation != generation_ || state_ == State::kClosed || state_ == State::kDown) {
      return false;  // the callback dropped the connection (AUTH refused, a bad script load)
    }
    if (state_ == State::kHandshake && --handshake_commands_ == 0) MarkUp();
  }
}

void RedisLink::Reconnect() {
  boost::system::error_code ignored;
  socket_->close(ignored);
  Connect();  // still counted up: nothing says otherwise yet
}

void RedisLink::Fail(std::string_view why_view) {
  if (state_ == State::kClosed || state_ == State::kDown) return;
  // A copy (it may point into what is freed below), printable: it may quote Redis's words.
  const std::string why = Printable(why_view);
  ++generation_;
  boost::system::error_code ignored;
  socket_->close(ignored);
  resolver_->cancel();
  out_.clear();
  WipeString(handshake_);
  handshake_commands_ = 0;
  unwritten_ = 0;
  size_t written = 0;  // the waiting commands that were written: the first ones
  for (size_t batch : batches_) written += batch;
  batches_.clear();
  wipe_after_write_ = wipe_after_write_ && writing_in_flight_;
  state_ = State::kDown;
  retry_at_ = std::chrono::steady_clock::now() + ToSteady(group_->options().retry_interval);
  const bool was_up = counted_up_;
  if (!counted_down_) {
    counted_up_ = false;
    counted_down_ = true;
    group_->LinkDown(was_up, why);
  }
  FailWaiting(StrCat("redis: ", why), written);
  ArmTimer();  // for the next attempt
}

void RedisLink::FailWaiting(std::string_view why, size_t written) {
  std::deque<Waiting> waiting;
  waiting.swap(waiting_);
  for (size_t i = 0; i < waiting.size(); ++i) {
    failing_written_ = i < written;
    if (waiting[i].reply) std::move(waiting[i].reply)(*this, absl::UnavailableError(ToAbsl(why)));
  }
  failing_written_ = false;
}

void RedisLink::Close(std::string_view why_view) {
  if (state_ == State::kClosed) return;
  const std::string why(why_view);
  state_ = State::kClosed;
  ++generation_;
  group_->LinkClosed(counted_up_, counted_down_);
  counted_up_ = counted_down_ = false;
  // Destroying them cancels what is in flight; those handlers hold this link and find it closed.
  socket_.reset();
  resolver_.reset();
  timer_.reset();
  timer_armed_ = false;
  out_.clear();
  WipeString(handshake_);
  handshake_commands_ = 0;
  unwritten_ = 0;
  batches_.clear();
  closed_.store(true, std::memory_order_release);
  FailWaiting(StrCat("redis: ", why), /*written=*/0);  // nothing runs once the loop is gone
}

void RedisLink::ArmTimer() {
  if (timer_armed_ || state_ == State::kClosed || state_ == State::kIdle) return;
  SteadyTime at;
  if (state_ == State::kDown) {
    at = retry_at_;
  } else if (state_ == State::kConnecting) {
    at = connect_deadline_;
  } else if (!waiting_.empty()) {
    at = waiting_.front().deadline;
  } else {
    return;  // up and idle: nothing to time
  }
  timer_armed_ = true;
  timer_->expires_at(at);
  timer_->async_wait([self = shared_from_this()](const boost::system::error_code& error) {
    self->OnTimer(error);
  });
}

void RedisLink::OnTimer(const boost::system::error_code& error) {
  if (state_ == State::kClosed) return;
  timer_armed_ = false;
  const SteadyTime now = std::chrono::steady_clock::now();
  if (state_ == State::kDown) {
    if (now >= retry_at_) Connect();
  } else if (state_ == State::kConnecting && now >= connect_deadline_) {
    Fail("no connection within the timeout");
  } else if (!waiting_.empty() && now >= waiting_.front().deadline) {
    Fail("no reply within the timeout");
  }
  (void)error;  // a cancelled wait is rearmed like an expired one: the checks above decide
  ArmTimer();
}

}  // namespace pillar::limits
