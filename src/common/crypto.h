// Small cryptographic helpers over OpenSSL: secure random bytes, SHA-256, constant-time compare,
// and the text encodings pillar uses for secrets and digests.
//
//   std::string secret = RandomBytes(32);
//   std::string digest = Sha256(secret);           // 32 raw bytes
//   std::string shown = Base64UrlEncode(secret);   // what a person copies
// All functions are thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pillar {

// `n` bytes from the operating system's CSPRNG (OpenSSL RAND_bytes). Aborts if the CSPRNG
// fails: a process that cannot make secrets must not pretend it did.
std::string RandomBytes(size_t n);

// Raw 32-byte SHA-256 digest.
std::string Sha256(std::string_view data);
// Raw 20-byte SHA-1 digest: only to name things others name by it (Redis scripts), never for
// integrity or secrets.
std::string Sha1(std::string_view data);

// True when `a` and `b` are equal, in time that depends only on their length.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

std::string HexEncode(std::string_view bytes);

// RFC 4648 section 4 (standard alphabet, padded), as DSSE envelopes carry it.
std::string Base64Encode(std::string_view bytes);

// RFC 4648 section 5 alphabet, without padding.
std::string Base64UrlEncode(std::string_view bytes);
absl::StatusOr<std::string> Base64UrlDecode(std::string_view text);
// Either alphabet, padded or not (DSSE allows all four spellings).
absl::StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace pillar
