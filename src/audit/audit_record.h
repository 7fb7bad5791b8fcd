// The lines of the audit log (audit_log_format.h): building the payloads of the three record
// types and taking a line apart again. Pure functions; no I/O.
//
//   AppendEventBody(body, event);                        // ,"type":"event",...}
//   RecordLine line;
//   if (SplitRecordLine(text, &line) && ParseRecordSeq(line.payload, &seq)) ...
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "audit/audit_sink.h"

namespace pillar::audit {

// Appends an event's body (everything after the sequence number) to `out`:
// ,"type":"event","time":...,"kind":...,...} with every text field cut to
// format::kMaxFieldBytes. Never secrets or payloads: only what Event carries.
void AppendEventBody(std::string& out, const Event& event);

struct Header {
  std::string instance;
  int64_t time_us = 0;
};
std::string HeaderBody(const Header& header);
[[nodiscard]] absl::StatusOr<Header> ParseHeader(std::string_view payload);

struct Checkpoint {
  int64_t count = 0;      // records before this checkpoint (its own sequence number)
  std::string head;       // the chain hex of record count-1
  std::string key_id;     // the signing key's id (signing_key.h)
  std::string signature;  // 64 raw bytes, Ed25519 over CheckpointMessage()
  int64_t time_us = 0;
};
std::string CheckpointBody(const Checkpoint& checkpoint);
[[nodiscard]] absl::StatusOr<Checkpoint> ParseCheckpoint(std::string_view payload);
// What a checkpoint's signature covers: the count and the head. The head's hash already binds
// every record before it, the header with its instance name included.
std::string CheckpointMessage(int64_t count, std::string_view head);

struct RecordLine {
  std::string_view payload;
  std::string_view chain_hex;
};
// Splits a line without its LF; false unless it is `payload SP <64 chars>`, within the limits.
bool SplitRecordLine(std::string_view line, RecordLine* out);
// The sequence number a payload begins with; false unless it begins {"seq":<digits>,
bool ParseRecordSeq(std::string_view payload, int64_t* seq);
// True when the payload (whose seq parsed) is a checkpoint's.
bool IsCheckpointPayload(std::string_view payload);

}  // namespace pillar::audit
