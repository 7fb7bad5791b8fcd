// Small cryptographic helpers over OpenSSL: secure random bytes, SHA-256, constant-time compare,
// and the text encodings pillar uses for secrets and digests.
//
//   std::string secret = RandomBytes(32);
//   std::string digest = Sha256(secret);           // 32 raw bytes
//   std::string shown = Base64UrlEncode(secret);   // what a person copies
//   SecretString seed(RandomBytes(32));         // wiped when it goes away
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
// Raw 32-byte HMAC-SHA256 of `data` under `key` (RFC 2104).
std::string HmacSha256(std::string_view key, std::string_view data);
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
[[nodiscard]] absl::StatusOr<std::string> Base64UrlDecode(std::string_view text);
// Either alphabet, padded or not (DSSE allows all four spellings).
[[nodiscard]] absl::StatusOr<std::string> Base64Decode(std::string_view text);

// Overwrites every byte `s` owns, up to its capacity (with OPENSSL_cleanse, which the compiler
// may not drop as a dead store), then empties it. For a secret that should not stay behind in
// freed memory once it has been used. The buffer stays allocated: s.capacity() is unchanged.
void WipeString(std::string& s);

// A secret (a key seed, a password) that is wiped when it is destroyed, overwritten or moved
// from, so that no copy this type made lingers in freed memory. Copies made from view() are
// the caller's to wipe. Like std::string, not thread-safe for concurrent writes.
class SecretString {
 public:
  SecretString() = default;
  // Takes `value`'s bytes and wipes what is left in it (a short string's inline buffer).
  explicit SecretString(std::string&& value);
  SecretString(const SecretString& other) : value_(other.value_) {}
  SecretString(SecretString&& other) noexcept;
  SecretString& operator=(const SecretString& other);
  SecretString& operator=(SecretString&& other) noexcept;
  ~SecretString() { WipeString(value_); }

  std::string_view view() const { return value_; }
  const char* data() const { return value_.data(); }
  size_t size() const { return value_.size(); }
  bool empty() const { return value_.empty(); }

 private:
  std::string value_;
};

}  // namespace pillar
