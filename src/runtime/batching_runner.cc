#include "runtime/batching_runner.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cmath>
#include <limits>
#include <utility>

#include "common/event_loop.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "runtime/admission.h"
#include "runtime/signature.h"

namespace pillar::runtime {
namespace {

// Same trailing dimensions (all but the batch) for every input: rows can be concatenated.
bool Compatible(const protocol::InferenceRequest& a, const protocol::InferenceRequest& b) {
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (!std::equal(a.inputs[i].shape.begin() + 1, a.inputs[i].shape.end(),
                    b.inputs[i].shape.begin() + 1, b.inputs[i].shape.end())) {
      return false;
    }
  }
  return true;
}

size_t InputBytes(const protocol::InferenceRequest& request) {
  size_t bytes = 0;
  for (const protocol::Tensor& t : request.inputs) bytes += t.data.size();
  return bytes;
}

}  // namespace

BatchingRunner::BatchingRunner(models::ModelConfig config,
                               std::vector<std::unique_ptr<Backend>> instances, Clock& clock,
                               std::shared_ptr<monitor::Histogram> batch_sizes)
    : config_(std::move(config)),
      instances_(std::move(instances)),
      clock_(clock),
      batch_sizes_(std::move(batch_sizes)) {
  {
    absl::MutexLock lock(&mu_);
    claimed_.assign(instances_.size(), false);
    shared_->mu.AssertHeld();  // mu_ is shared_->mu
    shared_->runner = this;
  }
  for (size_t i = 0; i < instances_.size(); ++i) {
    threads_.emplace_back([this, i] {
      NameThisThread(StrCat("instance-", i));
      InstanceLoop(i);
    });
  }
}

BatchingRunner::~BatchingRunner() {
  std::deque<Pending> abandoned;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    shared_->mu.AssertHeld();
    shared_->runner = nullptr;  // a call posted to a loop finds nothing to do
    abandoned.swap(queue_);
    queued_rows_ = 0;
    // An inline run is short by construction (MayRunInline, kInlineBudgetNs): waited for.
    mu_.Await(absl::Condition(
        +[](int* runs) { return *runs == 0; }, &inline_runs_));
  }
  cv_.SignalAll();
  for (const std::unique_ptr<Backend>& instance : instances_) instance->Interrupt();
  for (std::thread& t : threads_) t.join();
  for (Pending& p : abandoned) std::move(p.done)(absl::UnavailableError("model is unloading"));
}

int64_t BatchingRunner::EstimatedWaitNanos(size_t ahead) const {
  // The batches ahead of a new request, run by every instance in turn, then its own: a request
  // that cannot be answered before its deadline is refused now rather than computed for nobody.
  const double batches =
      std::ceil(double(ahead) / double(std::max<int64_t>(1, config_.max_batch_size)));
  return static_cast<int64_t>((batches / double(instances_.size()) + 1) * mean_batch_ns_);
}

void BatchingRunner::EndExecution(size_t instance, int64_t ns, size_t input_bytes) {
  absl::MutexLock lock(&mu_);
  // A batch that ran inline (claimed), or small enough to (measured before this batch moves the
  // cost per byte), and took kInlineOverrunNs or more stops inline runs for kSlowStopFactor
  // times as long. Judged by the claim too: another instance's batches move the cost per byte
  // while a slow one runs (review helper-119).
  if (ns >= kInlineOverrunNs && (claimed_[instance] || input_bytes <= InlineBytes())) {
    inline_stopped_until_ns_ =
        std::max(inline_stopped_until_ns_, clock_.MonotonicNanos() + kSlowStopFactor * ns);
  }
  // Moving averages over about the last ten batches, from the first one measured.
  const double byte_ns = double(ns) / double(std::max<size_t>(1, input_bytes));
  mean_byte_ns_ = batches_measured_ == 0 ? byte_ns : 0.9 * mean_byte_ns_ + 0.1 * byte_ns;
  mean_batch_ns_ = batches_measured_++ == 0 ? double(ns) : 0.9 * mean_batch_ns_ + 0.1 * double(ns);
  // Idle from now, before the answers go out: a caller that sends its next request as soon as
  // it has its answer finds the model idle (and may run it inline).
  --busy_instances_;
  if (claimed_[instance]) {
    claimed_[instance] = false;
    // Its own thread may take batches again: woken only when there is one to take. With the
    // queue empty it would wake, find nothing and sleep again, two futex calls and two context
    // switches a request (seen in perf); the next arrival wakes it as it queues (Infer).
    if (!queue_.empty()) cv_.SignalAll();
  }
}

int64_t BatchingRunner::EstimatedWaitSeconds() const {
  return std::max<int64_t>(1, (EstimatedWaitNanos(queue_.size()) + 999'999'999) / 1'000'000'000);
}

int64_t BatchingRunner::RetryAfter(const protocol::InferenceRequest& request, int64_t estimate_s) {
  if (batches_measured_ == 0) return estimate_s;
  // Rows a second at full batches: under the load that sheds, batches are full.
  const double per_second = double(instances_.size()) *
                            double(std::max<int64_t>(1, config_.max_batch_size)) * 1e9 /
                            std::max(1.0, mean_batch_ns_);
  return promises_.Promise(request.caller, request.principal, clock_.MonotonicNanos(), per_second,
                           estimate_s);
}

std::optional<absl::Status> BatchingRunner::Refusal(const protocol::InferenceRequest& request,
                                                    size_t ahead) {
  if (stopping_) return absl::UnavailableError("model is unloading");
  const int64_t limit = QueueLimit(request.priority, config_.batching.max_queue_size);
  if (static_cast<int64_t>(queue_.size()) >= limit) {
    if (limit < config_.batching.max_queue_size) {
      return Shed(StrCat("the model's queue is too full for ", PriorityName(request.priority),
                         "-priority requests (", queue_.size(), " of ",
                         config_.batching.max_queue_size, ")"),
                  RetryAfter(request, EstimatedWaitSeconds()));
    }
    return Shed(
        StrCat("the model's queue is full (", config_.batching.max_queue_size, " requests)"),
        RetryAfter(request, EstimatedWaitSeconds()));
  }
  // Only once a batch was measured (the prior says nothing of this model), and only with
  // requests ahead: one that would run at once is always taken, so that an estimate from a slow
  // spell long past cannot refuse everything, and its run refreshes the estimate.
  if (batches_measured_ > 0 && ahead > 0) {
    // Callers told to come back by then go ahead of it too.
    const int64_t now = clock_.MonotonicNanos();
    const int64_t wait_ns = EstimatedWaitNanos(
        ahead + size_t(promises_.PendingBefore(now + EstimatedWaitNanos(ahead))));
    if (MissesDeadline(wait_ns, now, request.deadline_ns)) {
      return ShedForDeadline(wait_ns, RetryAfter(request, CeilSeconds(wait_ns)));
    }
  }
  return std::nullopt;
}

void BatchingRunner::Infer(protocol::InferenceRequest request, InferCallback done) {
  absl::StatusOr<int64_t> rows = CheckRequest(config_, request);
  if (!rows.ok()) {
    std::move(done)(rows.status());
    return;
  }
  mu_.Lock();
  // A caller this queue told to come back, back at the time it was told, takes the place kept
  // for it: at the front of its class, past the class's share and the wait estimate.
  const bool promised = promises_.Redeem(request.caller, clock_.MonotonicNanos());
  // Ordered by class, first come first served within one: behind those of its class or higher
  // (a promised one: at the front of its class, behind the promised ones before it). Searched from
  // the back, where a request of the common class stops at once.
  auto place = queue_.end();
  while (place != queue_.begin()) {
    const Pending& before = *std::prev(place);
    const bool pass = before.request.priority > request.priority ||
                      (promised && before.request.priority == request.priority && !before.promised);
    if (!pass) break;
    --place;
  }
  if (std::optional<absl::Status> refused =
          promised && !stopping_ ? std::nullopt
                                 : Refusal(request, size_t(place - queue_.begin()))) {
    mu_.Unlock();
    std::move(done)(std::move(*refused));
    return;
  }
  Pending pending{std::move(request), std::move(done), *rows, clock_.MonotonicNanos(), promised};
  const int64_t gap = std::clamp<int64_t>(pending.enqueued_ns - last_arrival_ns_, 0, kMaxGapNs);
  mean_gap_ns_ = 0.9 * mean_gap_ns_ + 0.1 * double(gap);
  last_arrival_ns_ = pending.enqueued_ns;
  // On a loop's thread even a lone request waits for the turn's end, where it may run inline.
  boost::asio::io_context* loop = ThisThreadEventLoop();
  std::optional<size_t> instance;
  if (loop == nullptr) instance = InlineInstance(pending);
  if (instance) {
    if (pending.request.deadline_ns > 0 && pending.enqueued_ns >= pending.request.deadline_ns) {
      mu_.Unlock();  // as DropExpired answers it on an instance's thread
      std::move(pending.done)(
          absl::DeadlineExceededError("the caller's deadline passed before the model ran"));
      return;
    }
    std::vector<Pending> lone;
    lone.push_back(std::move(pending));
    RunInline(*instance, std::move(lone));
    mu_.Unlock();  // the last touch of this runner: the destructor may be waiting for the run
    return;
  }
  queued_rows_ += pending.rows;
  queue_.insert(place, std::move(pending));
  CallAfterThisTurn(loop);
}

class BatchingRunner::TurnEndCall {
 public:
  TurnEndCall(std::shared_ptr<Shared> shared, boost::asio::io_context* loop)
      : shared_(std::move(shared)), loop_(loop) {}
  TurnEndCall(TurnEndCall&&) = default;  // the moved-from one has no shared_: nothing to undo
  TurnEndCall& operator=(TurnEndCall&&) = delete;
  ~TurnEndCall() {
    if (shared_ == nullptr) return;
    {
      absl::MutexLock lock(&shared_->mu);
      std::erase(shared_->posted_to, loop_);
    }
    shared_->cv.SignalAll();
  }
  void operator()() { AtTurnEnd(*std::exchange(shared_, nullptr), loop_); }

 private:
  std::shared_ptr<Shared> shared_;  // null once run (or moved from)
  boost::asio::io_context* loop_;
};

void BatchingRunner::CallAfterThisTurn(boost::asio::io_context* loop) {
  if (loop == nullptr) {
    mu_.Unlock();
    // All: an instance waiting for its batch to fill must see every arrival, not just an idle
    // one.
    cv_.SignalAll();
    return;
  }
  // A full batch, or half the queue (where low-priority requests start being shed), is called
  // now rather than at the turn's end (review helper-118: a turn of more requests than a class's
  // share of the queue had an idle model shed some).
  if (queued_rows_ >= std::max<int64_t>(1, config_.max_batch_size) ||
      int64_t(queue_.size()) * 2 >= config_.batching.max_queue_size) {
    RunOrWake();
    mu_.Unlock();
    return;
  }
  // Otherwise after the handlers this turn of the loop had ready: the other requests whose bytes
  // came with this one. At 64 connections to the demo's model, woken at each arrival, batches
  // held 2.5 rows, each paying the model's fixed cost (about 20 us of LibTorch's) and two thread
  // hand-offs.
  shared_->mu.AssertHeld();
  std::vector<boost::asio::io_context*>& posted_to = shared_->posted_to;
  if (std::find(posted_to.begin(), posted_to.end(), loop) != posted_to.end()) {
    mu_.Unlock();
    return;
  }
  posted_to.push_back(loop);
  std::shared_ptr<Shared> shared = shared_;  // copied before the runner may go
  mu_.Unlock();
  boost::asio::post(*loop, TurnEndCall(std::move(shared), loop));
}

void BatchingRunner::AtTurnEnd(Shared& shared, boost::asio::io_context* loop) {
  absl::MutexLock lock(&shared.mu);
  std::erase(shared.posted_to, loop);
  if (shared.runner == nullptr) return;  // being destroyed: it failed what was queued
  shared.runner->mu_.AssertHeld();       // the same mutex
  shared.runner->RunOrWake();
}

void BatchingRunner::RunOrWake() {
  if (queue_.empty()) return;  // taken by an instance's thread meanwhile
  if (std::optional<size_t> instance = IdleFastInstance()) {
    std::vector<Pending> batch = TakeBatch(InlineBytes());
    if (!batch.empty()) {
      // What is left (past a batch, or of another shape) for the other instances' threads.
      if (!queue_.empty()) cv_.SignalAll();
      return RunInline(*instance, std::move(batch));
    }
  }
  cv_.SignalAll();
}

std::optional<size_t> BatchingRunner::IdleFastInstance() const {
  // Not when the operator asked every request to wait for company (adaptive_delay off).
  if (stopping_ || !config_.batching.adaptive_delay || busy_instances_ > 0 ||
      batches_measured_ < kMeasuredBeforeInline || mean_batch_ns_ > double(kInlineBudgetNs) ||
      (inline_stopped_until_ns_ > 0 && clock_.MonotonicNanos() < inline_stopped_until_ns_)) {
    return std::nullopt;
  }
  for (size_t i = 0; i < instances_.size(); ++i) {
    if (!claimed_[i] && instances_[i]->MayRunInline()) return i;
  }
  return std::nullopt;
}

size_t BatchingRunner::InlineBytes() const {
  // At the measured cost per input byte (which overestimates large inputs: the fixed cost of a
  // batch is spread over few bytes), and never over kInlineMaxBytes whatever the measure says.
  if (mean_byte_ns_ <= 0) return kInlineMaxBytes;
  return std::min<size_t>(kInlineMaxBytes, size_t(double(kInlineBudgetNs) / mean_byte_ns_));
}

std::optional<size_t> BatchingRunner::InlineInstance(const Pending& pending) const {
  if (!queue_.empty()) return std::nullopt;
  // Nor while requests come faster than a batch runs: the next would wait behind this one's run
  // where it could have shared one execution with it (at 64 connections to the demo's model,
  // three batches in four were lone inline runs, each paying the model's whole fixed cost).
  if (mean_gap_ns_ < mean_batch_ns_) return std::nullopt;
  // Nor a request larger than the model's usual ones would take past the budget.
  if (InputBytes(pending.request) > InlineBytes()) return std::nullopt;
  return IdleFastInstance();
}

void BatchingRunner::RunInline(size_t instance, std::vector<Pending> batch) {
  claimed_[instance] = true;
  ++busy_instances_;  // a request arriving meanwhile queues, and may wait for company
  ++inline_runs_;
  mu_.Unlock();
  DropExpired(batch);
  const bool run = !batch.empty();
  if (run) RunBatch(instance, batch);  // gives the instance back (EndExecution) before answering
  mu_.Lock();
  if (!run) {  // given back here
    --busy_instances_;
    claimed_[instance] = false;
    if (!queue_.empty()) cv_.SignalAll();
  }
  --inline_runs_;  // last: once it is 0 the destructor may go on
}

std::vector<BatchingRunner::Pending> BatchingRunner::NextBatch(size_t instance) {
  std::vector<Pending> batch;
  while (!stopping_ && (queue_.empty() || claimed_[instance])) cv_.Wait(&mu_);
  if (stopping_) return batch;
  const int64_t max_rows = std::max<int64_t>(1, config_.max_batch_size);
  const int64_t deadline = queue_.front().enqueued_ns + config_.batching.max_queue_delay_us * 1000;
  if (config_.max_batch_size > 0) {
    // Wait for the queue to hold a full batch, up to the oldest request's delay budget.
    auto queued_rows = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      int64_t rows = 0;
      for (const Pending& p : queue_) {
        rows += p.rows;
        if (rows >= max_rows) break;
      }
      return rows;
    };
    while (!stopping_ && queued_rows() < max_rows) {
      int64_t now = clock_.MonotonicNanos();
      // Stop waiting at the deadline, or when the next request is not expected before it.
      if (now >= deadline) break;
      if (config_.batching.adaptive_delay && busy_instances_ == 0) break;
      cv_.WaitWithTimeout(&mu_, absl::Nanoseconds(deadline - now));
      if (queue_.empty()) return batch;  // another instance took them
    }
    if (stopping_ || queue_.empty() || claimed_[instance]) return batch;
  }
  return TakeBatch(std::numeric_limits<size_t>::max());
}

std::vector<BatchingRunner::Pending> BatchingRunner::TakeBatch(size_t max_bytes) {
  std::vector<Pending> batch;
  if (queue_.empty() || InputBytes(queue_.front().request) > max_bytes) return batch;
  size_t bytes = InputBytes(queue_.front().request);
  int64_t rows = queue_.front().rows;
  batch.push_back(std::move(queue_.front()));
  queue_.pop_front();
  queued_rows_ -= rows;
  if (config_.max_batch_size <= 0) return batch;
  const int64_t max_rows = config_.max_batch_size;
  for (auto it = queue_.begin(); it != queue_.end() && rows < max_rows;) {
    const size_t size = InputBytes(it->request);
    if (rows + it->rows <= max_rows && bytes + size <= max_bytes &&
        Compatible(batch.front().request, it->request)) {
      rows += it->rows;
      queued_rows_ -= it->rows;
      bytes += size;
      batch.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return batch;
}

void BatchingRunner::InstanceLoop(size_t instance) {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    std::vector<Pending> batch = NextBatch(instance);
    if (batch.empty()) continue;
    // Let another instance start on the rest: every one, since the one a single wake-up reaches
    // may be claimed by an inline run and go back to sleep.
    if (!queue_.empty()) cv_.SignalAll();
    ++busy_instances_;
    mu_.Unlock();
    DropExpired(batch);
    const bool run = !batch.empty();
    if (run) RunBatch(instance, batch);  // ends the execution itself (EndExecution)
    mu_.Lock();
    if (!run) --busy_instances_;
  }
}

void BatchingRunner::DropExpired(std::vector<Pending>& batch) {
  const int64_t now = clock_.MonotonicNanos();
  auto expired = [now](const Pending& p) {
    return p.request.deadline_ns > 0 && now >= p.request.deadline_ns;
  };
  for (Pending& p : batch) {
    if (expired(p)) {
      std::move(p.done)(absl::DeadlineExceededError(
          "the caller's deadline passed while the request waited for the model"));
    }
  }
  batch.erase(std::remove_if(batch.begin(), batch.end(), expired), batch.end());
}

void BatchingRunner::RunBatch(size_t instance, std::vector<Pending>& batch) {
  const int64_t start = clock_.MonotonicNanos();
  int64_t total_rows = 0;
  for (const Pending& p : batch) total_rows += p.rows;

  std::vector<protocol::Tensor> inputs;
  if (batch.size() == 1) {
    inputs = std::move(batch.front().request.inputs);
  } else {
    for (size_t i = 0; i < config_.inputs.size(); ++i) {
      protocol::Tensor joined;
      const protocol::Tensor& first = batch.front().request.inputs[i];
      joined.name = first.name;
      joined.datatype = first.datatype;
      joined.shape = first.shape;
      joined.shape[0] = total_rows;
      size_t bytes = 0;
      for (const Pending& p : batch) bytes += p.request.inputs[i].data.size();
      joined.data.reserve(bytes);
      for (const Pending& p : batch) joined.data.append(p.request.inputs[i].data);
      inputs.push_back(std::move(joined));
    }
  }

  size_t input_bytes = 0;
  for (const protocol::Tensor& t : inputs) input_bytes += t.data.size();
  absl::StatusOr<std::vector<protocol::Tensor>> outputs = instances_[instance]->Execute(inputs);
  const int64_t end = clock_.MonotonicNanos();
  EndExecution(instance, end - start, input_bytes);
  if (batch_sizes_ != nullptr) batch_sizes_->Observe(double(total_rows));
  if (outputs.ok() && outputs->size() != config_.outputs.size()) {
    outputs = absl::InternalError(StrCat("the model returned ", outputs->size(),
                                         " outputs; its config declares ", config_.outputs.size()));
  }
  if (outputs.ok() && config_.max_batch_size > 0) {
    for (const protocol::Tensor& t : *outputs) {
      if (t.shape.empty() || t.shape[0] != total_rows || !t.DataFillsShape()) {
        outputs = absl::InternalError(
            StrCat("output '", t.name, "' does not have ", total_rows, " rows as its batch"));
        break;
      }
    }
  }
  if (!outputs.ok()) {
    for (Pending& p : batch) std::move(p.done)(outputs.status());
    return;
  }

  int64_t row = 0;
  for (Pending& p : batch) {
    InferResult result;
    result.queue_ns = start - p.enqueued_ns;
    result.compute_ns = end - start;
    result.batch_size = total_rows;
    result.outputs = RowsOf(*outputs, p.request.requested_outputs, row, p.rows, batch.size() == 1);
    row += p.rows;
    std::move(p.done)(std::move(result));
  }
}

std::vector<protocol::Tensor> BatchingRunner::RowsOf(const std::vector<protocol::Tensor>& outputs,
                                                     const std::vector<std::string>& requested,
                                                     int64_t first_row, int64_t rows,
                                                     bool whole) const {
  std::vector<protocol::Tensor> mine;
  for (size_t o = 0; o < outputs.size(); ++o) {
    const protocol::Tensor& all = outputs[o];
    const std::string& name = config_.outputs[o].name;
    if (!requested.empty() &&
        std::find(requested.begin(), requested.end(), name) == requested.end()) {
      continue;
    }
    protocol::Tensor out;
    out.name = name;
    out.datatype = all.datatype;
    out.shape = all.shape;
    if (whole) {
      out.data = all.data;
    } else {
      // Rows by elements, not bytes: a BYTES row has no one size. The range exists: the output
      // was checked to fill its shape, whose first dimension is the batch's rows.
      const int64_t per_row = all.ElementCount() / all.shape[0];
      const auto [begin, end] = *protocol::ElementRange(all, first_row * per_row, rows * per_row);
      out.shape[0] = rows;
      out.data.assign(all.data, begin, end - begin);
    }
    mine.push_back(std::move(out));
  }
  return mine;
}

}  // namespace pillar::runtime
