#include "jobs/payload_sealer.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/files.h"
#include "common/strings.h"

namespace pillar::jobs {
namespace {

constexpr size_t kIdBytes = 4;
constexpr size_t kHeaderBytes = crypto_secretstream_xchacha20poly1305_HEADERBYTES;
constexpr size_t kOverhead = PayloadSealer::kMagic.size() + kIdBytes + kHeaderBytes +
                             crypto_secretstream_xchacha20poly1305_ABYTES;

// What the payload is bound to: a sealed request of one job is not a result, nor another job's.
std::string AssociatedData(std::string_view job_id, std::string_view field,
                           std::string_view context) {
  return StrCat("pillar job ", job_id, " ", field, " ", context);
}

std::array<uint8_t, kIdBytes> KeyId(std::string_view key) {
  unsigned char hash[crypto_generichash_BYTES];
  crypto_generichash(hash, sizeof hash, reinterpret_cast<const unsigned char*>(key.data()),
                     key.size(), nullptr, 0);
  std::array<uint8_t, kIdBytes> id;
  std::memcpy(id.data(), hash, kIdBytes);
  return id;
}

[[nodiscard]] absl::StatusOr<std::string> DecodeKey(const std::string& path, std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::string key(PayloadSealer::kKeyBytes, '\0');
  size_t length = 0;
  const bool ok = text.size() == 2 * PayloadSealer::kKeyBytes &&
                  sodium_hex2bin(reinterpret_cast<unsigned char*>(key.data()), key.size(),
                                 text.data(), text.size(), nullptr, &length, nullptr) == 0 &&
                  length == PayloadSealer::kKeyBytes;
  sodium_memzero(text.data(), text.size());
  if (!ok) {
    sodium_memzero(key.data(), key.size());
    return absl::InvalidArgumentError(
        StrCat(path, ": a job payload key is 64 hexadecimal characters (openssl rand -hex 32)"));
  }
  return key;
}

// A key file, read strictly: a regular file (not a link, which whoever can write the directory
// could point anywhere), owned by this user or root, that group and others may not read.
// Checked on the descriptor that is read, so a swap of the path cannot slip past.
[[nodiscard]] absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return errno == ELOOP
               ? absl::PermissionDeniedError(StrCat(path, ": a job payload key may not be a link"))
               : absl::NotFoundError(StrCat(path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  std::string text;
  absl::Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::PermissionDeniedError(StrCat(path, ": not a regular file"));
  } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    status = absl::PermissionDeniedError(
        StrCat(path, ": owned by another user; a job payload key must be pillar's or root's"));
  } else if ((st.st_mode & 077) != 0) {
    status = absl::PermissionDeniedError(
        StrCat(path, " is readable or writable by group or others; chmod 600 it"));
  } else if (st.st_size > 256) {
    status = absl::InvalidArgumentError(StrCat(path, ": too large for a job payload key"));
  } else {
    text.resize(size_t(st.st_size));
    if (::read(fd, text.data(), text.size()) != ssize_t(text.size())) {
      status = absl::DataLossError(StrCat(path, ": cannot be read"));
    }
  }
  ::close(fd);
  if (!status.ok()) {
    sodium_memzero(text.data(), text.size());
    return status;
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const PayloadSealer>> PayloadSealer::FromKeys(
    std::vector<std::string> keys) {
  if (sodium_init() < 0) return absl::InternalError("libsodium cannot start");
  if (keys.empty()) return absl::InvalidArgumentError("no job payload key");
  std::vector<Key> loaded;
  for (std::string& bytes : keys) {
    if (bytes.size() != kKeyBytes) {
      return absl::InvalidArgumentError(StrCat("a job payload key is ", kKeyBytes, " bytes"));
    }
    loaded.push_back({KeyId(bytes), SecretString(std::move(bytes))});
  }
  return std::shared_ptr<const PayloadSealer>(new PayloadSealer(std::move(loaded)));
}

absl::StatusOr<std::shared_ptr<const PayloadSealer>> PayloadSealer::Load(
    const std::vector<std::string>& key_files) {
  std::vector<std::string> keys;
  for (const std::string& path : key_files) {
    absl::StatusOr<std::string> text = ReadKeyFile(path);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::string> key = DecodeKey(path, std::move(*text));
    if (!key.ok()) return key.status();
    keys.push_back(std::move(*key));
  }
  return FromKeys(std::move(keys));
}

absl::StatusOr<bool> PayloadSealer::CreateKeyIfMissing(const std::string& path) {
  if (sodium_init() < 0) return absl::InternalError("libsodium cannot start");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) return false;
  if (fd < 0) return absl::PermissionDeniedError(StrCat(path, ": ", std::strerror(errno)));
  unsigned char key[kKeyBytes];
  randombytes_buf(key, sizeof key);
  char hex[2 * kKeyBytes + 2];
  sodium_bin2hex(hex, sizeof hex - 1, key, sizeof key);
  sodium_memzero(key, sizeof key);
  hex[2 * kKeyBytes] = '\n';
  const bool written =
      ::write(fd, hex, 2 * kKeyBytes + 1) == ssize_t(2 * kKeyBytes + 1) && ::fsync(fd) == 0;
  sodium_memzero(hex, sizeof hex);
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    return absl::DataLossError(StrCat(path, ": cannot write the new job payload key"));
  }
  return true;
}

std::string PayloadSealer::key_id() const {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(keys_[0].id.data()), kIdBytes));
}

std::string PayloadSealer::Seal(std::string_view job_id, std::string_view field,
                                std::string_view plaintext, std::string_view context) const {
  const Key& key = keys_[0];
  std::string out(kOverhead + plaintext.size(), '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  std::memcpy(bytes, kMagic.data(), kMagic.size());
  std::memcpy(bytes + kMagic.size(), key.id.data(), kIdBytes);
  unsigned char* header = bytes + kMagic.size() + kIdBytes;
  crypto_secretstream_xchacha20poly1305_state state;
  crypto_secretstream_xchacha20poly1305_init_push(
      &state, header, reinterpret_cast<const unsigned char*>(key.bytes.data()));
  const std::string ad = AssociatedData(job_id, field, context);
  crypto_secretstream_xchacha20poly1305_push(
      &state, header + kHeaderBytes, nullptr,
      reinterpret_cast<const unsigned char*>(plaintext.data()), plaintext.size(),
      reinterpret_cast<const unsigned char*>(ad.data()), ad.size(),
      crypto_secretstream_xchacha20poly1305_TAG_FINAL);
  sodium_memzero(&state, sizeof state);
  return out;
}

absl::StatusOr<std::string> PayloadSealer::Open(std::string_view job_id, std::string_view field,
                                                std::string_view sealed,
                                                std::string_view context) const {
  if (sealed.size() < kOverhead || sealed.substr(0, kMagic.size()) != kMagic) {
    return absl::DataLossError(StrCat("the job's ", field, " is not a sealed payload"));
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(sealed.data());
  const Key* key = nullptr;
  for (const Key& k : keys_) {
    if (std::memcmp(k.id.data(), bytes + kMagic.size(), kIdBytes) == 0) key = &k;
  }
  if (key == nullptr) {
    return absl::NotFoundError(StrCat("the job's ", field, " is sealed with key ",
                                      HexEncode(sealed.substr(kMagic.size(), kIdBytes)),
                                      ", which is not among [jobs] payload_keys"));
  }
  const unsigned char* header = bytes + kMagic.size() + kIdBytes;
  crypto_secretstream_xchacha20poly1305_state state;
  if (crypto_secretstream_xchacha20poly1305_init_pull(
          &state, header, reinterpret_cast<const unsigned char*>(key->bytes.data())) != 0) {
    return absl::DataLossError(StrCat("the job's ", field, " has a bad header"));
  }
  std::string out(sealed.size() - kOverhead, '\0');
  unsigned char tag = 0;
  const std::string ad = AssociatedData(job_id, field, context);
  const size_t cipher_at = kMagic.size() + kIdBytes + kHeaderBytes;
  const int opened = crypto_secretstream_xchacha20poly1305_pull(
      &state, reinterpret_cast<unsigned char*>(out.data()), nullptr, &tag, bytes + cipher_at,
      sealed.size() - cipher_at, reinterpret_cast<const unsigned char*>(ad.data()), ad.size());
  sodium_memzero(&state, sizeof state);
  if (opened != 0 || tag != crypto_secretstream_xchacha20poly1305_TAG_FINAL) {
    return absl::DataLossError(
        StrCat("the job's ", field, " does not open: altered, truncated, or another job's"));
  }
  return out;
}

}  // namespace pillar::jobs
