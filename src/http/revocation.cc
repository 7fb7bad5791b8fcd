#include "http/revocation.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/tls_keys.h"

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

// Whether the CRL's authority key identifier, when it has one, names `ca` (OpenSSL finds a CRL's
// issuer by it: a CRL whose identifier names another key is never used, and every certificate
// it should cover fails "unable to get certificate CRL"; found by review helper-63).
bool IdentifiesCa(X509_CRL* crl, X509* ca) {
  auto* akid = static_cast<AUTHORITY_KEYID*>(
      X509_CRL_get_ext_d2i(crl, NID_authority_key_identifier, nullptr, nullptr));
  if (akid == nullptr) return true;
  X509_get_extension_flags(ca);  // reads the CA's own key identifier, which the check compares
  const bool names = X509_check_akid(ca, akid) == X509_V_OK;
  AUTHORITY_KEYID_free(akid);
  return names;
}

// The CAs of `store` named as the CRL's issuer (a CA whose key was rolled over has two); in
// `signed_by_one`, whether one of them signed it and is the CA its key identifier names.
size_t CasNamed(X509_STORE* store, X509_CRL* crl, bool* signed_by_one) {
  *signed_by_one = false;
  StoreCtxPtr ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store, nullptr, nullptr) != 1) return 0;
  STACK_OF(X509)* named = X509_STORE_CTX_get1_certs(ctx.get(), X509_CRL_get_issuer(crl));
  const size_t count = named == nullptr ? 0 : size_t(sk_X509_num(named));
  for (size_t i = 0; i < count && !*signed_by_one; ++i) {
    X509* ca = sk_X509_value(named, int(i));
    *signed_by_one = X509_CRL_verify(crl, X509_get0_pubkey(ca)) == 1 && IdentifiesCa(crl, ca);
  }
  sk_X509_pop_free(named, X509_free);
  return count;
}

// The extensions OpenSSL reads in a CRL and in its entries: any other that is critical fails
// every handshake the CRL is used in ("unhandled critical CRL extension").
bool KnownCrlExtension(int nid) {
  return nid == NID_crl_number || nid == NID_delta_crl || nid == NID_issuing_distribution_point ||
         nid == NID_authority_key_identifier;
}
bool KnownEntryExtension(int nid) { return nid == NID_crl_reason || nid == NID_invalidity_date; }

bool HasUnknownCritical(const STACK_OF(X509_EXTENSION) * extensions, bool (*known)(int)) {
  for (int i = 0; i < sk_X509_EXTENSION_num(extensions); ++i) {
    X509_EXTENSION* extension = sk_X509_EXTENSION_value(extensions, i);
    if (X509_EXTENSION_get_critical(extension) == 1 &&
        !known(OBJ_obj2nid(X509_EXTENSION_get_object(extension)))) {
      return true;
    }
  }
  return false;
}

// Why OpenSSL would not use `crl` as the complete list of its issuer's revocations, which is
// what the check needs; empty when it would. Without OpenSSL's extended CRL support, a delta CRL
// is taken for a complete list (the revocations only in its base are lost) and an indirect or
// reason-partitioned one is passed over (review helper-61); some entries revoke nothing (helper-
// 63); a critical extension OpenSSL does not read, or no nextUpdate, makes the list one that
// fails every handshake or is never stale (helper-62).
std::string WhyUnusable(X509_CRL* crl) {
  if (X509_CRL_get_ext_by_NID(crl, NID_delta_crl, -1) >= 0) {
    return "is a delta CRL: give the complete (base) CRL";
  }
  auto* idp = static_cast<ISSUING_DIST_POINT*>(
      X509_CRL_get_ext_d2i(crl, NID_issuing_distribution_point, nullptr, nullptr));
  if (idp != nullptr) {
    const bool partial =
        idp->indirectCRL > 0 || idp->onlysomereasons != nullptr || idp->onlyattr > 0;
    ISSUING_DIST_POINT_free(idp);
    if (partial) {
      return "is an indirect CRL, or lists only some reasons or attribute certificates: give "
             "the CA's complete CRL";
    }
  }
  // Found by review helper-62: each of these starts, then fails every handshake it is used in.
  if (HasUnknownCritical(X509_CRL_get0_extensions(crl), KnownCrlExtension)) {
    return "has a critical extension OpenSSL does not read";
  }
  STACK_OF(X509_REVOKED)* revoked = X509_CRL_get_REVOKED(crl);
  for (int i = 0; i < sk_X509_REVOKED_num(revoked); ++i) {
    const X509_REVOKED* entry = sk_X509_REVOKED_value(revoked, i);
    // Found by review helper-63: an entry naming another issuer (an indirect CRL's, critical or
    // not) moves it and every entry after it to that issuer, and removeFromCRL (a delta CRL's)
    // reads as "not revoked": either way the CA's own revocation silently does nothing.
    if (X509_REVOKED_get_ext_by_NID(entry, NID_certificate_issuer, -1) >= 0) {
      return "has an entry naming another issuer (an indirect CRL's): give the CA's own CRL";
    }
    auto* reason = static_cast<ASN1_ENUMERATED*>(
        X509_REVOKED_get_ext_d2i(entry, NID_crl_reason, nullptr, nullptr));
    const bool removed =
        reason != nullptr && ASN1_ENUMERATED_get(reason) == CRL_REASON_REMOVE_FROM_CRL;
    ASN1_ENUMERATED_free(reason);
    if (removed) return "has an entry removed from the CRL (a delta CRL's): give the complete CRL";
    if (HasUnknownCritical(X509_REVOKED_get0_extensions(entry), KnownEntryExtension)) {
      return "has an entry with a critical extension OpenSSL does not read";
    }
  }
  if (X509_CRL_get0_nextUpdate(crl) == nullptr) {
    return "has no nextUpdate (RFC 5280 requires one): nothing would say when it is stale";
  }
  return {};
}

// Whether `store` holds a CRL.
bool HoldsCrls(X509_STORE* store) {
  X509_STORE_lock(store);
  bool found = false;
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(store);
  for (int i = 0; i < sk_X509_OBJECT_num(objects) && !found; ++i) {
    found = X509_OBJECT_get_type(sk_X509_OBJECT_value(objects, i)) == X509_LU_CRL;
  }
  X509_STORE_unlock(store);
  return found;
}

// Whether `crl` can be one of the lists a listener checks, beside the ones `loaded` before it:
// the complete list of a CA of `store`, the only one of its issuer, within its dates.
[[nodiscard]] absl::Status CheckCrl(X509_STORE* store, X509_CRL* crl,
                                    const std::vector<CrlPtr>& loaded, const std::string& path) {
  const std::string issuer = NameOf(X509_CRL_get_issuer(crl));
  // One CRL an issuer: of two, OpenSSL uses the newest that is within its dates, so an older
  // list would quietly take over when the newer expires (found by review helper-61).
  for (const CrlPtr& seen : loaded) {
    if (X509_NAME_cmp(X509_CRL_get_issuer(seen.get()), X509_CRL_get_issuer(crl)) == 0) {
      return absl::InvalidArgumentError(StrCat("client_crl ", path, ": two CRLs of ", issuer,
                                               ": give each CA's current CRL once"));
    }
  }
  if (const std::string why = WhyUnusable(crl); !why.empty()) {
    return absl::InvalidArgumentError(
        StrCat("client_crl ", path, ": the CRL of ", issuer, " ", why));
  }
  bool signed_by_one = false;
  const size_t named = CasNamed(store, crl, &signed_by_one);
  if (!signed_by_one) {
    return absl::InvalidArgumentError(
        StrCat("client_crl ", path, ": the CRL of ", issuer,
               " is not signed by a CA of client_ca (or its authority key identifier names "
               "another key)"));
  }
  // Found by review helper-62: the certificates of the other key are checked against a list
  // their issuer did not sign, and fail; one list a name cannot hold both keys' revocations.
  if (named > 1) {
    return absl::InvalidArgumentError(
        StrCat("client_crl ", path, ": client_ca holds ", named, " CAs named ", issuer,
               " (a rolled key?): their certificates cannot be checked against one CRL; "
               "trust one of them, or give the new one a name of its own"));
  }
  if (X509_cmp_current_time(X509_CRL_get0_lastUpdate(crl)) > 0) {
    return absl::InvalidArgumentError(StrCat(
        "client_crl ", path, ": the CRL of ", issuer,
        " is dated in the future (every client would be refused until then): check the clocks"));
  }
  if (X509_cmp_current_time(X509_CRL_get0_nextUpdate(crl)) <= 0) {
    return absl::InvalidArgumentError(
        StrCat("client_crl ", path, ": the CRL of ", issuer,
               " is past its nextUpdate (every client would be refused): fetch a current one"));
  }
  return absl::OkStatus();
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
  // Found by review helper-62: OpenSSL loads the CRLs of the client_ca bundle too, where none of
  // the checks here would have read them (a newer one there, not listing a revocation, won).
  if (HoldsCrls(store)) {
    return absl::InvalidArgumentError(
        StrCat("client_crl ", path,
               ": client_ca holds CRLs too: keep the CAs there and every CRL in "
               "client_crl"));
  }
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
    PILLAR_RETURN_IF_ERROR(CheckCrl(store, crl.get(), loaded, path));
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

namespace {

// The CRLs `ctx` checks clients against, each with a reference of its own.
std::vector<CrlPtr> CrlsOf(SSL_CTX* ctx) {
  std::vector<CrlPtr> crls;
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  if (store == nullptr) return crls;
  X509_STORE_lock(store);
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(store);
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i) {
    X509_CRL* crl = X509_OBJECT_get0_X509_CRL(sk_X509_OBJECT_value(objects, i));
    if (crl != nullptr && X509_CRL_up_ref(crl) == 1) crls.emplace_back(crl, X509_CRL_free);
  }
  X509_STORE_unlock(store);
  return crls;
}

// Negative when `next` is older than `now` (both of one issuer), zero when as old.
int CompareAge(X509_CRL* next, X509_CRL* now) {
  using NumberPtr = std::unique_ptr<ASN1_INTEGER, decltype(&ASN1_INTEGER_free)>;
  NumberPtr next_number(
      static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(next, NID_crl_number, nullptr, nullptr)),
      ASN1_INTEGER_free);
  NumberPtr now_number(
      static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(now, NID_crl_number, nullptr, nullptr)),
      ASN1_INTEGER_free);
  if (next_number != nullptr && now_number != nullptr) {
    return ASN1_INTEGER_cmp(next_number.get(), now_number.get());
  }
  return ASN1_TIME_compare(X509_CRL_get0_lastUpdate(next), X509_CRL_get0_lastUpdate(now));
}

}  // namespace

namespace {

// A CRL's CA, as its history knows it: its name and the digest of the key that signed it (the
// CA of the store whose key verifies it; CheckCrl made sure there is one).
std::string CaOf(X509_STORE* store, X509_CRL* crl) {
  unsigned char* name = nullptr;
  const int length = i2d_X509_NAME(X509_CRL_get_issuer(crl), &name);
  std::string key = length > 0 ? std::string(reinterpret_cast<char*>(name), size_t(length)) : "";
  OPENSSL_free(name);
  StoreCtxPtr ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store, nullptr, nullptr) != 1) return key;
  STACK_OF(X509)* named = X509_STORE_CTX_get1_certs(ctx.get(), X509_CRL_get_issuer(crl));
  for (int i = 0; named != nullptr && i < sk_X509_num(named); ++i) {
    X509* ca = sk_X509_value(named, i);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (X509_CRL_verify(crl, X509_get0_pubkey(ca)) == 1 &&
        X509_pubkey_digest(ca, EVP_sha256(), digest, &size) == 1) {
      key.append("\n").append(reinterpret_cast<char*>(digest), size);
      break;
    }
  }
  sk_X509_pop_free(named, X509_free);
  return key;
}

}  // namespace

struct CrlHistory::Newest {
  std::map<std::string, CrlPtr> by_ca;
};

namespace {

// What a CRL's age is kept as in marks: its crlNumber plus one (0: none, or one past int64) and
// its lastUpdate (unix seconds).
struct CrlAge {
  int64_t number = 0;
  int64_t last_update = 0;
};

CrlAge AgeOf(X509_CRL* crl) {
  CrlAge age;
  std::unique_ptr<ASN1_INTEGER, decltype(&ASN1_INTEGER_free)> number(
      static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(crl, NID_crl_number, nullptr, nullptr)),
      ASN1_INTEGER_free);
  int64_t value = 0;
  if (number != nullptr && ASN1_INTEGER_get_int64(&value, number.get()) == 1 && value >= 0 &&
      value < INT64_MAX) {
    age.number = value + 1;
  }
  age.last_update = UnixSeconds(X509_CRL_get0_lastUpdate(crl)).value_or(0);
  return age;
}

}  // namespace

CrlHistory::CrlHistory() : newest_(std::make_unique<Newest>()) {}
CrlHistory::~CrlHistory() = default;

void CrlHistory::KeepMarks(RaiseMark raise, std::string prefix) {
  raise_ = std::move(raise);
  prefix_ = std::move(prefix);
}

[[nodiscard]] absl::Status CrlHistory::CheckNotOlder(SSL_CTX* ctx) const {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  const std::vector<CrlPtr> crls = CrlsOf(ctx);
  const auto older = [](X509_CRL* crl, std::string_view than) {
    return absl::InvalidArgumentError(
        StrCat("client_crl: the CRL of ", NameOf(X509_CRL_get_issuer(crl)),
               " is older than one already used", than,
               " (a lower crlNumber or an earlier lastUpdate): it would take back the "
               "revocations made since"));
  };
  std::vector<std::string> cas;
  {
    absl::MutexLock lock(&mu_);
    for (const CrlPtr& crl : crls) {
      cas.push_back(CaOf(store, crl.get()));
      auto seen = newest_->by_ca.find(cas.back());
      if (seen != newest_->by_ca.end() && CompareAge(crl.get(), seen->second.get()) < 0) {
        return older(crl.get(), "");
      }
    }
  }
  if (!raise_) return absl::OkStatus();
  for (size_t i = 0; i < crls.size(); ++i) {
    // Raising to 0 reads a mark: every kept value is above it.
    const std::string name = prefix_ + HexEncode(Sha256(cas[i]));
    const CrlAge age = AgeOf(crls[i].get());
    absl::StatusOr<int64_t> number = raise_(name + "/number", 0);
    absl::StatusOr<int64_t> last_update = raise_(name + "/last_update", 0);
    if (!number.ok() || !last_update.ok()) {
      const absl::Status& failed = number.ok() ? last_update.status() : number.status();
      return absl::UnavailableError(
          StrCat("cannot read the client CRL marks in the state store: ", failed.message()));
    }
    // Older by either mark: the newest seen may have had no number, or one past int64, and the
    // number mark then belongs to an older list (found by review helper-68: a list without a
    // number in between let an older numbered one back at the next start).
    const bool is_older =
        (age.number != 0 && age.number < *number) || age.last_update < *last_update;
    if (is_older) return older(crls[i].get(), " before pillar last started");
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status CrlHistory::Remember(SSL_CTX* ctx) {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  std::vector<CrlPtr> crls = CrlsOf(ctx);
  std::vector<std::pair<std::string, CrlAge>> marks;
  {
    absl::MutexLock lock(&mu_);
    for (CrlPtr& crl : crls) {
      std::string ca = CaOf(store, crl.get());
      if (raise_) marks.emplace_back(prefix_ + HexEncode(Sha256(ca)), AgeOf(crl.get()));
      CrlPtr& newest =
          newest_->by_ca.try_emplace(std::move(ca), nullptr, X509_CRL_free).first->second;
      if (newest == nullptr || CompareAge(crl.get(), newest.get()) > 0) newest = std::move(crl);
    }
  }
  for (const auto& [name, age] : marks) {
    absl::StatusOr<int64_t> raised = raise_(name + "/last_update", age.last_update);
    if (raised.ok() && age.number != 0) raised = raise_(name + "/number", age.number);
    if (!raised.ok()) {
      return absl::UnavailableError(StrCat("cannot keep the client CRL marks in the state store: ",
                                           raised.status().message()));
    }
  }
  return absl::OkStatus();
}

bool SameCrls(SSL_CTX* a, SSL_CTX* b) {
  const std::vector<CrlPtr> theirs = CrlsOf(b);
  for (const CrlPtr& crl : CrlsOf(a)) {
    for (const CrlPtr& other : theirs) {
      if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_CRL_get_issuer(other.get())) == 0 &&
          X509_CRL_match(crl.get(), other.get()) != 0) {
        return false;
      }
    }
  }
  return true;
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
    const std::optional<int64_t> end =
        UnixSeconds(crl != nullptr ? X509_CRL_get0_nextUpdate(crl) : nullptr);
    if (end) earliest = std::min(earliest.value_or(*end), *end);
  }
  X509_STORE_unlock(store);
  return earliest;
}

}  // namespace pillar::http
