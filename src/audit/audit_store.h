// Where an audit chain is kept: a local file (FileAuditStore) or a PostgreSQL table shared by
// many instances (PostgresAuditStore). AuditLog writes through this interface; more than one
// process may write the same chain (a server and `pillar key create`), so a writer takes the
// store's lock, learns the head as it is now, and appends after it.
//
//   PILLAR_ASSIGN_OR_RETURN(ChainHead head, store.Begin());
//   ... encode records head.next_seq, head.next_seq + 1, ... linked from head.chain ...
//   PILLAR_RETURN_IF_ERROR(store.Commit(records));   // releases the lock
//   PILLAR_RETURN_IF_ERROR(store.Sync());
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "audit/chain_hasher.h"

namespace pillar::audit {

// One record of a batch; `payload` points into the batch's text (see Commit).
struct EncodedRecord {
  int64_t seq = 0;
  std::string_view payload;
  Chain chain{};
};

struct ChainHead {
  int64_t next_seq = 0;  // 0: the chain is empty and needs its header
  Chain chain{};         // the last record's chain; zeros when empty
};

class AuditStore {
 public:
  virtual ~AuditStore() = default;

  // Takes the chain's write lock and returns its head. A torn last record left by a crash is
  // removed here (and said on stderr); a last record that does not link to the one before is
  // an error, because appending to a chain that has been tampered with would hide it. A store
  // may bound its wait for the lock (FileAuditStore does): giving up is an error like any other
  // (Unavailable), which the writer reports and retries, instead of a writer stalled unseen.
  [[nodiscard]] virtual absl::StatusOr<ChainHead> Begin() = 0;
  // Appends `records` (consecutive, from the head Begin() returned) and releases the lock. On
  // an error nothing of the batch remains and the lock is released. `lines` is the batch as the
  // file format spells it (each record's line, in order), for stores that keep exactly that.
  [[nodiscard]] virtual absl::Status Commit(std::span<const EncodedRecord> records,
                                            std::string_view lines) = 0;
  // Releases the lock without writing.
  virtual void Abort() = 0;
  // Makes every committed record durable.
  [[nodiscard]] virtual absl::Status Sync() = 0;
  // Keeps `payload`, the newest checkpoint (already committed and synced), beside the chain.
  [[nodiscard]] virtual absl::Status PublishCheckpoint(std::string_view payload) = 0;
  // "file /var/lib/pillar/audit.log", for messages.
  virtual std::string Describe() const = 0;
};

}  // namespace pillar::audit
