// What pillar's TLS contexts share, as a server (http/) and as a client of upstreams (upstream/):
// the TLS 1.2 suites it allows, how it loads a private key it read from a secret file, and how
// it reads the dates of certificates and CRLs.
//
//   PILLAR_ASSIGN_OR_RETURN(std::string pem, ReadSecretFile(path, kMaxPrivateKeyBytes));
//   absl::Status loaded = UsePrivateKeyPem(ctx, pem);   // after the certificate
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct asn1_string_st ASN1_TIME;

namespace pillar {

// TLS 1.2 suites with forward secrecy and authenticated encryption only (OpenSSL's defaults let
// a peer pick RSA key exchange, or CBC with SHA-1); TLS 1.3's suites are all of that kind.
inline constexpr char kTls12Suites[] = "ECDHE+AESGCM:ECDHE+CHACHA20";

// Makes the PEM private key `pem` the key of `ctx`, whose certificate is loaded already.
// InvalidArgument, in words that follow the key's name, when it is encrypted (OpenSSL would
// ask for its pass phrase on the terminal, and start-up wait there: none is ever asked), is no
// PEM private key, or is not the certificate's key (a key of another type than the
// certificate's loads, and every handshake fails).
[[nodiscard]] absl::Status UsePrivateKeyPem(SSL_CTX* ctx, std::string_view pem);

// The unix seconds of `time` (a certificate's notAfter, a CRL's nextUpdate); nullopt when it is
// null or does not parse.
std::optional<int64_t> UnixSeconds(const ASN1_TIME* time);

}  // namespace pillar
