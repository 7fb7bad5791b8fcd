#include "audit/audit_log.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "absl/time/clock.h"
#include "audit/audit_log_format.h"
#include "audit/audit_record.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar::audit {
namespace {

constexpr absl::Duration kRetryDelay = absl::Milliseconds(100);
constexpr absl::Duration kAlertEvery = absl::Seconds(10);
// A batch this large (or a quarter of queue_capacity) is written without waiting out
// batch_delay.
constexpr size_t kFullBatch = 1024;

}  // namespace

std::string DefaultInstanceName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "pillar";
  return name;
}

AuditLog::AuditLog(std::unique_ptr<AuditStore> store, AuditLogOptions options)
    : store_(std::move(store)), options_(std::move(options)) {
  if (options_.metrics != nullptr) {
    auto& records = options_.metrics->AddCounter(
        "pillar_audit_records_total",
        "Audit events by fate: written to the log, dropped or refused because the queue was full.",
        {"outcome"});
    written_metric_ = &records.Get({"written"});
    dropped_metric_ = &records.Get({"dropped"});
    refused_metric_ = &records.Get({"refused"});
    errors_metric_ = &options_.metrics
                          ->AddCounter("pillar_audit_write_errors_total",
                                       "Failed appends or syncs of the audit log, and waits "
                                       "for its lock that timed out (retried).")
                          .Get({});
    checkpoints_metric_ = &options_.metrics
                               ->AddCounter("pillar_audit_checkpoints_total",
                                            "Signed checkpoints appended to the audit log.")
                               .Get({});
  }
}

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Start(std::unique_ptr<AuditStore> store,
                                                          AuditLogOptions options) {
  if (options.instance.empty()) options.instance = DefaultInstanceName();
  std::unique_ptr<AuditLog> log(new AuditLog(std::move(store), std::move(options)));
  // Recover now, so that a log that does not verify at its end stops the start-up, and a new
  // log has its header before the first event.
  if (!log->WriteBatch(Bodies(), /*checkpoint_due=*/false)) {
    absl::MutexLock lock(&log->mu_);
    return log->last_error_;
  }
  if (absl::Status s = log->store_->Sync(); !s.ok()) return s;
  log->next_checkpoint_ = absl::Now() + log->options_.checkpoint_interval;
  log->thread_ = std::thread([raw = log.get()] {
    NameThisThread("audit-writer");
    raw->Run();
  });
  return log;
}

AuditLog::~AuditLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    writer_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

size_t AuditLog::FullBatch() const {
  // Full at a quarter of the capacity too: a small queue_capacity must not fill (and drop or
  // refuse records) while the writer waits out the delay.
  return std::clamp<size_t>(options_.queue_capacity / 4, 1, kFullBatch);
}

bool AuditLog::Record(const Event& event) {
  // A limit check that admits is implied by the request's authorization record; only
  // refusals are worth a record of their own (they are all counted in metrics).
  if (event.kind == EventKind::kLimit && event.allowed) return true;
  thread_local std::string body;
  body.clear();
  AppendEventBody(body, event);  // before the lock, which the other loops' records wait for
  bool alert = false;
  int64_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    if (abandoned_) return false;  // no writer left: accepting it would be a lie
    if (queue_.size() + held_events_ < options_.queue_capacity) {
      queue_.Add(body);
      ++enqueued_;
      // The writer waits for the first record of a batch, then for a full one or its delay: a
      // wake-up at those two sizes only. (A wait on an absl::Condition would have every
      // Record() evaluate it on unlocking, on the request's thread.)
      if (queue_.size() == 1 || queue_.size() == FullBatch()) writer_cv_.Signal();
      return true;
    }
    if (options_.refuse_when_full) {
      if (refused_metric_ != nullptr) refused_metric_->Increment();
      return false;
    }
    dropped = ++dropped_;
    const absl::Time now = absl::Now();
    if (now - last_drop_alert_ >= kAlertEvery) {
      last_drop_alert_ = now;
      alert = true;
    }
  }
  if (dropped_metric_ != nullptr) dropped_metric_->Increment();
  if (alert) {
    std::fprintf(stderr,
                 "pillar: ALERT: audit log queue full (%zu events); dropping events "
                 "(%lld dropped so far)\n",
                 options_.queue_capacity, static_cast<long long>(dropped));
  }
  return true;
}

int64_t AuditLog::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

absl::Status AuditLog::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const int64_t target = enqueued_;
  auto done = [this, target]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return durable_ >= target || abandoned_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return last_error_.ok() ? absl::DeadlineExceededError("audit log flush timed out")
                            : last_error_;
  }
  if (durable_ < target) {
    return absl::FailedPreconditionError("the audit log was abandoned; its events are not written");
  }
  return absl::OkStatus();
}

AuditLog::Abandoned AuditLog::Abandon() {
  Abandoned result;
  {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
    writer_cv_.SignalAll();
    result.unwritten = int64_t(queue_.size());
    queue_.clear();
  }
  // The writer checks abandoned_ once it holds the store's lock, just before appending; an
  // append past that check completes. Joining makes the count below exact: after this, nothing
  // of this log is ever written.
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  result.unwritten += int64_t(held_events_);
  held_events_ = 0;
  result.written = enqueued_ - durable_ - result.unwritten;
  return result;
}

bool AuditLog::WriteBatch(const Bodies& bodies, bool checkpoint_due) {
  auto fail = [this](absl::Status status) {
    ReportError(std::move(status));
    return false;
  };
  absl::StatusOr<ChainHead> head = store_->Begin();
  if (!head.ok()) return fail(head.status());
  bool abandoned;
  {
    absl::MutexLock lock(&mu_);
    abandoned = abandoned_;
  }
  if (abandoned) {
    // Begin() may have waited for the lock while the owner gave up on these events.
    store_->Abort();
    return false;
  }
  // The batch is built as the file spells it, in one buffer: each payload is written once and
  // hashed where it lies. Records point into it, so it must not grow past its reservation.
  const size_t bytes = 2 * format::kMaxLineBytes + bodies.text.size() + bodies.size() * 96;
  std::string lines;
  lines.reserve(bytes);
  std::vector<EncodedRecord> records;
  records.reserve(bodies.size() + 2);
  int64_t seq = head->next_seq;
  Chain chain = head->chain;
  auto append = [&](std::string_view body) {
    EncodedRecord& r = records.emplace_back();
    r.seq = seq++;
    const size_t start = lines.size();
    lines += format::kSeqPrefix;
    char digits[24];
    lines.append(digits, size_t(std::to_chars(digits, digits + sizeof digits, r.seq).ptr - digits));
    lines += body;
    r.payload = std::string_view(lines.data() + start, lines.size() - start);
    r.chain = chain = hasher_.Link(chain, r.payload);
    lines += ' ';
    AppendChainHex(lines, r.chain);
    lines += '\n';
  };
  if (seq == 0) {
    append(HeaderBody({.instance = options_.instance, .time_us = options_.clock->UnixMicros()}));
  }
  size_t start = 0;
  for (size_t end : bodies.ends) {
    append(std::string_view(bodies.text.data() + start, end - start));
    start = end;
  }
  std::string checkpoint_payload;
  if (checkpoint_due && options_.checkpoint_key.has_value()) {
    Checkpoint checkpoint;
    checkpoint.count = seq;
    checkpoint.head = ChainHex(chain);
    checkpoint.key_id = options_.checkpoint_key->public_key.key_id;
    checkpoint.signature = signing::Sign(*options_.checkpoint_key,
                                         CheckpointMessage(checkpoint.count, checkpoint.head));
    checkpoint.time_us = options_.clock->UnixMicros();
    append(CheckpointBody(checkpoint));
    checkpoint_payload = std::string(records.back().payload);
  }
  if (records.empty()) {
    store_->Abort();
    return true;
  }
  if (absl::Status s = store_->Commit(records, lines); !s.ok()) return fail(std::move(s));
  // From here on the batch is in the chain: whatever fails later (the sync) is retried on its
  // own, never by writing the batch again, which would record every event twice.
  if (written_metric_ != nullptr) written_metric_->Increment(double(bodies.size()));
  if (!checkpoint_payload.empty()) {
    // Published only once synced (Run): a checkpoint beside the log must never claim
    // records that a crash could still take away.
    pending_checkpoint_ = std::move(checkpoint_payload);
    if (checkpoints_metric_ != nullptr) checkpoints_metric_->Increment();
    since_checkpoint_ = 0;
  } else {
    since_checkpoint_ += int64_t(bodies.size());
  }
  return true;
}

void AuditLog::PublishPendingCheckpoint() {
  if (pending_checkpoint_.empty()) return;
  // Not retried: the records are durable and only the side copy is stale; the next checkpoint
  // replaces it.
  if (absl::Status s = store_->PublishCheckpoint(pending_checkpoint_); !s.ok()) {
    ReportError(std::move(s));
  }
  pending_checkpoint_.clear();
}

void AuditLog::ReportError(absl::Status status) {
  if (errors_metric_ != nullptr) errors_metric_->Increment();
  // The writer retries every 100 ms: one line per episode and then one per kAlertEvery, not a
  // flood.
  const absl::Time now = absl::Now();
  if (now - last_error_alert_ >= kAlertEvery) {
    last_error_alert_ = now;
    std::fprintf(stderr, "pillar: ALERT: audit log %s: %s\n", store_->Describe().c_str(),
                 std::string(status.message()).c_str());
  }
  absl::MutexLock lock(&mu_);
  last_error_ = std::move(status);
}

void AuditLog::AwaitRetry() {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || abandoned_; };
  mu_.AwaitWithTimeout(absl::Condition(&woken), kRetryDelay);
}

// What the writer carries from one turn of Run()'s loop to the next.
struct AuditLog::WriterState {
  Bodies batch;                 // taken from the queue, not yet written
  int64_t unsynced_events = 0;  // written, not yet synced
  bool unsynced = false;        // something (events or a checkpoint) was written, not synced
  absl::Time unsynced_since;
  absl::Time sync_retry_at = absl::InfinitePast();  // after a failed sync
  absl::Duration fsync_interval;
  bool never_sync = false;  // fsync_interval is infinite: syncs are left to the OS
};

absl::Time AuditLog::WakeDeadline(const WriterState& state) const {
  absl::Time deadline = absl::InfiniteFuture();
  if (options_.checkpoint_key.has_value() && since_checkpoint_ > 0) {
    deadline = next_checkpoint_;
  }
  if (state.unsynced) {
    const absl::Time sync_due = pending_checkpoint_.empty() && !state.never_sync
                                    ? state.unsynced_since + state.fsync_interval
                                    : absl::InfinitePast();
    deadline = std::min(deadline, std::max(sync_due, state.sync_retry_at));
  }
  return deadline;
}

bool AuditLog::TakeBatch(WriterState& state, bool& stopping) {
  absl::MutexLock lock(&mu_);
  if (abandoned_) return false;  // Abandon() counts what the writer holds
  if (state.batch.empty()) {
    // Until a record arrives, or a checkpoint or sync falls due (WaitWithDeadline: true when
    // the deadline passed).
    const absl::Time wake = WakeDeadline(state);
    while (queue_.empty() && !stopping_ && !abandoned_) {
      if (writer_cv_.WaitWithDeadline(&mu_, wake)) break;
    }
    if (abandoned_) return false;
    if (!queue_.empty() && !stopping_ && options_.batch_delay > absl::ZeroDuration()) {
      const absl::Time until = absl::Now() + options_.batch_delay;
      while (queue_.size() < FullBatch() && !stopping_ && !abandoned_) {
        if (writer_cv_.WaitWithDeadline(&mu_, until)) break;
      }
      if (abandoned_) return false;
    }
    std::swap(state.batch, queue_);
  } else {
    // A batch that failed: retry it with whatever arrived since.
    const size_t base = state.batch.text.size();
    state.batch.text += queue_.text;
    for (size_t end : queue_.ends) state.batch.ends.push_back(base + end);
    queue_.clear();
  }
  held_events_ = state.batch.size();
  stopping = stopping_;
  return true;
}

AuditLog::AfterWrite AuditLog::WriteHeldBatch(WriterState& state, absl::Time now,
                                              bool checkpoint_due, bool stopping) {
  if (!WriteBatch(state.batch, checkpoint_due)) {
    if (stopping) {
      // The attempt in progress when the destructor was called, and this one, failed: give
      // up rather than hold the process's exit hostage to the store (a held lock, a full
      // disk), and say what is lost.
      std::string error;
      {
        absl::MutexLock lock(&mu_);
        error = std::string(last_error_.message());
      }
      const std::string unsynced_note =
          state.unsynced_events > 0
              ? StrCat(" (and ", state.unsynced_events, " written, not synced)")
              : std::string();
      std::fprintf(stderr,
                   "pillar: ALERT: audit log %s: stopping with %zu events that could not be "
                   "written%s: %s\n",
                   store_->Describe().c_str(), state.batch.size(), unsynced_note.c_str(),
                   error.c_str());
      return AfterWrite::kStop;
    }
    // Woken early by the destructor, for the one more attempt it allows, or by Abandon().
    AwaitRetry();
    return AfterWrite::kRetry;
  }
  if (checkpoint_due) next_checkpoint_ = now + options_.checkpoint_interval;
  if (!state.unsynced) state.unsynced_since = now;
  state.unsynced = true;
  state.unsynced_events += int64_t(state.batch.size());
  state.batch.clear();
  absl::MutexLock lock(&mu_);
  held_events_ = 0;
  // Written before Abandon() took effect: it counts them.
  return abandoned_ ? AfterWrite::kStop : AfterWrite::kSync;
}

bool AuditLog::SyncIfDue(WriterState& state, absl::Time now, bool stopping) {
  // A checkpoint is synced at once (to be published); events per the fsync policy. After a
  // failed sync, the next try waits kRetryDelay (stopping tries once more, at once).
  const bool sync_due = state.unsynced && (now >= state.sync_retry_at || stopping) &&
                        (!pending_checkpoint_.empty() || state.never_sync || stopping ||
                         now - state.unsynced_since >= state.fsync_interval);
  if (!sync_due) return true;
  absl::Status synced =
      state.never_sync && pending_checkpoint_.empty() ? absl::OkStatus() : store_->Sync();
  if (!synced.ok()) {
    ReportError(std::move(synced));
    if (stopping) {
      std::fprintf(stderr, "pillar: ALERT: audit log: %lld written events could not be synced\n",
                   static_cast<long long>(state.unsynced_events));
      return false;
    }
    state.sync_retry_at = absl::Now() + kRetryDelay;
    return true;
  }
  state.unsynced = false;
  state.sync_retry_at = absl::InfinitePast();
  last_error_alert_ = absl::InfinitePast();  // the next failure is a new episode
  {
    absl::MutexLock lock(&mu_);
    last_error_ = absl::OkStatus();
  }
  PublishPendingCheckpoint();
  absl::MutexLock lock(&mu_);
  durable_ += state.unsynced_events;
  state.unsynced_events = 0;
  return true;
}

void AuditLog::Run() {
  WriterState state;
  state.fsync_interval = options_.fsync_interval;
  state.never_sync = state.fsync_interval == absl::InfiniteDuration();
  for (;;) {
    bool stopping = false;
    if (!TakeBatch(state, stopping)) return;
    const absl::Time now = absl::Now();
    const bool checkpoint_due = options_.checkpoint_key.has_value() &&
                                since_checkpoint_ + int64_t(state.batch.size()) > 0 &&
                                (now >= next_checkpoint_ || stopping);
    if (!state.batch.empty() || checkpoint_due) {
      const AfterWrite next = WriteHeldBatch(state, now, checkpoint_due, stopping);
      if (next == AfterWrite::kStop) return;
      if (next == AfterWrite::kRetry) continue;
    }
    if (!SyncIfDue(state, now, stopping)) return;
    if (stopping && !state.unsynced) {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace pillar::audit
