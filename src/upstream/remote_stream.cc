// RemoteRunner: a streamed answer relayed from an upstream to the client (remote_state.h says
// how the files divide).
#include <algorithm>
#include <boost/asio/post.hpp>

#include "common/strings.h"
#include "upstream/remote_state.h"

namespace pillar::upstream {

namespace {

int64_t Nanos(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

}  // namespace

StreamRelay::StreamRelay(std::shared_ptr<Call> call, asio::io_context& lane,
                         absl::AnyInvocable<void() &&> done_taken)
    : call_(std::move(call)),
      lane_(lane),
      done_taken_(std::move(done_taken)),
      sent_at_(Clock::now()),
      // The connection's earlier answers are written by now: what its meter says is theirs.
      socket_wait_at_sent_ns_(call_->events->ClientWaitNanos(Nanos(sent_at_))) {}

Clock::duration StreamRelay::client_time(Clock::time_point now) const {
  if (socket_wait_at_sent_ns_ >= 0) {
    return std::chrono::nanoseconds(call_->events->ClientWaitNanos(Nanos(now)) -
                                    socket_wait_at_sent_ns_);
  }
  return client_time_ + (awaiting_client_ ? ClientsShare(now - handed_at_) : Clock::duration{});
}

void StreamRelay::OnBody(std::string piece, absl::AnyInvocable<void(bool) &&> more) {
  // Once the client took [DONE] its call is complete, but the body is read to its end: how it
  // ends (at once, late, cut, more events) is the endpoint's record.
  if (cancelled_ || !error_.empty() || (call_->completed && !delivered_done_)) {
    return std::move(more)(false);
  }
  absl::Status read = reader_.Feed(piece, [this](const protocol::SseEvent& event) { Take(event); });
  if (!read.ok() && error_.empty()) error_ = StrCat("the stream's framing: ", read.message());
  // What came with an error is dropped, unless [DONE] came before it (in the same piece: how
  // the upstream's writes were split must not decide; review helper-101): the client is owed
  // the events up to [DONE], and the body stops after them.
  if (!error_.empty() && !done_) return std::move(more)(false);
  Forward(std::move(more));
}

// One event of the upstream's stream, checked and queued for the client.
void StreamRelay::Take(const protocol::SseEvent& event) {
  if (!error_.empty()) return;
  if (done_) {
    error_ = "the stream went on after [DONE]";
    return;
  }
  if (event.data == "[DONE]") {
    done_ = true;
    // Read only once the client took every event before it: none is with the client now.
    done_at_ = Clock::now();
    handed_time_at_done_ = handed_time_;
    queue_.emplace_back(runtime::EventKind::kDone, std::string(protocol::kDoneEvent));
    return;
  }
  absl::StatusOr<protocol::StreamChunk> chunk = protocol::CheckStreamChunk(event.data);
  if (!chunk.ok()) {
    error_ = std::string(chunk.status().message());
    return;
  }
  if (chunk->usage) {
    usage_ = *chunk->usage;
    usage_reported_ = true;
    call_->events->Usage(usage_);  // before the client may be found gone
  }
  // A chunk sent over several "data:" lines arrives joined by line breaks, which can only be
  // blanks between its JSON tokens (it parsed): they become spaces, so that it goes out as one
  // line and the client's reader frames it as the upstream did.
  std::string out = StrCat("data: ", event.data, "\n\n");
  std::replace_if(
      out.begin() + 6, out.end() - 2, [](char c) { return c == '\n' || c == '\r'; }, ' ');
  queue_.emplace_back(chunk->usage_only ? runtime::EventKind::kUsage : runtime::EventKind::kChunk,
                      std::move(out));
}

// Hands the queued events on one at a time; once the client took the last, the connection
// reads on.
void StreamRelay::Forward(absl::AnyInvocable<void(bool) &&> more) {
  // Its caller was told (but for [DONE] taken): nobody takes more.
  if (call_->completed && !delivered_done_) return std::move(more)(false);
  if (queue_.empty()) return std::move(more)(error_.empty());
  const runtime::EventKind kind = queue_.front().first;  // named: a lambda captures it below
  std::string event = std::move(queue_.front().second);
  queue_.pop_front();
  call_->committed.store(true);
  awaiting_client_ = true;
  handed_at_ = Clock::now();
  call_->events->Event(
      kind, std::move(event),
      [self = shared_from_this(), more = std::move(more), kind](bool taken) mutable {
        // On the call's lane, where the relay and its connection live.
        asio::post(self->lane_, [self, more = std::move(more), taken, kind]() mutable {
          self->awaiting_client_ = false;
          const Clock::duration waited = Clock::now() - self->handed_at_;
          self->handed_time_ += waited;
          self->client_time_ += ClientsShare(waited);
          if (!taken) {
            self->cancelled_ = true;
            return std::move(more)(false);
          }
          if (kind == runtime::EventKind::kDone) {
            self->delivered_done_ = true;
            if (self->done_taken_) std::move(self->done_taken_)();
          }
          self->Forward(std::move(more));
        });
      });
}

std::shared_ptr<StreamRelay> RemoteRunner::State::RelayFor(
    const std::shared_ptr<Call>& call, const std::shared_ptr<Attempt>& attempt) {
  // Held weakly: the attempt holds the relay, and the runner may be gone by then.
  return std::make_shared<StreamRelay>(
      call, *lanes[call->lane],
      [weak_self = weak_from_this(), call, weak_attempt = std::weak_ptr<Attempt>(attempt)] {
        std::shared_ptr<State> self = weak_self.lock();
        std::shared_ptr<Attempt> attempt = weak_attempt.lock();
        if (self == nullptr || attempt == nullptr) return;
        absl::MutexLock lock(&self->mu);
        self->OnDoneTaken(call, attempt);
      });
}

void RemoteRunner::State::OnDoneTaken(std::shared_ptr<Call> call,
                                      const std::shared_ptr<Attempt>& attempt) {
  if (call->completed || attempt->cancelled) return;
  // Out of the call's attempts, so that completing the call does not cut it off: its body's
  // end is still to come, and OnReply or OnNoReply records it against the endpoint. Until then
  // the call keeps its place among those in flight (review helper-101: given back at once,
  // bodies held open after [DONE] took connections past `connections` without bound), and the
  // end has kBodyEndAfterDone to come before the connection is closed.
  std::erase(call->live, attempt);
  call->lingering = true;
  attempt->linger_timer = std::make_shared<asio::steady_timer>(*lanes[call->lane]);
  attempt->linger_timer->expires_after(kBodyEndAfterDone);
  attempt->linger_timer->async_wait(
      [weak_self = weak_from_this(),
       weak_attempt = std::weak_ptr<Attempt>(attempt)](const boost::system::error_code& error) {
        std::shared_ptr<State> self = weak_self.lock();
        std::shared_ptr<Attempt> attempt = weak_attempt.lock();
        if (error || self == nullptr || attempt == nullptr) return;
        absl::MutexLock lock(&self->mu);
        // Reset when the attempt ended: its connection may carry another call by now.
        if (attempt->linger_timer != nullptr) attempt->connection->Close();
      });
  Complete(*call, attempt->relay->Answer());
}

void RemoteRunner::State::EndLinger(Call& call, Attempt& attempt) {
  if (attempt.linger_timer == nullptr) return;  // not the attempt whose [DONE] was taken
  attempt.linger_timer->cancel();               // on the lane, where the attempt's end runs
  attempt.linger_timer.reset();
  call.lingering = false;
  NoteHeld(call);
  --in_flight;
  StartQueued();
}

// A streamed call whose 200 came to its end: whole, with [DONE], or cut short by the upstream.
void RemoteRunner::State::OnStreamEnd(std::shared_ptr<Call> call,
                                      std::shared_ptr<Attempt> attempt) {
  const StreamRelay& relay = *attempt->relay;
  if (!relay.error().empty() || !relay.done()) {
    return Unusable(std::move(call), attempt,
                    relay.error().empty() ? "the stream ended before [DONE]" : relay.error());
  }
  Answered(std::move(call), attempt, relay.Answer());
}

Clock::duration StreamRelay::UpstreamTime(Clock::time_point now) const {
  // The whole of the events' waits: pillar's share of them is not the upstream's time either.
  const Clock::duration took = done_
                                   ? done_at_ - sent_at_ - handed_time_at_done_
                                   : now - sent_at_ - handed_time_ -
                                         (awaiting_client_ ? now - handed_at_ : Clock::duration{});
  return std::max(took, Clock::duration::zero());
}

runtime::InferResult StreamRelay::Answer() const {
  runtime::InferResult result;
  result.usage = usage_;
  result.usage_reported = usage_reported_;
  return result;
}

}  // namespace pillar::upstream
