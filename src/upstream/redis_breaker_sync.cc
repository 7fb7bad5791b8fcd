#include "upstream/redis_breaker_sync.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar::upstream {
namespace {

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One command from arguments (binary-safe); null when the connection failed.
redisReply* Command(redisContext* c, const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), lens.data()));
}

// AUTH, written on the socket from a buffer of its own, sized first and wiped: hiredis would
// format the password into its output buffer and free it unwiped (review helper-55). The reply
// is read through hiredis, which has nothing to write. True when Redis answers +OK.
bool Authenticate(redisContext* c, const SecretString& password) {
  const std::string length = StrCat(password.size());
  std::string command;
  command.reserve(20 + length.size() + password.size());
  StrAppend(&command, "*2\r\n$4\r\nAUTH\r\n$", length, "\r\n", password.view(), "\r\n");
  const size_t total = command.size();
  size_t sent = 0;
  while (sent < total) {
    const ssize_t n = ::send(c->fd, command.data() + sent, command.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += size_t(n);
  }
  WipeString(command);
  if (sent < total) return false;
  void* raw = nullptr;
  if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) return false;
  auto* reply = static_cast<redisReply*>(raw);
  const bool ok =
      reply->type == REDIS_REPLY_STATUS && std::string_view(reply->str, reply->len) == "OK";
  freeReplyObject(reply);
  return ok;
}

// "<until>\t<instance>" or "<instance>\t<until>\t<name>": the fields of a trip.
std::vector<std::string_view> Fields(std::string_view text) { return Split(text, '\t'); }

}  // namespace

RedisBreakerSync::RedisBreakerSync(RedisBreakerSyncOptions options)
    : options_(std::move(options)),
      instance_(HexEncode(RandomBytes(8))),
      channel_(StrCat(options_.key_prefix, ":breakers")) {
  if (::pipe(wake_pipe_) != 0) wake_pipe_[0] = wake_pipe_[1] = -1;
  thread_ = std::thread([this] {
    NameThisThread("breaker-sync");
    Run();
  });
}

RedisBreakerSync::~RedisBreakerSync() {
  stop_ = true;
  Wake();
  thread_.join();
  Disconnect("");
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void RedisBreakerSync::Wake() {
  if (wake_pipe_[1] < 0) return;
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_pipe_[1], &byte, 1);
}

void RedisBreakerSync::Publish(const std::string& name, int64_t until_unix_ms) {
  {
    absl::MutexLock lock(&mu_);
    if (publishes_.size() >= 4096) publishes_.pop_front();  // Redis away: keep the latest
    publishes_.emplace_back(name, until_unix_ms);
  }
  Wake();
}

uint64_t RedisBreakerSync::Subscribe(std::string name, OnTrip on_trip) {
  uint64_t token;
  {
    absl::MutexLock lock(&mu_);
    token = next_token_++;
    subscriptions_[token] = Subscription{std::move(name), std::move(on_trip)};
    resubscribed_ = true;
  }
  Wake();
  return token;
}

void RedisBreakerSync::Unsubscribe(uint64_t token) {
  {
    absl::MutexLock lock(&mu_);
    subscriptions_.erase(token);
  }
  absl::MutexLock wait_for_dispatch(&dispatch_mu_);
}

bool RedisBreakerSync::Connect() {
  timeval tv{};
  tv.tv_sec = options_.timeout_ms / 1000;
  tv.tv_usec = (options_.timeout_ms % 1000) * 1000;
  std::string error;
  for (redisContext** slot : {&subscriber_, &commands_}) {
    redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port, tv);
    *slot = c;
    if (c == nullptr || c->err) {
      error = c == nullptr ? "out of memory" : c->errstr;
      break;
    }
    redisSetTimeout(c, tv);
    if (!options_.password.empty() && !Authenticate(c, options_.password)) {
      error = "AUTH refused";
      break;
    }
  }
  if (error.empty()) {
    redisReply* r = Command(subscriber_, {"SUBSCRIBE", channel_});
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) error = "SUBSCRIBE failed";
    if (r != nullptr) freeReplyObject(r);
  }
  if (!error.empty()) {
    Disconnect(error);
    return false;
  }
  if (!up_) {
    std::fprintf(stderr, "pillar: breaker trips shared through redis %s:%d again\n",
                 options_.host.c_str(), options_.port);
  }
  up_ = true;
  return true;
}

void RedisBreakerSync::Disconnect(std::string_view why_view) {
  const std::string why(why_view);  // it may point into a context freed below
  for (redisContext** slot : {&subscriber_, &commands_}) {
    if (*slot != nullptr) redisFree(*slot);
    *slot = nullptr;
  }
  if (!why.empty() && up_) {
    std::fprintf(stderr,
                 "pillar: breaker trips are not shared while redis %s:%d is unreachable (%s)\n",
                 options_.host.c_str(), options_.port, why.c_str());
  }
  if (!why.empty()) up_ = false;
}

void RedisBreakerSync::Run() {
  int64_t backoff_ms = 100;
  bool catch_up = true;
  while (!stop_) {
    if (subscriber_ == nullptr) {
      if (!Connect()) {
        pollfd wake{wake_pipe_[0], POLLIN, 0};
        ::poll(&wake, 1, int(backoff_ms));
        backoff_ms = std::min<int64_t>(backoff_ms * 2, 5'000);
        continue;
      }
      backoff_ms = 100;
      catch_up = true;
    }
    {
      absl::MutexLock lock(&mu_);
      catch_up = catch_up || std::exchange(resubscribed_, false);
    }
    if (catch_up) {
      catch_up = false;
      CatchUp();
    }
    SendPublishes();
    if (subscriber_ == nullptr) continue;
    pollfd fds[2] = {{subscriber_->fd, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, 1000) <= 0) continue;
    if (fds[1].revents != 0) {
      char buffer[64];
      [[maybe_unused]] ssize_t n = ::read(wake_pipe_[0], buffer, sizeof buffer);
    }
    if (fds[0].revents != 0) ReadMessages();
  }
}

void RedisBreakerSync::CatchUp() {
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [token, subscription] : subscriptions_) names.push_back(subscription.name);
  }
  for (const std::string& name : names) {
    if (commands_ == nullptr) return;
    redisReply* r = Command(commands_, {"GET", StrCat(options_.key_prefix, ":breaker:", name)});
    if (r == nullptr) return Disconnect(commands_->errstr);
    if (r->type == REDIS_REPLY_STRING) {
      const std::vector<std::string_view> fields = Fields(std::string_view(r->str, r->len));
      int64_t until = 0;
      if (fields.size() == 2 && ParseInt(fields[0], &until) && fields[1] != instance_ &&
          until > UnixMillis()) {
        Dispatch(name, until);
      }
    }
    freeReplyObject(r);
  }
}

void RedisBreakerSync::SendPublishes() {
  std::deque<std::pair<std::string, int64_t>> batch;
  {
    absl::MutexLock lock(&mu_);
    if (commands_ == nullptr) return;  // kept for when Redis is back
    batch.swap(publishes_);
  }
  for (const auto& [name, until] : batch) {
    const int64_t ttl = until - UnixMillis();
    if (ttl <= 0) continue;
    redisReply* set = Command(commands_, {"SET", StrCat(options_.key_prefix, ":breaker:", name),
                                          StrCat(until, "\t", instance_), "PX", StrCat(ttl)});
    if (set == nullptr) return Disconnect(commands_->errstr);
    freeReplyObject(set);
    redisReply* publish =
        Command(commands_, {"PUBLISH", channel_, StrCat(instance_, "\t", until, "\t", name)});
    if (publish == nullptr) return Disconnect(commands_->errstr);
    freeReplyObject(publish);
  }
}

void RedisBreakerSync::ReadMessages() {
  if (redisBufferRead(subscriber_) != REDIS_OK) return Disconnect(subscriber_->errstr);
  void* raw = nullptr;
  while (subscriber_ != nullptr && redisGetReplyFromReader(subscriber_, &raw) == REDIS_OK &&
         raw != nullptr) {
    auto* reply = static_cast<redisReply*>(raw);
    // ["message", channel, "<instance>\t<until>\t<name>"]
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
        reply->element[2]->type == REDIS_REPLY_STRING) {
      const std::string_view payload(reply->element[2]->str, reply->element[2]->len);
      const size_t first = payload.find('\t');
      const size_t second = payload.find('\t', first == std::string_view::npos ? 0 : first + 1);
      int64_t until = 0;
      if (first != std::string_view::npos && second != std::string_view::npos &&
          payload.substr(0, first) != instance_ &&
          ParseInt(payload.substr(first + 1, second - first - 1), &until)) {
        Dispatch(payload.substr(second + 1), until);
      }
    }
    freeReplyObject(reply);
    raw = nullptr;
  }
}

void RedisBreakerSync::Dispatch(std::string_view name, int64_t until_unix_ms) {
  absl::MutexLock dispatching(&dispatch_mu_);
  std::vector<OnTrip> targets;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [token, subscription] : subscriptions_) {
      if (subscription.name == name) targets.push_back(subscription.on_trip);
    }
  }
  for (const OnTrip& on_trip : targets) on_trip(until_unix_ms);
}

}  // namespace pillar::upstream
