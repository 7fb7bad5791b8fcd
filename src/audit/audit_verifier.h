// Checks an audit chain end to end: every record's hash link and sequence number, the header,
// every checkpoint's signature against the trusted audit keys, a torn last record, and the
// checkpoint kept beside the chain (which catches records cut off the end). Stops at the first
// problem and names the record.
//
//   AuditVerifier verifier(keys, ReadPublishedCheckpoint(path));
//   for each record: if (!verifier.Add(payload, chain_hex, offset)) break;
//   VerifyReport report = verifier.Finish(torn_bytes);
//
//   VerifyReport report = VerifyAuditFile("/var/lib/pillar/audit.log", keys);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "audit/audit_record.h"
#include "audit/chain_hasher.h"
#include "signing/signing_key.h"

namespace pillar::audit {

struct VerifyReport {
  std::string instance;
  int64_t records = 0;            // records that verified, header and checkpoints included
  int64_t checkpoints = 0;        // signed checkpoints that verified
  int64_t last_checkpoint = -1;   // the newest one's count; -1: none
  int64_t published = -1;         // the count of the checkpoint kept beside the chain; -1: none
  uint64_t torn_bytes = 0;
  absl::Status status;            // OK, or the first problem
  int64_t first_bad_record = -1;  // its position in the chain; -1 when OK

  // One paragraph for people: what was checked, and the problem if any.
  std::string Summary() const;
};

class AuditVerifier {
 public:
  // `published`: the checkpoint kept beside the chain (NotFound when there is none; another
  // error is reported as a problem).
  // `unit` names what Add's offsets count in messages ("byte" for files, "row" for tables).
  AuditVerifier(std::vector<signing::PublicKey> keys, absl::StatusOr<std::string> published,
                std::string unit = "byte");

  // Checks the next record; `offset` locates it in messages (a byte offset, or a row number).
  // False once a problem has been found.
  bool Add(std::string_view payload, std::string_view chain_hex, uint64_t offset);
  // A line that is not `payload SP chain` at all.
  bool AddMalformed(uint64_t offset);
  VerifyReport Finish(uint64_t torn_bytes);

 private:
  bool Fail(uint64_t offset, std::string message);
  bool CheckCheckpoint(std::string_view payload, uint64_t offset);

  const std::vector<signing::PublicKey> keys_;
  const std::string unit_;
  std::optional<Checkpoint> published_;
  std::string published_payload_;
  ChainHasher hasher_;
  Chain chain_{};
  bool published_head_matched_ = false;
  VerifyReport report_;
};

// Verifies the log file at `path` and the checkpoint beside it.
VerifyReport VerifyAuditFile(const std::string& path, std::vector<signing::PublicKey> keys);

}  // namespace pillar::audit
