#include "identity/api_key.h"

#include "common/crypto.h"
#include "common/strings.h"

namespace pillar::identity {

std::string HashApiKeySecret(std::string_view secret) { return Sha256(secret); }

NewApiKey GenerateApiKey() {
  NewApiKey key;
  key.id = HexEncode(RandomBytes(kApiKeyIdChars / 2));
  std::string secret = RandomBytes(kApiKeySecretBytes);
  std::string encoded = Base64UrlEncode(secret);
  key.text = StrCat(kApiKeyPrefix, key.id, "_", encoded);
  key.secret_hash = HashApiKeySecret(secret);
  // Only key.text (the caller wipes it once shown) and the hash leave this function.
  WipeString(secret);
  WipeString(encoded);
  return key;
}

[[nodiscard]] absl::StatusOr<ParsedApiKey> ParseApiKey(std::string_view text) {
  constexpr size_t kSecretChars = (kApiKeySecretBytes * 4 + 2) / 3;
  constexpr size_t kLength = kApiKeyPrefix.size() + kApiKeyIdChars + 1 + kSecretChars;
  if (text.size() != kLength || !text.starts_with(kApiKeyPrefix) ||
      text[kApiKeyPrefix.size() + kApiKeyIdChars] != '_') {
    return absl::InvalidArgumentError("malformed API key");
  }
  std::string_view id = text.substr(kApiKeyPrefix.size(), kApiKeyIdChars);
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return absl::InvalidArgumentError("malformed API key");
    }
  }
  absl::StatusOr<std::string> secret = Base64UrlDecode(text.substr(kLength - kSecretChars));
  if (!secret.ok() || secret->size() != kApiKeySecretBytes) {
    if (secret.ok()) WipeString(*secret);
    return absl::InvalidArgumentError("malformed API key");
  }
  return ParsedApiKey{id, std::move(*secret)};
}

}  // namespace pillar::identity
