#include "signing/envelope.h"

#include <simdjson.h>

#include "common/crypto.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "signing/manifest_format.h"

namespace pillar::signing {
namespace {

[[nodiscard]] absl::Status Invalid(std::string_view source, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(source, ": ", what));
}

}  // namespace

std::string PreAuthEncoding(std::string_view payload_type, std::string_view payload) {
  return StrCat(kPaePrefix, " ", payload_type.size(), " ", payload_type, " ", payload.size(), " ",
                payload);
}

std::string SealEnvelope(std::string_view payload_type, std::string_view payload,
                         const SigningKey& key) {
  const std::string signature = Sign(key, PreAuthEncoding(payload_type, payload));
  JsonWriter w(payload.size() * 2 + 256);
  w.BeginObject();
  w.Key("payloadType");
  w.String(payload_type);
  w.Key("payload");
  w.String(Base64Encode(payload));
  w.Key("signatures");
  w.BeginArray();
  w.BeginObject();
  w.Key("keyid");
  w.String(key.public_key.key_id);
  w.Key("sig");
  w.String(Base64Encode(signature));
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

bool LooksLikeEnvelope(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object object;
  return parser.parse(text.data(), text.size()).get(root) == simdjson::SUCCESS &&
         root.get_object().get(object) == simdjson::SUCCESS &&
         object["payloadType"].error() == simdjson::SUCCESS;
}

[[nodiscard]] absl::StatusOr<OpenedEnvelope> OpenEnvelope(std::string_view text,
                                                          std::string_view payload_type,
                                                          const std::vector<PublicKey>& trusted,
                                                          std::string_view source) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object envelope;
  if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS ||
      root.get_object().get(envelope) != simdjson::SUCCESS) {
    return Invalid(source, "not a JSON object");
  }
  std::string_view type, payload_text;
  if (envelope["payloadType"].get_string().get(type) != simdjson::SUCCESS || type != payload_type) {
    return Invalid(source, StrCat("payloadType must be ", payload_type));
  }
  if (envelope["payload"].get_string().get(payload_text) != simdjson::SUCCESS) {
    return Invalid(source, "no payload");
  }
  absl::StatusOr<std::string> payload = Base64Decode(payload_text);
  if (!payload.ok()) return Invalid(source, "payload is not base64");
  simdjson::dom::array signatures;
  if (envelope["signatures"].get_array().get(signatures) != simdjson::SUCCESS) {
    return Invalid(source, "no signatures");
  }
  const std::string pae = PreAuthEncoding(payload_type, *payload);
  std::string verified_by, seen;
  for (simdjson::dom::element s : signatures) {
    std::string_view keyid, sig_text;
    if (s["keyid"].get_string().get(keyid) != simdjson::SUCCESS ||
        s["sig"].get_string().get(sig_text) != simdjson::SUCCESS) {
      return Invalid(source, "a signature lacks keyid or sig");
    }
    StrAppend(&seen, seen.empty() ? "" : ", ", keyid.substr(0, 32));
    absl::StatusOr<std::string> sig = Base64Decode(sig_text);
    if (!sig.ok()) continue;
    for (const PublicKey& key : trusted) {
      if (key.key_id == keyid && Verify(key, pae, *sig)) verified_by = key.key_id;
    }
  }
  if (verified_by.empty()) {
    return absl::PermissionDeniedError(
        StrCat(source, ": no valid signature by a trusted key (signatures by: ",
               seen.empty() ? "none" : seen, ")"));
  }
  return OpenedEnvelope{std::move(*payload), std::move(verified_by)};
}

}  // namespace pillar::signing
