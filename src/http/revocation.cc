#include "http/revocation.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <vector>

#include "common/files.h"
#include "common/strings.h"

namespace pillar::http {
namespace {

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using CrlPtr = std::unique_ptr<X509_CRL, decltype(&X509_CRL_free)>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)>;

std::string NameOf(const X509_NAME* name) {
  char buffer[256];
  X509_NAME_oneline(name, buffer, sizeof buffer);
  return buffer;
}

// Whether a certificate of `store` named as the CRL's issuer signed it (any of them: a CA whose
// key was rolled over has two certificates of one name).
bool SignedByStoreCa(X509_STORE* store, X509_CRL* crl) {
  StoreCtxPtr ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store, nullptr, nullptr) != 1) return false;
  STACK_OF(X509)* named = X509_STORE_CTX_get1_certs(ctx.get(), X509_CRL_get_issuer(crl));
  bool signed_by_one = false;
  for (int i = 0; named != nullptr && i < sk_X509_num(named) && !signed_by_one; ++i) {
    signed_by_one = X509_CRL_verify(crl, X509_get0_pubkey(sk_X509_value(named, i))) == 1;
  }
  sk_X509_pop_free(named, X509_free);
  return signed_by_one;
}

// Why OpenSSL would not read `crl` as the complete list of its issuer's revocations, which is
// what the check needs (found by review helper-61); empty when it would. Without OpenSSL's
// extended CRL support, a delta CRL is taken for a complete list (the revocations only in its
// base are lost), and an indirect or reason-partitioned CRL is passed over.
std::string NotACompleteList(X509_CRL* crl) {
  if (X509_CRL_get_ext_by_NID(crl, NID_delta_crl, -1) >= 0) {
    return "is a delta CRL: give the complete (base) CRL";
  }
  auto* idp = static_cast<ISSUING_DIST_POINT*>(
      X509_CRL_get_ext_d2i(crl, NID_issuing_distribution_point, nullptr, nullptr));
  if (idp == nullptr) return {};
  const bool partial = idp->indirectCRL > 0 || idp->onlysomereasons != nullptr;
  ISSUING_DIST_POINT_free(idp);
  return partial ? "is an indirect CRL or lists only some reasons: give the CA's complete CRL" : "";
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
  std::vector<CrlPtr> loaded;
  ERR_clear_error();
  for (;;) {
    CrlPtr crl(PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr), X509_CRL_free);
    if (crl == nullptr) {
      // The end of the file reads as "no start line"; anything else is a CRL that does not parse.
      const unsigned long error = ERR_peek_last_error();
      ERR_clear_error();
      if (ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE) break;
      return absl::InvalidArgumentError(
          StrCat("client_crl ", path, ": CRL ", loaded.size() + 1, " does not parse"));
    }
    const std::string issuer = NameOf(X509_CRL_get_issuer(crl.get()));
    // One CRL an issuer: of two, OpenSSL uses the newest that is within its dates, so an older
    // list would quietly take over when the newer expires (found by review helper-61).
    for (const CrlPtr& seen : loaded) {
      if (X509_NAME_cmp(X509_CRL_get_issuer(seen.get()), X509_CRL_get_issuer(crl.get())) == 0) {
        return absl::InvalidArgumentError(StrCat("client_crl ", path, ": two CRLs of ", issuer,
                                                 ": give each CA's current CRL once"));
      }
    }
    if (const std::string why = NotACompleteList(crl.get()); !why.empty()) {
      return absl::InvalidArgumentError(
          StrCat("client_crl ", path, ": the CRL of ", issuer, " ", why));
    }
    if (!SignedByStoreCa(store, crl.get())) {
      return absl::InvalidArgumentError(StrCat("client_crl ", path, ": the CRL of ", issuer,
                                               " is not signed by a CA of client_ca"));
    }
    if (X509_cmp_current_time(X509_CRL_get0_lastUpdate(crl.get())) > 0) {
      return absl::InvalidArgumentError(StrCat(
          "client_crl ", path, ": the CRL of ", issuer,
          " is dated in the future (every client would be refused until then): check the clocks"));
    }
    const ASN1_TIME* next_update = X509_CRL_get0_nextUpdate(crl.get());
    if (next_update != nullptr && X509_cmp_current_time(next_update) <= 0) {
      return absl::InvalidArgumentError(
          StrCat("client_crl ", path, ": the CRL of ", issuer,
                 " is past its nextUpdate (every client would be refused): fetch a current one"));
    }
    loaded.push_back(std::move(crl));
  }
  if (loaded.empty()) {
    return absl::InvalidArgumentError(StrCat("client_crl ", path, ": no CRL in it"));
  }
  // Added only once all are known good: a refused file leaves the store as it was.
  for (const CrlPtr& crl : loaded) {
    if (X509_STORE_add_crl(store, crl.get()) != 1) {
      return absl::InternalError(StrCat("client_crl ", path, ": cannot add the CRL of ",
                                        NameOf(X509_CRL_get_issuer(crl.get()))));
    }
  }
  X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
  return absl::OkStatus();
}

std::optional<int64_t> RevocationEnd(SSL_CTX* ctx) {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  if (store == nullptr ||
      (X509_VERIFY_PARAM_get_flags(X509_STORE_get0_param(store)) & X509_V_FLAG_CRL_CHECK) == 0) {
    return std::nullopt;
  }
  std::optional<int64_t> earliest;
  X509_STORE_lock(store);
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(store);
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i) {
    X509_CRL* crl = X509_OBJECT_get0_X509_CRL(sk_X509_OBJECT_value(objects, i));
    const ASN1_TIME* next = crl != nullptr ? X509_CRL_get0_nextUpdate(crl) : nullptr;
    int days = 0, seconds = 0;
    if (next == nullptr || ASN1_TIME_diff(&days, &seconds, nullptr, next) != 1) continue;
    const int64_t end = int64_t(std::time(nullptr)) + int64_t(days) * 86400 + seconds;
    earliest = std::min(earliest.value_or(end), end);
  }
  X509_STORE_unlock(store);
  return earliest;
}

}  // namespace pillar::http
