#include "common/tls_keys.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <ctime>
#include <memory>

namespace pillar {
namespace {

int NoPassPhrase(char* /*buffer*/, int /*size*/, int /*writing*/, void* /*arg*/) { return 0; }

}  // namespace

[[nodiscard]] absl::Status UsePrivateKeyPem(SSL_CTX* ctx, std::string_view pem) {
  if (pem.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") != std::string_view::npos ||
      pem.find("Proc-Type: 4,ENCRYPTED") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        "is encrypted: pillar reads unencrypted keys, kept secret by their mode (0600)");
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), int(pem.size())),
                                                BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassPhrase, nullptr) : nullptr,
      EVP_PKEY_free);
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("is not a PEM private key");
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("does not match the certificate");
  }
  return absl::OkStatus();
}

std::optional<int64_t> UnixSeconds(const ASN1_TIME* time) {
  int days = 0, seconds = 0;
  if (time == nullptr || ASN1_TIME_diff(&days, &seconds, nullptr, time) != 1) return std::nullopt;
  return int64_t(std::time(nullptr)) + int64_t(days) * 86400 + seconds;
}

}  // namespace pillar
