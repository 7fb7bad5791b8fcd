#include "audit/audit_verifier.h"

#include "audit/audit_log_format.h"
#include "audit/file_audit_store.h"
#include "common/strings.h"

namespace pillar::audit {

namespace {

constexpr std::string_view kKeptCheckpoint = "the signed checkpoint kept beside the chain";

}  // namespace

[[nodiscard]] absl::StatusOr<Anchor> ParseAnchor(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  Anchor anchor;
  if (!text.empty() && text.front() == '{') {
    int64_t seq = -1;
    if (!ParseRecordSeq(text, &seq) || !IsCheckpointPayload(text)) {
      return absl::InvalidArgumentError("the anchor is not a checkpoint's payload");
    }
    absl::StatusOr<Checkpoint> checkpoint = ParseCheckpoint(text);
    if (!checkpoint.ok()) {
      return absl::InvalidArgumentError(
          StrCat("the anchor is not a checkpoint: ", checkpoint.status().message()));
    }
    Chain head;
    if (checkpoint->count != seq || !ParseChainHex(checkpoint->head, &head)) {
      return absl::InvalidArgumentError("the anchor's count or head is not a checkpoint's");
    }
    anchor.count = checkpoint->count;
    anchor.head = std::move(checkpoint->head);
    anchor.checkpoint = std::string(text);
  } else {
    const size_t colon = text.find(':');
    Chain head;
    if (colon == std::string_view::npos || !ParseInt(text.substr(0, colon), &anchor.count) ||
        !ParseChainHex(text.substr(colon + 1), &head)) {
      return absl::InvalidArgumentError(
          "an anchor is a checkpoint's payload (as `pillar audit anchor` prints it) or "
          "COUNT:HEAD (a record count and the chain of the last of them, 64 lowercase hex "
          "digits)");
    }
    anchor.head = std::string(text.substr(colon + 1));
  }
  if (anchor.count < 1) return absl::InvalidArgumentError("an anchor's count is at least 1");
  return anchor;
}

AuditVerifier::AuditVerifier(std::vector<signing::PublicKey> keys,
                             absl::StatusOr<std::string> published, std::string unit,
                             VerifyOptions options)
    : keys_(std::move(keys)), unit_(std::move(unit)), options_(std::move(options)) {
  if (published.ok()) {
    absl::StatusOr<Checkpoint> checkpoint = ParseCheckpoint(*published);
    if (!checkpoint.ok()) {
      report_.status = absl::DataLossError(StrCat(
          "the checkpoint kept beside the chain is not one: ", checkpoint.status().message()));
      return;
    }
    report_.published = checkpoint->count;
    expected_.push_back({.what = std::string(kKeptCheckpoint),
                         .anchor = {.count = checkpoint->count,
                                    .head = std::move(checkpoint->head),
                                    .checkpoint = std::move(*published)},
                         .at_once = false,
                         .found_head = {}});
  } else if (!absl::IsNotFound(published.status())) {
    report_.status = published.status();
  }
  if (options_.anchor.has_value()) {
    report_.anchor = options_.anchor->count;
    expected_.push_back(
        {.what = "the anchor", .anchor = *options_.anchor, .at_once = true, .found_head = {}});
  }
}

bool AuditVerifier::Fail(uint64_t offset, std::string message) {
  report_.first_bad_record = report_.records;
  report_.status = absl::DataLossError(
      StrCat("record ", report_.records, " (", unit_, " ", offset, "): ", message));
  return false;
}

bool AuditVerifier::AddMalformed(uint64_t offset) {
  if (!report_.status.ok()) return false;
  return Fail(offset, "not a record line (payload, space, 64 hex digits)");
}

bool AuditVerifier::Add(std::string_view payload, std::string_view chain_hex, uint64_t offset) {
  if (!report_.status.ok()) return false;
  const int64_t position = report_.records;
  Chain claimed;
  int64_t seq = -1;
  if (!ParseChainHex(chain_hex, &claimed) || !ParseRecordSeq(payload, &seq)) {
    return Fail(offset, "not a record (no sequence number or no 64-hex-digit chain)");
  }
  const Chain actual = hasher_.Link(chain_, payload);
  if (actual != claimed) {
    if (seq != position) {
      return Fail(offset, StrCat("hash chain broken where record ", position,
                                 " was expected, found record ", seq,
                                 ": records were deleted, inserted or reordered"));
    }
    return Fail(offset, "hash chain broken: this record, or the one before it, was modified");
  }
  if (seq != position) {
    return Fail(offset, StrCat("carries sequence number ", seq, " at position ", position));
  }
  if (position == 0) {
    absl::StatusOr<Header> header = ParseHeader(payload);
    if (!header.ok()) return Fail(offset, StrCat("bad header: ", header.status().message()));
    report_.instance = header->instance;
    if (!options_.instance.empty() && header->instance != options_.instance) {
      // Rows of another instance's chain put under this one's name verify on their own: only
      // the header can tell.
      return Fail(offset, StrCat("the header names instance '", header->instance,
                                 "', but this is the chain of instance '", options_.instance, "'"));
    }
  } else if (IsCheckpointPayload(payload) && !CheckCheckpoint(payload, offset)) {
    return false;
  }
  for (Expected& expected : expected_) {
    if (position + 1 == expected.anchor.count) {
      expected.found_head = ChainHex(actual);
      // The external anchor is named where it parts from the chain. (The kept checkpoint is
      // judged at the end, so that a chain rewritten under it is named at its checkpoint.)
      if (expected.at_once && expected.found_head != expected.anchor.head) {
        return Fail(offset, Mismatch(expected));
      }
    }
    if (position == expected.anchor.count && !expected.anchor.checkpoint.empty() &&
        payload != expected.anchor.checkpoint) {
      return Fail(offset, StrCat("differs from ", expected.what));
    }
  }
  chain_ = actual;
  ++report_.records;
  return true;
}

bool AuditVerifier::CheckCheckpoint(std::string_view payload, uint64_t offset) {
  absl::StatusOr<Checkpoint> checkpoint = ParseCheckpoint(payload);
  if (!checkpoint.ok())
    return Fail(offset, StrCat("bad checkpoint: ", checkpoint.status().message()));
  if (checkpoint->count != report_.records) {
    return Fail(offset, StrCat("checkpoint claims to follow ", checkpoint->count, " records"));
  }
  if (checkpoint->head != ChainHex(chain_)) {
    return Fail(offset, "checkpoint signs a head that is not the chain's");
  }
  const signing::PublicKey* key = nullptr;
  for (const signing::PublicKey& k : keys_) {
    if (k.key_id == checkpoint->key_id) key = &k;
  }
  if (key == nullptr) {
    return Fail(offset, keys_.empty()
                            ? std::string("checkpoint cannot be checked: no audit public key given")
                            : StrCat("checkpoint is signed by key ", checkpoint->key_id,
                                     ", which is not trusted"));
  }
  if (!signing::Verify(*key, CheckpointMessage(checkpoint->count, checkpoint->head),
                       checkpoint->signature)) {
    return Fail(offset, "checkpoint signature does not verify");
  }
  ++report_.checkpoints;
  report_.last_checkpoint = checkpoint->count;
  report_.newest_checkpoint = std::string(payload);
  return true;
}

void AuditVerifier::CheckReached(const Expected& expected) {
  const Anchor& anchor = expected.anchor;
  // A checkpoint's payload anchors the checkpoint record too; COUNT:HEAD only what it counts.
  const int64_t needed = anchor.count + (anchor.checkpoint.empty() ? 0 : 1);
  if (report_.records < needed) {
    report_.first_bad_record = report_.records;
    report_.status = absl::DataLossError(
        StrCat("truncated: ", expected.what, " covers ", anchor.count, " records",
               anchor.checkpoint.empty() ? "" : " and itself", ", the chain has ", report_.records,
               ": records ", report_.records, "..", needed - 1, " are missing from its end"));
  } else if (expected.found_head != anchor.head) {
    report_.first_bad_record = anchor.count - 1;
    report_.status = absl::DataLossError(Mismatch(expected));
  }
}

std::string AuditVerifier::Mismatch(const Expected& expected) {
  return StrCat(expected.what, " does not match the chain: it says record ",
                expected.anchor.count - 1, " has chain ", expected.anchor.head,
                ", the chain holds ", expected.found_head);
}

VerifyReport AuditVerifier::Finish(uint64_t torn_bytes) {
  report_.torn_bytes = torn_bytes;
  if (!report_.status.ok()) return report_;
  if (torn_bytes > 0) {
    report_.first_bad_record = report_.records;
    report_.status = absl::DataLossError(
        StrCat("record ", report_.records, " is torn (", torn_bytes,
               " bytes without an end): a write cut short by a crash, or a cut file; a writer "
               "removes it when it next opens the log"));
    return report_;
  }
  for (const Expected& expected : expected_) {
    CheckReached(expected);
    if (!report_.status.ok()) return report_;
  }
  if (report_.records < options_.min_records) {
    report_.first_bad_record = report_.records;
    report_.status = absl::DataLossError(
        StrCat("truncated: the chain has ", report_.records, " records, fewer than the ",
               options_.min_records, " it must hold: records ", report_.records, "..",
               options_.min_records - 1, " are missing from its end"));
    return report_;
  }
  // What passed but proves less than it seems.
  if (report_.last_checkpoint > report_.published) {
    report_.warnings.push_back(
        report_.published < 0
            ? StrCat("no checkpoint is kept beside the chain, although the chain holds one at "
                     "record ",
                     report_.last_checkpoint,
                     ": it was removed or never kept, so nothing here shows whether records "
                     "were cut off the end")
            : StrCat("the checkpoint kept beside the chain (record ", report_.published,
                     ") is older than the newest one in the chain (record ",
                     report_.last_checkpoint,
                     "): keeping it failed or a crash came between, or the chain was cut and an "
                     "older checkpoint put beside it; verify against an anchor kept off this "
                     "host"));
  }
  if (!options_.anchor.has_value() && options_.min_records <= 0) {
    report_.warnings.push_back(
        "no anchor given: records cut off the end of the chain, together with the checkpoint "
        "kept beside it, cannot be told from a shorter chain; keep the line `pillar audit "
        "anchor` prints off this host and verify with --anchor (or --min-records)");
  }
  return report_;
}

std::string VerifyReport::Summary() const {
  std::string out = StrCat("instance ", instance.empty() ? "?" : instance, ": ", records,
                           " records, ", checkpoints, " signed checkpoints");
  if (last_checkpoint >= 0) {
    out += StrCat("; the newest covers records 0..", last_checkpoint - 1);
    if (records - last_checkpoint - 1 > 0) {
      out += StrCat(" (", records - last_checkpoint - 1,
                    " newer records are chained, not yet signed)");
    }
  } else if (records > 0) {
    out += "; no signed checkpoint yet: the chain is not bound to an audit key";
  }
  if (published >= 0) out += StrCat("; beside the chain: a checkpoint at ", published);
  if (anchor >= 0) out += StrCat("; anchor: ", anchor, " records");
  if (!status.ok()) out += StrCat("\nFAILED: ", status.message());
  return out;
}

VerifyReport VerifyAuditFile(const std::string& path, std::vector<signing::PublicKey> keys,
                             VerifyOptions options) {
  AuditVerifier verifier(std::move(keys), ReadPublishedCheckpoint(path), "byte",
                         std::move(options));
  absl::StatusOr<uint64_t> torn = ReadAuditFile(path, [&](std::string_view text, uint64_t offset) {
    RecordLine line;
    if (!SplitRecordLine(text, &line)) return verifier.AddMalformed(offset);
    return verifier.Add(line.payload, line.chain_hex, offset);
  });
  if (!torn.ok()) {
    VerifyReport report;
    report.status = torn.status();
    return report;
  }
  return verifier.Finish(*torn);
}

}  // namespace pillar::audit
