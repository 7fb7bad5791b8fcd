// API key text: "pk_<id>_<secret>", where <id> is 12 lowercase hex characters (public, used
// to find the record) and <secret> is 256 random bits in unpadded base64url (43 characters).
// Only SHA-256(secret) is stored; the text is shown once, at creation.
//
//   NewApiKey key = GenerateApiKey();       // key.text goes to the operator
//   absl::StatusOr<ParsedApiKey> p = ParseApiKey(key.text);
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pillar::identity {

inline constexpr std::string_view kApiKeyPrefix = "pk_";
inline constexpr size_t kApiKeyIdChars = 12;
inline constexpr size_t kApiKeySecretBytes = 32;

struct NewApiKey {
  std::string id;
  std::string text;         // shown to the operator once; WipeString() it after that
  std::string secret_hash;  // stored
};

struct ParsedApiKey {
  std::string_view id;
  std::string secret;  // raw bytes; WipeString() it once hashed
};

NewApiKey GenerateApiKey();
// InvalidArgument when the text does not have the key's shape.
[[nodiscard]] absl::StatusOr<ParsedApiKey> ParseApiKey(std::string_view text);
std::string HashApiKeySecret(std::string_view secret);

}  // namespace pillar::identity
