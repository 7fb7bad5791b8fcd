#include "http/revocation.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>

#include "common/files.h"
#include "common/strings.h"

namespace pillar::http {
namespace {

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using CrlPtr = std::unique_ptr<X509_CRL, decltype(&X509_CRL_free)>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)>;
using ObjectPtr = std::unique_ptr<X509_OBJECT, decltype(&X509_OBJECT_free)>;

std::string NameOf(const X509_NAME* name) {
  char buffer[256];
  X509_NAME_oneline(name, buffer, sizeof buffer);
  return buffer;
}

// Whether a certificate of `store` named as the CRL's issuer signed it.
bool SignedByStoreCa(X509_STORE* store, X509_CRL* crl) {
  StoreCtxPtr ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store, nullptr, nullptr) != 1) return false;
  ObjectPtr object(
      X509_STORE_CTX_get_obj_by_subject(ctx.get(), X509_LU_X509, X509_CRL_get_issuer(crl)),
      X509_OBJECT_free);
  if (object == nullptr) return false;
  X509* ca = X509_OBJECT_get0_X509(object.get());
  return ca != nullptr && X509_CRL_verify(crl, X509_get0_pubkey(ca)) == 1;
}

}  // namespace

[[nodiscard]] absl::Status UseClientCrls(SSL_CTX* ctx, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadTrustedFile(path, kMaxCrlFileBytes);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(), StrCat("client_crl ", pem.status().message()));
  }
  BioPtr bio(BIO_new_mem_buf(pem->data(), int(pem->size())), BIO_free);
  if (bio == nullptr) return absl::ResourceExhaustedError("client_crl: out of memory");
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  size_t count = 0;
  ERR_clear_error();
  for (;;) {
    CrlPtr crl(PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr), X509_CRL_free);
    if (crl == nullptr) {
      // The end of the file reads as "no start line"; anything else is a CRL that does not parse.
      const unsigned long error = ERR_peek_last_error();
      ERR_clear_error();
      if (ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE) break;
      return absl::InvalidArgumentError(
          StrCat("client_crl ", path, ": CRL ", count + 1, " does not parse"));
    }
    const std::string issuer = NameOf(X509_CRL_get_issuer(crl.get()));
    if (!SignedByStoreCa(store, crl.get())) {
      return absl::InvalidArgumentError(StrCat("client_crl ", path, ": the CRL of ", issuer,
                                               " is not signed by a CA of client_ca"));
    }
    const ASN1_TIME* next_update = X509_CRL_get0_nextUpdate(crl.get());
    if (next_update != nullptr && X509_cmp_current_time(next_update) <= 0) {
      return absl::InvalidArgumentError(
          StrCat("client_crl ", path, ": the CRL of ", issuer,
                 " is past its nextUpdate (every client would be refused): fetch a current one"));
    }
    if (X509_STORE_add_crl(store, crl.get()) != 1) {
      return absl::InternalError(StrCat("client_crl ", path, ": cannot add the CRL of ", issuer));
    }
    ++count;
  }
  if (count == 0) return absl::InvalidArgumentError(StrCat("client_crl ", path, ": no CRL in it"));
  X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
  return absl::OkStatus();
}

}  // namespace pillar::http
