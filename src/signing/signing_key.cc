#include "signing/signing_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/crypto.h"
#include "common/files.h"
#include "common/strings.h"

namespace pillar::signing {
namespace {

constexpr std::string_view kPrivateTag = "pillar-ed25519-private-v1";
constexpr std::string_view kPublicTag = "pillar-ed25519-public-v1";

void InitSodium() {
  // sodium_init is idempotent and thread-safe; it fails only without a usable entropy source.
  if (sodium_init() < 0) std::abort();
}

std::string KeyId(std::string_view public_key) {
  return HexEncode(Sha256(public_key)).substr(0, 16);
}

// "<tag> <key id> <base64url bytes>\n"
[[nodiscard]] absl::StatusOr<std::pair<std::string, std::string>> ParseLine(const std::string& path,
                                                                            const std::string& text,
                                                                            std::string_view tag,
                                                                            size_t length) {
  std::string_view line = text;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  std::vector<std::string_view> parts = Split(line, ' ');
  if (parts.size() != 3 || parts[0] != tag) {
    return absl::InvalidArgumentError(StrCat(path, ": not a ", tag, " key file"));
  }
  absl::StatusOr<std::string> bytes = Base64UrlDecode(parts[2]);
  if (!bytes.ok() || bytes->size() != length) {
    if (bytes.ok()) WipeString(*bytes);  // not a key, but perhaps most of one
    return absl::InvalidArgumentError(
        StrCat(path, ": the key is not ", length, " bytes of base64url"));
  }
  return std::make_pair(std::string(parts[1]), std::move(*bytes));
}

[[nodiscard]] absl::Status WriteNew(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::AlreadyExistsError(StrCat("cannot create ", path, ": ", std::strerror(errno),
                                           " (an existing key is never overwritten)"));
  }
  ::fchmod(fd, mode);
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return absl::InternalError(StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

SigningKey GenerateSigningKey() {
  InitSodium();
  SigningKey key;
  key.seed = SecretString(RandomBytes(crypto_sign_SEEDBYTES));
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, reinterpret_cast<const unsigned char*>(key.seed.data()));
  sodium_memzero(sk, sizeof sk);
  key.public_key.bytes.assign(reinterpret_cast<char*>(pk), sizeof pk);
  key.public_key.key_id = KeyId(key.public_key.bytes);
  return key;
}

[[nodiscard]] absl::Status WriteKeyPair(const SigningKey& key, const std::string& prefix) {
  const std::string id = key.public_key.key_id;
  // The file's text spells the seed: wipe it, and the encoding it is built from, once written.
  std::string encoded = Base64UrlEncode(key.seed.view());
  std::string text = StrCat(kPrivateTag, " ", id, " ", encoded, "\n");
  WipeString(encoded);
  absl::Status written = WriteNew(prefix + ".key", text, 0600);
  WipeString(text);
  if (!written.ok()) return written;
  return WriteNew(prefix + ".pub",
                  StrCat(kPublicTag, " ", id, " ", Base64UrlEncode(key.public_key.bytes), "\n"),
                  0644);
}

[[nodiscard]] absl::StatusOr<SigningKey> ReadPrivateKey(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, 4096);
  if (!text.ok()) return text.status();
  auto parsed = ParseLine(path, *text, kPrivateTag, crypto_sign_SEEDBYTES);
  WipeString(*text);  // the file's text spells the seed
  if (!parsed.ok()) return parsed.status();
  InitSodium();
  SigningKey key;
  key.seed = SecretString(std::move(parsed->second));
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, reinterpret_cast<const unsigned char*>(key.seed.data()));
  sodium_memzero(sk, sizeof sk);
  key.public_key.bytes.assign(reinterpret_cast<char*>(pk), sizeof pk);
  key.public_key.key_id = KeyId(key.public_key.bytes);
  if (key.public_key.key_id != parsed->first) {
    return absl::InvalidArgumentError(StrCat(path, ": the key id does not match the key"));
  }
  return key;
}

[[nodiscard]] absl::StatusOr<std::vector<PublicKey>> ReadPublicKeys(
    const std::vector<std::string>& paths) {
  std::vector<PublicKey> keys;
  for (const std::string& path : paths) {
    absl::StatusOr<PublicKey> key = ReadPublicKey(path);
    if (!key.ok()) return key.status();
    keys.push_back(std::move(*key));
  }
  return keys;
}

[[nodiscard]] absl::StatusOr<PublicKey> ReadPublicKey(const std::string& path) {
  // A trusted public key says whose models load (or whose audit checkpoints verify): whoever
  // could write the file could put their own key there. Read as the policy is.
  absl::StatusOr<std::string> text = ReadTrustedFile(path, 4096);
  if (!text.ok()) return text.status();
  auto parsed = ParseLine(path, *text, kPublicTag, crypto_sign_PUBLICKEYBYTES);
  if (!parsed.ok()) return parsed.status();
  PublicKey key{KeyId(parsed->second), std::move(parsed->second)};
  if (key.key_id != parsed->first) {
    return absl::InvalidArgumentError(StrCat(path, ": the key id does not match the key"));
  }
  return key;
}

std::string Sign(const SigningKey& key, std::string_view message) {
  InitSodium();
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, reinterpret_cast<const unsigned char*>(key.seed.data()));
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size(), sk);
  sodium_memzero(sk, sizeof sk);
  return std::string(reinterpret_cast<char*>(sig), sizeof sig);
}

bool Verify(const PublicKey& key, std::string_view message, std::string_view signature) {
  InitSodium();
  if (key.bytes.size() != crypto_sign_PUBLICKEYBYTES || signature.size() != crypto_sign_BYTES) {
    return false;
  }
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(),
                                     reinterpret_cast<const unsigned char*>(key.bytes.data())) == 0;
}

}  // namespace pillar::signing
