#include "audit/audit_record.h"

#include <simdjson.h>

#include "audit/audit_log_format.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::audit {
namespace {

// An event has this many free-text members (principal ... remote), each cut to kMaxFieldBytes.
constexpr size_t kEventTextMembers = 7;
static_assert(kEventTextMembers * (format::kMaxEscapedBytesPerByte * format::kMaxFieldBytes + 32) +
                      512 <=
                  format::kMaxLineBytes,
              "an event of maximal, fully escaped fields must fit in one line");

template <JsonName Name>
void Member(std::string& out, std::string_view value) {
  out += ',';
  out.append(Name.text, sizeof Name.text);
  AppendJsonString(out, value.substr(0, format::kMaxFieldBytes));
}

// The parsed payload of a header or checkpoint, an object whose seq parsed.
[[nodiscard]] absl::StatusOr<simdjson::dom::object> ParseObject(simdjson::dom::parser& parser,
                                                                std::string_view payload,
                                                                std::string_view type) {
  simdjson::dom::element root;
  simdjson::dom::object object;
  std::string_view actual;
  if (parser.parse(payload.data(), payload.size()).get(root) != simdjson::SUCCESS ||
      root.get(object) != simdjson::SUCCESS || object["type"].get(actual) != simdjson::SUCCESS ||
      actual != type) {
    return absl::DataLossError(StrCat("not a ", type, " record"));
  }
  return object;
}

[[nodiscard]] absl::StatusOr<int64_t> ParseTimeMember(simdjson::dom::object& object) {
  std::string_view text;
  if (object["time"].get(text) != simdjson::SUCCESS) {
    return absl::DataLossError("record has no time");
  }
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &error)) {
    return absl::DataLossError(StrCat("bad record time '", text, "'"));
  }
  return absl::ToUnixMicros(t);
}

}  // namespace

void AppendEventBody(std::string& out, const Event& event) {
  out += ",\"type\":\"event\",\"time\":\"";
  AppendUtcMicros(out, event.time_us);
  out += "\",\"kind\":\"";
  out += EventKindName(event.kind);
  out += "\",\"decision\":\"";
  out += DecisionName(event.kind, event.allowed);
  out += '"';
  Member<"principal">(out, event.principal);
  Member<"tenant">(out, event.tenant);
  Member<"action">(out, event.action);
  Member<"resource">(out, event.resource);
  Member<"reason">(out, event.explain());
  Member<"request_id">(out, event.request_id);
  Member<"remote">(out, event.remote);
  out += '}';
}

std::string HeaderBody(const Header& header) {
  std::string out = ",\"type\":\"header\",\"time\":\"";
  out += FormatUtcMicros(header.time_us);
  out += "\",\"format\":\"";
  out += format::kFormatName;
  out += '"';
  Member<"instance">(out, header.instance);
  out += '}';
  return out;
}

[[nodiscard]] absl::StatusOr<Header> ParseHeader(std::string_view payload) {
  simdjson::dom::parser parser;
  absl::StatusOr<simdjson::dom::object> object = ParseObject(parser, payload, format::kTypeHeader);
  if (!object.ok()) return object.status();
  std::string_view format_name;
  std::string_view instance;
  if ((*object)["format"].get(format_name) != simdjson::SUCCESS ||
      format_name != format::kFormatName) {
    return absl::DataLossError(StrCat("not a ", format::kFormatName, " log"));
  }
  if ((*object)["instance"].get(instance) != simdjson::SUCCESS) {
    return absl::DataLossError("header has no instance");
  }
  absl::StatusOr<int64_t> time_us = ParseTimeMember(*object);
  if (!time_us.ok()) return time_us.status();
  return Header{.instance = std::string(instance), .time_us = *time_us};
}

std::string CheckpointBody(const Checkpoint& checkpoint) {
  std::string out(format::kCheckpointTypeMember);
  out += ",\"time\":\"";
  out += FormatUtcMicros(checkpoint.time_us);
  out += "\",\"count\":";
  out += std::to_string(checkpoint.count);
  Member<"head">(out, checkpoint.head);
  Member<"key">(out, checkpoint.key_id);
  Member<"signature">(out, Base64Encode(checkpoint.signature));
  out += '}';
  return out;
}

[[nodiscard]] absl::StatusOr<Checkpoint> ParseCheckpoint(std::string_view payload) {
  simdjson::dom::parser parser;
  absl::StatusOr<simdjson::dom::object> object =
      ParseObject(parser, payload, format::kTypeCheckpoint);
  if (!object.ok()) return object.status();
  Checkpoint checkpoint;
  std::string_view head, key, signature;
  if ((*object)["count"].get(checkpoint.count) != simdjson::SUCCESS ||
      (*object)["head"].get(head) != simdjson::SUCCESS ||
      (*object)["key"].get(key) != simdjson::SUCCESS ||
      (*object)["signature"].get(signature) != simdjson::SUCCESS) {
    return absl::DataLossError("checkpoint lacks count, head, key or signature");
  }
  absl::StatusOr<std::string> raw = Base64Decode(signature);
  if (!raw.ok() || raw->size() != 64) {
    return absl::DataLossError("checkpoint signature is not 64 bytes of base64");
  }
  absl::StatusOr<int64_t> time_us = ParseTimeMember(*object);
  if (!time_us.ok()) return time_us.status();
  checkpoint.head = std::string(head);
  checkpoint.key_id = std::string(key);
  checkpoint.signature = std::move(*raw);
  checkpoint.time_us = *time_us;
  return checkpoint;
}

std::string CheckpointMessage(int64_t count, std::string_view head) {
  return StrCat(format::kCheckpointSigningContext, "\n", count, "\n", head);
}

bool SplitRecordLine(std::string_view line, RecordLine* out) {
  if (line.size() > format::kMaxLineBytes ||
      line.size() < format::kSeqPrefix.size() + 2 + 1 + format::kChainHexChars) {
    return false;
  }
  const size_t space = line.size() - format::kChainHexChars - 1;
  if (line[space] != ' ') return false;
  out->payload = line.substr(0, space);
  out->chain_hex = line.substr(space + 1);
  return true;
}

bool ParseRecordSeq(std::string_view payload, int64_t* seq) {
  if (payload.substr(0, format::kSeqPrefix.size()) != format::kSeqPrefix) return false;
  size_t i = format::kSeqPrefix.size();
  int64_t value = 0;
  const size_t first = i;
  while (i < payload.size() && payload[i] >= '0' && payload[i] <= '9') {
    if (i - first >= 18) return false;  // no overflow, and no leading-zero games past 18 digits
    value = value * 10 + (payload[i] - '0');
    ++i;
  }
  if (i == first || i >= payload.size() || payload[i] != ',') return false;
  if (payload[first] == '0' && i - first > 1) return false;  // one spelling per number
  *seq = value;
  return true;
}

bool IsCheckpointPayload(std::string_view payload) {
  const size_t comma = payload.find(',');
  return comma != std::string_view::npos &&
         payload.substr(comma, format::kCheckpointTypeMember.size()) ==
             format::kCheckpointTypeMember;
}

}  // namespace pillar::audit
