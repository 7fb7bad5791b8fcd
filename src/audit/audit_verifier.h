// Checks an audit chain end to end: every record's hash link and sequence number, the header,
// every checkpoint's signature against the trusted audit keys, a torn last record, and the
// checkpoint kept beside the chain (which catches records cut off the end). Stops at the first
// problem and names the record. The kept checkpoint lives on the chain's host, so whoever can
// cut the chain can replace it with an older one: only an anchor kept elsewhere (a checkpoint
// copied off the host, see `pillar audit anchor`) or a known minimum length proves that the
// end is all there; without one the report carries a warning saying so.
//
//   AuditVerifier verifier(keys, ReadPublishedCheckpoint(path), "byte", {.anchor = anchor});
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

// A point the chain must still reach, known from outside the chain's host: records
// 0..count-1 are in the chain and record count-1's chain is `head`. Parsed from a checkpoint's
// payload (then record `count` must be that checkpoint, byte for byte) or from "COUNT:HEAD".
struct Anchor {
  int64_t count = 0;
  std::string head;        // 64 lowercase hex digits
  std::string checkpoint;  // the checkpoint's payload; empty for COUNT:HEAD
};
// `text` is one line (a trailing LF is ignored): a checkpoint's payload as `pillar audit anchor`
// prints it and `<log>.checkpoint` holds it, or COUNT:HEAD.
[[nodiscard]] absl::StatusOr<Anchor> ParseAnchor(std::string_view text);

struct VerifyOptions {
  std::optional<Anchor> anchor;
  int64_t min_records = 0;  // the chain must hold at least this many records
  // The chain's name as the reader found it (a PostgreSQL chain's instance column); the header
  // must name the same instance. Empty: not checked (a file names its chain only in its header).
  std::string instance;
};

struct VerifyReport {
  std::string instance;
  int64_t records = 0;           // records that verified, header and checkpoints included
  int64_t checkpoints = 0;       // signed checkpoints that verified
  int64_t last_checkpoint = -1;  // the newest one's count; -1: none
  int64_t published = -1;        // the count of the checkpoint kept beside the chain; -1: none
  int64_t anchor = -1;           // the external anchor's count; -1: none given
  uint64_t torn_bytes = 0;
  absl::Status status;            // OK, or the first problem
  int64_t first_bad_record = -1;  // its position in the chain; -1 when OK
  // What the checks could not rule out, although nothing failed: no external anchor was
  // given, or the kept checkpoint is older than the newest one in the chain.
  std::vector<std::string> warnings;
  std::string newest_checkpoint;  // the payload of the newest checkpoint that verified

  // One paragraph for people: what was checked, and the problem if any.
  std::string Summary() const;
};

class AuditVerifier {
 public:
  // `published`: the checkpoint kept beside the chain (NotFound when there is none; another
  // error is reported as a problem).
  // `unit` names what Add's offsets count in messages ("byte" for files, "row" for tables).
  AuditVerifier(std::vector<signing::PublicKey> keys, absl::StatusOr<std::string> published,
                std::string unit = "byte", VerifyOptions options = {});

  // Checks the next record; `offset` locates it in messages (a byte offset, or a row number).
  // False once a problem has been found.
  bool Add(std::string_view payload, std::string_view chain_hex, uint64_t offset);
  // A line that is not `payload SP chain` at all.
  bool AddMalformed(uint64_t offset);
  VerifyReport Finish(uint64_t torn_bytes);

 private:
  // A point the chain must reach: the kept checkpoint, or the external anchor.
  struct Expected {
    std::string what;  // "the signed checkpoint kept beside the chain", "the anchor"
    Anchor anchor;
    bool at_once;            // a mismatching head fails where it is found, not at the end
    std::string found_head;  // the chain of record anchor.count-1, once read
  };
  bool Fail(uint64_t offset, std::string message);
  bool CheckCheckpoint(std::string_view payload, uint64_t offset);
  // Sets the report's status when the chain read does not reach `expected`.
  void CheckReached(const Expected& expected);
  static std::string Mismatch(const Expected& expected);

  const std::vector<signing::PublicKey> keys_;
  const std::string unit_;
  const VerifyOptions options_;
  std::vector<Expected> expected_;
  ChainHasher hasher_;
  Chain chain_{};
  VerifyReport report_;
};

// Verifies the log file at `path` and the checkpoint beside it.
VerifyReport VerifyAuditFile(const std::string& path, std::vector<signing::PublicKey> keys,
                             VerifyOptions options = {});

}  // namespace pillar::audit
