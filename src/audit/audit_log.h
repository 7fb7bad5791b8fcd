// The tamper-evident audit log (R-SEC-7, R-OPS-5): an AuditSink that hash-chains every event
// into an AuditStore, with a signed checkpoint of the chain's head every checkpoint_interval.
//
//   AuditLogOptions options;
//   options.instance = "gpu-node-7";
//   options.checkpoint_key = std::move(key);           // Ed25519; empty: no checkpoints
//   options.fsync_interval = absl::Milliseconds(10);   // group commit
//   PILLAR_ASSIGN_OR_RETURN(auto log, AuditLog::Start(std::move(store), std::move(options)));
//   log->Record(event);   // from any thread; never waits for the disk
//   log->Flush();         // waits until everything recorded so far is durable
//
// Record() encodes the event on the caller's thread and queues it; one writer thread assigns
// sequence numbers, links the chain, appends whole batches (one write and, per the fsync
// policy, one fdatasync per batch) and signs checkpoints. A store error (a full disk) keeps the
// batch and retries it, so nothing accepted is lost while the process lives; a failed sync is
// retried alone (what was written stays written, once). Every event accepted and not yet
// written, queued or kept by the writer for a retry, counts against queue_capacity: when that
// is reached, the event is dropped and counted (on_full = drop) or Record() answers false so the
// request is refused (on_full = refuse). Memory stays bounded however long the store fails.
//
// Shutdown is bounded: the destructor lets the writer finish the attempt in progress and make
// one more, then it gives up and says on stderr how many events it could not write. With the
// file store's lock wait (FileAuditStore::kDefaultLockWait, 2 s) that is about 4 s however long
// someone holds the log's lock. Abandon() is for a caller that has reported its events as not
// recorded: what is not written yet never will be.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "audit/audit_sink.h"
#include "audit/audit_store.h"
#include "common/clock.h"
#include "monitor/metrics.h"
#include "signing/signing_key.h"

namespace pillar::audit {

struct AuditLogOptions {
  // Names this chain in its header and in what checkpoints sign (the host name by default).
  std::string instance;
  std::optional<signing::SigningKey> checkpoint_key;
  absl::Duration checkpoint_interval = absl::Seconds(60);
  // Zero: fdatasync after every batch. InfiniteDuration(): leave it to the OS. Otherwise at
  // most this long between a record's write and its fdatasync.
  absl::Duration fsync_interval = absl::Milliseconds(10);
  // How long the writer lets events gather after the first of a batch arrives, unless 1,024
  // (or a quarter of queue_capacity) are queued first: one wake-up, one write and one store lock
  // per batch, instead of per event or two under steady load (a writer woken per event took a
  // futex, a stat, a lock, a pread and a pwrite for every few requests). Zero: write as soon as one
  // arrives. Events wait for it in memory, as they wait for the writer anyway: no more is lost to a
  // crash than fsync_interval already allows.
  absl::Duration batch_delay = absl::Milliseconds(2);
  // Events accepted and not yet written (queued, or held by the writer while it writes or
  // retries them) at most; each is at most format::kMaxLineBytes.
  size_t queue_capacity = 65536;
  bool refuse_when_full = false;
  monitor::MetricsRegistry* metrics = nullptr;  // optional
  // Stamps the chain's header and its checkpoints. When checkpoints fall due and syncs happen
  // is decided in real time: the writer waits for those moments.
  const Clock* clock = &SystemClock();
};

class AuditLog final : public AuditSink {
 public:
  // Recovers the chain's head (repairing a torn tail), writes the header of a new chain, and
  // starts the writer thread.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AuditLog>> Start(
      std::unique_ptr<AuditStore> store, AuditLogOptions options);
  // Writes everything queued (and a final checkpoint), syncs, and stops the writer.
  ~AuditLog() override;
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // False once Abandon() was called.
  bool Record(const Event& event) override;
  // Waits until every event recorded before the call is written and synced; the store's last
  // error when that cannot happen within `timeout`.
  [[nodiscard]] absl::Status Flush(absl::Duration timeout = absl::Seconds(30));

  // What Abandon() left behind.
  struct Abandoned {
    int64_t unwritten = 0;  // events dropped without being written: they never will be
    // Events written before the abandonment could take effect (their append was under way)
    // whose durability no Flush() confirmed: the log holds them, or will after a crash lose
    // them as a torn tail or unsynced write.
    int64_t written = 0;
  };
  // Stops the writer without writing anything more: the queue and the batch it holds for a
  // retry are dropped, no checkpoint is signed, later Record()s answer false and Flush() fails.
  // For a caller that has told its user the events were not recorded (a CLI change whose record
  // could not be made durable in time): without this, the writer's retries or the destructor
  // would write them once the lock or the disk frees up, and the log would say "ok" for a
  // change that was not made.
  // An append that is already under way is not interrupted (it cannot be taken back without
  // breaking the chain): Abandon() waits for the writer to stop, which takes at most the
  // store's lock wait and one append or sync, and counts such events in `written`, so the
  // caller can say that the log may hold them. Call it from the owner's thread, at most once,
  // not concurrently with the destructor.
  Abandoned Abandon();

  int64_t dropped() const;

 private:
  AuditLog(std::unique_ptr<AuditStore> store, AuditLogOptions options);
  void Run();
  // Event bodies end to end, and where each ends: one buffer for many events, so queueing one
  // is a copy, not an allocation.
  struct Bodies {
    std::string text;
    std::vector<size_t> ends;
    size_t size() const { return ends.size(); }
    bool empty() const { return ends.empty(); }
    void Add(std::string_view body) {
      text += body;
      ends.push_back(text.size());
    }
    void clear() {
      text.clear();
      ends.clear();
    }
  };
  // Appends `bodies` (and a checkpoint when one is due); false on a store error, when nothing
  // of the batch was written. A checkpoint written waits in pending_checkpoint_ until a sync
  // has made it durable; a failed sync is retried alone, never by writing the batch again.
  // Abandon() taking effect after Begin() also answers false, without an error.
  bool WriteBatch(const Bodies& bodies, bool checkpoint_due);
  // Until the next retry: kRetryDelay, or less when the log is being stopped or abandoned.
  void AwaitRetry();

  // Run()'s steps. WriterState is what the writer carries from one turn of its loop to the
  // next (audit_log.cc).
  struct WriterState;
  // What Run() does after writing the batch it holds.
  enum class AfterWrite { kSync, kRetry, kStop };
  // Fills state.batch: waits for events (or a checkpoint or sync falling due) when it is
  // empty, adds what arrived since to a batch kept for a retry. False once abandoned.
  bool TakeBatch(WriterState& state, bool& stopping);
  // When TakeBatch() stops waiting for events: a checkpoint or a sync falling due.
  absl::Time WakeDeadline(const WriterState& state) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queued records that make a batch full (AuditLogOptions::batch_delay).
  size_t FullBatch() const;
  // Writes state.batch (and a checkpoint when due); on a store error waits to retry, or gives up
  // when stopping.
  AfterWrite WriteHeldBatch(WriterState& state, absl::Time now, bool checkpoint_due, bool stopping);
  // Syncs what was written when the fsync policy (or a checkpoint, or stopping) says so. False
  // when stopping and the sync failed: the writer gives up.
  bool SyncIfDue(WriterState& state, absl::Time now, bool stopping);
  // Keeps the pending checkpoint beside the chain (called once it is synced).
  void PublishPendingCheckpoint();
  // Counts and reports a store error: one stderr line per episode, then one per 10 s.
  void ReportError(absl::Status status);

  const std::unique_ptr<AuditStore> store_;
  const AuditLogOptions options_;
  ChainHasher hasher_;  // writer thread only

  mutable absl::Mutex mu_;
  absl::CondVar writer_cv_;  // the writer waits on it for records (TakeBatch)
  Bodies queue_ ABSL_GUARDED_BY(mu_);
  // Events (and their bytes) the writer has taken from the queue and not yet written: the
  // batch being written, or kept for a retry after a store error. They count against the
  // capacity like queued ones, or a failing store would let memory grow without bound.
  size_t held_events_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;  // events accepted so far
  int64_t durable_ ABSL_GUARDED_BY(mu_) = 0;   // of which written and synced
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  absl::Time last_drop_alert_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  // Writer-thread state.
  int64_t since_checkpoint_ = 0;  // records appended since the last checkpoint
  // The payload of a checkpoint written but not yet synced; published once a sync succeeds.
  std::string pending_checkpoint_;
  absl::Time next_checkpoint_;
  absl::Time last_error_alert_ = absl::InfinitePast();

  monitor::Counter* written_metric_ = nullptr;
  monitor::Counter* dropped_metric_ = nullptr;
  monitor::Counter* refused_metric_ = nullptr;
  monitor::Counter* errors_metric_ = nullptr;
  monitor::Counter* checkpoints_metric_ = nullptr;
  std::thread thread_;
};

// The host name, for AuditLogOptions::instance.
std::string DefaultInstanceName();

}  // namespace pillar::audit
