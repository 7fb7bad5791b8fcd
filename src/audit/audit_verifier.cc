#include "audit/audit_verifier.h"

#include "audit/audit_log_format.h"
#include "audit/file_audit_store.h"
#include "common/strings.h"

namespace pillar::audit {

AuditVerifier::AuditVerifier(std::vector<signing::PublicKey> keys,
                             absl::StatusOr<std::string> published, std::string unit)
    : keys_(std::move(keys)), unit_(std::move(unit)) {
  if (published.ok()) {
    absl::StatusOr<Checkpoint> checkpoint = ParseCheckpoint(*published);
    if (!checkpoint.ok()) {
      report_.status = absl::DataLossError(
          StrCat("the checkpoint kept beside the chain is not one: ", checkpoint.status().message()));
      return;
    }
    published_ = std::move(*checkpoint);
    published_payload_ = std::move(*published);
    report_.published = published_->count;
  } else if (!absl::IsNotFound(published.status())) {
    report_.status = published.status();
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
  } else if (IsCheckpointPayload(payload) && !CheckCheckpoint(payload, offset)) {
    return false;
  }
  if (published_.has_value()) {
    if (position + 1 == published_->count && ChainHex(actual) == published_->head) {
      published_head_matched_ = true;
    }
    if (position == published_->count && payload != published_payload_) {
      return Fail(offset, "differs from the checkpoint kept beside the chain");
    }
  }
  chain_ = actual;
  ++report_.records;
  return true;
}

bool AuditVerifier::CheckCheckpoint(std::string_view payload, uint64_t offset) {
  absl::StatusOr<Checkpoint> checkpoint = ParseCheckpoint(payload);
  if (!checkpoint.ok()) return Fail(offset, StrCat("bad checkpoint: ", checkpoint.status().message()));
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
  return true;
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
  if (published_.has_value()) {
    if (published_->count >= report_.records) {
      report_.first_bad_record = report_.records;
      report_.status = absl::DataLossError(StrCat(
          "truncated: the signed checkpoint kept beside the chain covers ", published_->count,
          " records and itself, the chain has ", report_.records));
      return report_;
    }
    if (!published_head_matched_) {
      report_.first_bad_record = published_->count - 1;
      report_.status = absl::DataLossError(
          "the checkpoint kept beside the chain does not match the chain's record before it");
      return report_;
    }
  }
  return report_;
}

std::string VerifyReport::Summary() const {
  std::string out = StrCat("instance ", instance.empty() ? "?" : instance, ": ", records,
                           " records, ", checkpoints, " signed checkpoints");
  if (last_checkpoint >= 0) {
    out += StrCat("; the newest covers records 0..", last_checkpoint - 1);
    if (records - last_checkpoint - 1 > 0) {
      out += StrCat(" (", records - last_checkpoint - 1, " newer records are chained, not yet signed)");
    }
  } else if (records > 0) {
    out += "; no signed checkpoint yet: the chain is not bound to an audit key";
  }
  if (published >= 0) out += StrCat("; beside the chain: a checkpoint at ", published);
  if (!status.ok()) out += StrCat("\nFAILED: ", status.message());
  return out;
}

VerifyReport VerifyAuditFile(const std::string& path, std::vector<signing::PublicKey> keys) {
  AuditVerifier verifier(std::move(keys), ReadPublishedCheckpoint(path));
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
