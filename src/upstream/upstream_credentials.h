// What a remote model version presents to its upstreams: the bearer token of its
// credentials_file and, for https endpoints, the TLS context that checks them and holds its
// client certificate ([remote] in docs/formats/model_store.md).
//
//   PILLAR_ASSIGN_OR_RETURN(SecretString token, ReadToken("/etc/pillar/upstream.token"));
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/crypto.h"
#include "models/remote_config.h"

namespace pillar::upstream {

// The token of a credentials file: a secret file (common/files.h: a regular file its group and
// others cannot read, checked on the descriptor that is read) holding one line without blanks
// or control bytes. FailedPrecondition saying which rule it breaks, never showing the token.
[[nodiscard]] absl::StatusOr<SecretString> ReadToken(const std::string& path);

// What goes in the request's head to present the token: `header: value`, as [remote]
// api_key_header says ("authorization": "Bearer <token>"; any other name, Azure OpenAI's
// "api-key" among them: the token as it is).
struct UpstreamCredential {
  std::string header;
  SecretString value;
};
UpstreamCredential CredentialFor(const models::RemoteConfig& remote, const SecretString& token);

// Takes the token out of text an upstream wrote (an error, a name), which may echo it back whole
// or in part: every run of at least kShownTokenRun bytes that is also in the token, in any case,
// becomes "[redacted]", and so does a start of the token (4 bytes or more) that ends the text (a
// text cut short before it got here). OpenAI-style servers quote half of a key they refuse
// (review helper-93: "Incorrect API key provided: sekrit-a85a...*****0892"); the last four
// characters they also show, as they show them to the key's owner, are kept. An upstream that
// re-encodes the token (base64, percent-encoding, every byte apart) is not in the model: it holds
// the token anyway, and gains nothing by showing it. Built once per token; not copied.
class TokenRedactor {
 public:
  static constexpr size_t kShownTokenRun = 8;
  explicit TokenRedactor(std::string_view token);
  ~TokenRedactor();
  TokenRedactor(const TokenRedactor&) = delete;
  TokenRedactor& operator=(const TokenRedactor&) = delete;

  std::string Redact(std::string_view text) const;

 private:
  std::string folded_;                          // the token in lower case; wiped at the end
  absl::flat_hash_set<std::string_view> runs_;  // each kShownTokenRun bytes of folded_
};

// A TLS 1.2+ client context: the CA bundle of [remote] ca_file (or the system's), and the client
// certificate and key when both are configured.
[[nodiscard]] absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(
    const models::RemoteConfig& remote);

}  // namespace pillar::upstream
