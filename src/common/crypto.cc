#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/sha256.h"

namespace pillar {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";
constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::array<int8_t, 256> MakeBase64UrlTable() {
  std::array<int8_t, 256> table;
  table.fill(-1);
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(kBase64Url[i])] = int8_t(i);
  return table;
}

}  // namespace

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    std::fputs("pillar: the system random generator failed; refusing to continue\n", stderr);
    std::abort();
  }
  return out;
}

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

std::string Sha1(std::string_view data) {
  std::string out(20, '\0');
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(out.data()), &length,
                 EVP_sha1(), nullptr) != 1 ||
      length != 20) {
    std::abort();  // a digest that cannot be computed is a broken OpenSSL, not bad input
  }
  return out;
}

std::string Sha256(std::string_view data) {
  const Sha256Hasher::Digest digest = Sha256Hasher::Hash(data);
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), key.data(), int(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
           &size) == nullptr) {
    std::fprintf(stderr, "pillar: HMAC-SHA256 failed\n");
    std::abort();  // as RandomBytes: a keyed digest that silently failed would be a constant
  }
  return std::string(reinterpret_cast<const char*>(out), size);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string HexEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHexDigits[c >> 4]);
    out.push_back(kHexDigits[c & 0xf]);
  }
  return out;
}

std::string Base64UrlEncode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 |
                 uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out.push_back(kBase64Url[(v >> shift) & 63]);
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out.push_back(kBase64Url[(v >> 18) & 63]);
    out.push_back(kBase64Url[(v >> 12) & 63]);
    if (rest == 2) out.push_back(kBase64Url[(v >> 6) & 63]);
  }
  return out;
}

[[nodiscard]] absl::StatusOr<std::string> Base64UrlDecode(std::string_view text) {
  static const std::array<int8_t, 256> kTable = MakeBase64UrlTable();
  const size_t tail = text.size() % 4;
  if (tail == 1) return absl::InvalidArgumentError("base64url text has a bad length");
  const auto value = [&](size_t i) { return int32_t(kTable[static_cast<unsigned char>(text[i])]); };
  const auto outside = [] {
    return absl::InvalidArgumentError("base64url text has a character outside its alphabet");
  };
  // Four characters are three bytes; an API key's secret is decoded on every request.
  std::string out(text.size() * 3 / 4, '\0');
  char* to = out.data();
  size_t i = 0;
  for (; i + 4 <= text.size(); i += 4) {
    const int32_t a = value(i), b = value(i + 1), c = value(i + 2), d = value(i + 3);
    if ((a | b | c | d) < 0) return outside();
    const uint32_t group = uint32_t(a) << 18 | uint32_t(b) << 12 | uint32_t(c) << 6 | uint32_t(d);
    *to++ = static_cast<char>(group >> 16);
    *to++ = static_cast<char>(group >> 8);
    *to++ = static_cast<char>(group);
  }
  if (tail == 0) return out;
  // Two characters are one byte and four bits over, three are two bytes and two bits over.
  uint32_t group = 0;
  for (; i < text.size(); ++i) {
    const int32_t v = value(i);
    if (v < 0) return outside();
    group = group << 6 | uint32_t(v);
  }
  const int spare = tail == 2 ? 4 : 2;
  // Leftover bits must be zero, or two texts would decode to the same bytes.
  if ((group & ((1u << spare) - 1)) != 0) {
    return absl::InvalidArgumentError("base64url text has non-canonical trailing bits");
  }
  group >>= spare;
  if (tail == 3) *to++ = static_cast<char>(group >> 8);
  *to = static_cast<char>(group);
  return out;
}

[[nodiscard]] absl::StatusOr<std::string> Base64Decode(std::string_view text) {
  std::string url(text);
  for (char& c : url) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  while (!url.empty() && url.back() == '=') url.pop_back();
  return Base64UrlDecode(url);
}

void WipeString(std::string& s) {
  // Growing to the capacity never reallocates, and it makes every owned byte (a short string's
  // inline buffer included) part of the string, so it may be written through data().
  s.resize(s.capacity());
  OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

SecretString::SecretString(std::string&& value) : value_(std::move(value)) { WipeString(value); }

SecretString::SecretString(SecretString&& other) noexcept : value_(std::move(other.value_)) {
  WipeString(other.value_);
}

SecretString& SecretString::operator=(const SecretString& other) {
  if (this != &other) {
    WipeString(value_);  // assigning may reallocate and free the old buffer as it is
    value_ = other.value_;
  }
  return *this;
}

SecretString& SecretString::operator=(SecretString&& other) noexcept {
  if (this != &other) {
    WipeString(value_);
    value_ = std::move(other.value_);
    WipeString(other.value_);
  }
  return *this;
}

}  // namespace pillar
