#include "http/tls_context.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/time/time.h"
#include "common/crypto.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/tls_keys.h"
#include "http/peer_identity.h"
#include "http/revocation.h"

namespace pillar::http::internal {

namespace ssl = boost::asio::ssl;

namespace {

// A PEM private key, even RSA 16384 with its chain of comments, is far below this.
constexpr std::uintmax_t kMaxPrivateKeyBytes = 1 << 20;

// The private key is read by ReadSecretFile, which refuses a file its group or others may read
// (as ssh refuses such a key), and OpenSSL loads the bytes read just after that check instead
// of opening the path again on its own.
[[nodiscard]] absl::Status LoadPrivateKey(const ListenerOptions& options, ssl::context& context) {
  absl::StatusOr<std::string> pem = ReadSecretFile(options.tls_private_key, kMaxPrivateKeyBytes);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(), StrCat("listener '", options.name,
                                                    "': tls_private_key ", pem.status().message()));
  }
  const absl::Status loaded = UsePrivateKeyPem(context.native_handle(), *pem);
  OPENSSL_cleanse(pem->data(), pem->size());
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(StrCat("listener '", options.name, "': tls_private_key ",
                                             options.tls_private_key, " ", loaded.message()));
  }
  return absl::OkStatus();
}

// What OpenSSL leaves to the application (found by review helper-59): the TLS 1.2 suites
// (kTls12Suites), the server's order of preference, no renegotiation (refused by OpenSSL 3's
// default, said here), and buffers released while a connection idles.
[[nodiscard]] absl::Status HardenTls(const ListenerOptions& options, ssl::context& context) {
  SSL_CTX* ctx = context.native_handle();
  if (SSL_CTX_set_cipher_list(ctx, kTls12Suites) != 1) {
    return absl::InternalError(StrCat("listener '", options.name, "': cannot set TLS suites"));
  }
  SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  return absl::OkStatus();
}

// Without a session id context, OpenSSL answers every attempt to resume a session (by id or
// ticket; TLS 1.2, and TLS 1.3 in OpenSSL 3.0 too) on a listener that verifies client
// certificates with a fatal alert (SESSION_ID_CONTEXT_UNINITIALIZED): the connection fails, and
// the client must reconnect without its session. The context is a digest of the listener's
// name and its client certificate rules, so a session is resumed only under the rules it was
// verified by. It is set on every TLS listener; on those that ask for no certificate it changes
// nothing.
[[nodiscard]] absl::Status SetSessionIdContext(const ListenerOptions& options,
                                               ssl::context& context) {
  const std::string id = Sha256(StrCat("pillar listener\n", options.name, "\n", options.client_ca,
                                       "\n", int(options.client_certificates), "\n",
                                       int(options.client_identity), "\n", options.client_crl));
  static_assert(SSL_MAX_SID_CTX_LENGTH >= 32, "a SHA-256 digest is the session id context");
  if (SSL_CTX_set_session_id_context(context.native_handle(),
                                     reinterpret_cast<const unsigned char*>(id.data()),
                                     unsigned(id.size())) != 1) {
    return absl::InternalError(
        StrCat("listener '", options.name, "': cannot set the TLS session id context"));
  }
  return absl::OkStatus();
}

// A certificate chain, even of RSA 16384 certificates with comments, is far below this.
constexpr std::uintmax_t kMaxCertificateChainBytes = 1 << 20;

// A client CA bundle of thousands of CAs is still far below this.
constexpr std::uintmax_t kMaxCaBundleBytes = 16 << 20;

// The client CA bundle decides who may authenticate: whoever can write it can add a CA of
// their own and name any client. So it is read as a trusted file (owned by pillar's user or
// root, written by nobody else; checked on the descriptor read), as the CRLs are, and OpenSSL
// takes the bytes read instead of opening the path again. Certificates and CRLs go to the store
// as load_verify_file would put them (CRLs there are refused later, UseClientCrls).
[[nodiscard]] absl::Status LoadClientCas(const ListenerOptions& options, ssl::context& context) {
  absl::StatusOr<std::string> pem = ReadTrustedFile(options.client_ca, kMaxCaBundleBytes);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(), StrCat("listener '", options.name, "': client_ca ",
                                                    pem.status().message()));
  }
  const auto refused = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("client_ca ", options.client_ca, ": ", why));
  };
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem->data(), int(pem->size())),
                                                BIO_free);
  using Infos = std::unique_ptr<STACK_OF(X509_INFO), void (*)(STACK_OF(X509_INFO)*)>;
  Infos infos(
      bio == nullptr ? nullptr : PEM_X509_INFO_read_bio(bio.get(), nullptr, nullptr, nullptr),
      [](STACK_OF(X509_INFO) * list) { sk_X509_INFO_pop_free(list, X509_INFO_free); });
  ERR_clear_error();
  if (infos == nullptr) return refused("not a PEM bundle of certificates");
  X509_STORE* store = SSL_CTX_get_cert_store(context.native_handle());
  int certificates = 0;
  for (int i = 0; i < sk_X509_INFO_num(infos.get()); ++i) {
    const X509_INFO* info = sk_X509_INFO_value(infos.get(), i);
    if (info->x509 != nullptr) {
      if (X509_STORE_add_cert(store, info->x509) != 1) return refused("a certificate is refused");
      ++certificates;
    }
    if (info->crl != nullptr && X509_STORE_add_crl(store, info->crl) != 1) {
      return refused("a CRL is refused");
    }
  }
  if (certificates == 0) return refused("holds no certificate");
  return absl::OkStatus();
}

// Mutual TLS: the listener asks for client certificates and verifies them against client_ca
// (and client_crl); the chain's end travels in session tickets (peer_identity.h).
[[nodiscard]] absl::Status VerifyClients(const ListenerOptions& options, ssl::context& context) {
  if (options.client_certificates == ListenerOptions::ClientCertificates::kNone) {
    return absl::OkStatus();
  }
  if (options.client_ca.empty()) {
    return absl::InvalidArgumentError(
        StrCat("listener '", options.name, "': client certificates need client_ca"));
  }
  PILLAR_RETURN_IF_ERROR(LoadClientCas(options, context));
  if (!options.client_crl.empty()) {
    if (absl::Status s = UseClientCrls(context.native_handle(), options.client_crl); !s.ok()) {
      return absl::Status(s.code(), StrCat("listener '", options.name, "': ", s.message()));
    }
  }
  auto mode = ssl::verify_peer;
  if (options.client_certificates == ListenerOptions::ClientCertificates::kRequire) {
    mode |= ssl::verify_fail_if_no_peer_cert;
  }
  context.set_verify_mode(mode);
  if (!KeepChainEndInSessions(context.native_handle())) {
    return absl::InternalError(
        StrCat("listener '", options.name, "': cannot set the TLS ticket callbacks"));
  }
  return absl::OkStatus();
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(
    const ListenerOptions& options) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
  // Read by pillar (a regular file of bounded size, opened without blocking: a FIFO or a device
  // in its place hung or spun the reload, found by review helper-64), and trusted as client_ca
  // is: whoever could write it could break every reload that follows (a change is taken whole).
  absl::StatusOr<std::string> chain =
      ReadTrustedFile(options.tls_certificate, kMaxCertificateChainBytes);
  if (!chain.ok()) {
    return absl::Status(
        chain.status().code(),
        StrCat("listener '", options.name, "': tls_certificate ", chain.status().message()));
  }
  boost::system::error_code ec;
  context->use_certificate_chain(boost::asio::buffer(*chain), ec);
  if (ec) {
    return absl::InvalidArgumentError(
        StrCat("tls_certificate ", options.tls_certificate, ": ", ec.message()));
  }
  PILLAR_RETURN_IF_ERROR(LoadPrivateKey(options, *context));
  PILLAR_RETURN_IF_ERROR(HardenTls(options, *context));
  PILLAR_RETURN_IF_ERROR(SetSessionIdContext(options, *context));
  PILLAR_RETURN_IF_ERROR(VerifyClients(options, *context));
  return context;
}

// When what the TLS listener relies on stops being valid, as a metric an alert can watch: its
// certificate's end, and its client CRLs' earliest nextUpdate, past which every client they
// cover is refused, which is said on stderr too.
void PublishTlsExpiry(const ListenerOptions& options, SSL_CTX* ctx,
                      monitor::Family<monitor::Gauge>* gauge) {
  const std::optional<int64_t> certificate =
      UnixSeconds(X509_get0_notAfter(SSL_CTX_get0_certificate(ctx)));
  if (gauge != nullptr && certificate) {
    gauge->Get({options.name, "certificate"}).Set(double(*certificate));
  }
  const std::optional<int64_t> crls = RevocationEnd(ctx);
  if (!crls) return;
  if (gauge != nullptr) gauge->Get({options.name, "client_crl"}).Set(double(*crls));
  const std::string until =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(*crls), absl::UTCTimeZone());
  std::fprintf(stderr,
               "pillar: listener '%s': client_crl is current until %s; %s before then, or every "
               "client it covers is refused\n",
               options.name.c_str(), until.c_str(),
               options.tls_reload > absl::ZeroDuration()
                   ? "publish a new one in its file (read again when it changes)"
                   : "it is read at start (tls_reload_ms = 0): restart pillar with a new one");
}

namespace {

// SHA-256 digests of `objects` (certificates and CRLs as OpenSSL holds them), one after another.
template <typename Each>
void AppendDigests(std::string& digests, const Each& each) {
  const auto add = [&digests](auto digest_of, auto* object) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (object != nullptr && digest_of(object, EVP_sha256(), md, &size) == 1) {
      digests.append(reinterpret_cast<char*>(md), size);
    }
    digests.push_back('|');
  };
  each(add);
}

}  // namespace

std::string VerificationDigest(SSL_CTX* ctx) {
  std::string digests;
  AppendDigests(digests, [ctx](const auto& add) {
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    X509_STORE_lock(store);
    STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(store);
    for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i) {
      X509_OBJECT* object = sk_X509_OBJECT_value(objects, i);
      if (X509* cert = X509_OBJECT_get0_X509(object)) add(X509_digest, cert);
      if (X509_CRL* crl = X509_OBJECT_get0_X509_CRL(object)) add(X509_CRL_digest, crl);
    }
    X509_STORE_unlock(store);
  });
  return Sha256(digests);
}

std::string ContextDigest(SSL_CTX* ctx) {
  std::string digests = VerificationDigest(ctx);
  AppendDigests(digests, [ctx](const auto& add) {
    add(X509_digest, SSL_CTX_get0_certificate(ctx));
    STACK_OF(X509)* chain = nullptr;
    SSL_CTX_get0_chain_certs(ctx, &chain);
    for (int i = 0; chain != nullptr && i < sk_X509_num(chain); ++i) {
      add(X509_digest, sk_X509_value(chain, i));
    }
  });
  return Sha256(digests);
}

TlsFileStamps StampTlsFiles(const ListenerOptions& options) {
  const auto stamp = [](const std::string& path) {
    return path.empty() ? FileStamp{} : StampOf(path);
  };
  return {stamp(options.tls_certificate), stamp(options.tls_private_key), stamp(options.client_ca),
          stamp(options.client_crl)};
}

[[nodiscard]] absl::Status ListenerTls::StartHistory(const std::string& listener, RaiseMark raise) {
  if (raise) crl_history_.KeepMarks(std::move(raise), StrCat("tls/", listener, "/crl/"));
  const std::shared_ptr<boost::asio::ssl::context> context = Get().context;
  SSL_CTX* ctx = context->native_handle();
  if (absl::Status checked = crl_history_.CheckNotOlder(ctx); !checked.ok()) {
    return checked.code() == absl::StatusCode::kInvalidArgument
               ? absl::InvalidArgumentError(StrCat("listener '", listener, "': ", checked.message(),
                                                   "; publish the current CRL, or if this list is "
                                                   "meant, remove the marks named tls/",
                                                   listener,
                                                   "/crl/ from the state file's high_water table"))
               : checked;
  }
  return crl_history_.Remember(ctx);
}

}  // namespace pillar::http::internal
