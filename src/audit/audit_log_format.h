// The audit log's on-disk contract (docs/formats/audit-log.md is the grammar). Every constant a
// writer or reader of the format needs lives here, so the two cannot drift apart.
//
// A log is a sequence of records, one per line:
//
//   line    = payload SP chain LF
//   payload = a compact JSON object that begins {"seq":<n>,"type":"<type>", ...
//   chain   = 64 lowercase hex digits of SHA-256(previous chain (32 bytes) || payload)
//
// Record 0 is the header (its previous chain is 32 zero bytes); the others are events and
// checkpoints. A checkpoint signs (Ed25519) the chain of the record before it, so a log can be
// checked against a key that the writer's host never gives out. The newest checkpoint is also
// kept beside the log (`<log>.checkpoint`), so cutting records off the end of the log is
// detected too, unless that file is replaced as well: then only an anchor kept off the host (a
// checkpoint's payload, or "COUNT:HEAD") shows it.
#pragma once

#include <cstddef>
#include <string_view>

namespace pillar::audit::format {

inline constexpr std::string_view kFormatName = "pillar-audit-v1";

inline constexpr size_t kChainBytes = 32;
inline constexpr size_t kChainHexChars = 2 * kChainBytes;
// What every payload begins with; the sequence number follows.
inline constexpr std::string_view kSeqPrefix = "{\"seq\":";

// Record types, as the "type" member spells them.
inline constexpr std::string_view kTypeHeader = "header";
inline constexpr std::string_view kTypeEvent = "event";
inline constexpr std::string_view kTypeCheckpoint = "checkpoint";
// What follows the sequence number in a checkpoint's payload: the one test a reader needs to
// tell a checkpoint from an event without parsing the JSON.
inline constexpr std::string_view kCheckpointTypeMember = ",\"type\":\"checkpoint\"";

// The longest line a writer emits and a reader accepts (payload, space, chain, newline). Event
// text fields are cut to kMaxFieldBytes before JSON escaping, which at worst multiplies a byte
// by six (\u0001): seven such fields stay well inside it (audit_record.cc asserts the bound).
inline constexpr size_t kMaxLineBytes = 64 * 1024;
inline constexpr size_t kMaxFieldBytes = 1024;
inline constexpr size_t kMaxEscapedBytesPerByte = 6;

// A checkpoint's signature is over this text, one field per line:
//   "pillar-audit-checkpoint-v1\n" count "\n" head-chain-hex
// (the head's hash binds every record before it, the header and its instance name included).
inline constexpr std::string_view kCheckpointSigningContext = "pillar-audit-checkpoint-v1";

// The newest checkpoint's payload, one line, next to the log file.
inline constexpr std::string_view kCheckpointFileSuffix = ".checkpoint";

}  // namespace pillar::audit::format
