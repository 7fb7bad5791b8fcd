#include "upstream/upstream_credentials.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "common/files.h"
#include "common/strings.h"
#include "common/tls_keys.h"

namespace pillar::upstream {

namespace asio = boost::asio;

// A credentials file is a secret: pillar refuses one that others could read, as ssh does a key.
[[nodiscard]] absl::StatusOr<SecretString> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> read = ReadSecretFile(path, 16 * 1024);
  if (!read.ok()) {
    return absl::FailedPreconditionError(StrCat("credentials_file: ", read.status().message()));
  }
  std::string text = std::move(*read);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x21 || c == '\x7f') {
      WipeString(text);
      return absl::FailedPreconditionError(
          StrCat("credentials_file ", path, " must hold one token: no blanks or control bytes"));
    }
  }
  if (text.empty())
    return absl::FailedPreconditionError(StrCat("credentials_file ", path, " is empty"));
  return SecretString(std::move(text));
}

namespace {

std::string Folded(std::string_view text) {
  std::string folded(text);
  for (char& c : folded) c = char(std::tolower(static_cast<unsigned char>(c)));
  return folded;
}

}  // namespace

TokenRedactor::TokenRedactor(std::string_view token) : folded_(Folded(token)) {
  for (size_t at = 0; at + kShownTokenRun <= folded_.size(); ++at) {
    runs_.insert(std::string_view(folded_).substr(at, kShownTokenRun));
  }
}

TokenRedactor::~TokenRedactor() {
  runs_.clear();
  WipeString(folded_);
}

std::string TokenRedactor::Redact(std::string_view text) const {
  if (folded_.empty()) return std::string(text);
  const std::string folded_text = Folded(text);
  const std::string_view seen(folded_text);
  const std::string_view token(folded_);
  // The spans to take out, in order, merged where they touch or overlap.
  std::vector<std::pair<size_t, size_t>> spans;
  auto cover = [&spans](size_t begin, size_t end) {
    if (!spans.empty() && spans.back().second >= begin) {
      spans.back().second = std::max(spans.back().second, end);
    } else {
      spans.emplace_back(begin, end);
    }
  };
  if (token.size() < kShownTokenRun) {  // no run that long: the token whole
    for (size_t at = seen.find(token); at != std::string_view::npos;
         at = seen.find(token, at + token.size())) {
      cover(at, at + token.size());
    }
  } else {
    for (size_t at = 0; at + kShownTokenRun <= seen.size(); ++at) {
      if (runs_.contains(seen.substr(at, kShownTokenRun))) cover(at, at + kShownTokenRun);
    }
  }
  for (size_t n = std::min(seen.size(), token.size() - 1); n >= 4; --n) {
    if (seen.substr(seen.size() - n) == token.substr(0, n)) {
      cover(seen.size() - n, seen.size());
      break;
    }
  }
  std::string out;
  out.reserve(text.size());
  size_t copied = 0;
  for (const auto& [begin, end] : spans) {
    out.append(text.substr(copied, begin - copied));
    out.append("[redacted]");
    copied = end;
  }
  out.append(text.substr(copied));
  return out;
}

[[nodiscard]] absl::StatusOr<std::shared_ptr<asio::ssl::context>> MakeTlsContext(
    const models::RemoteConfig& remote) {
  auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1);
  // The listeners' policy (http/server.cc): TLS 1.2 suites with forward secrecy and AEAD only.
  if (SSL_CTX_set_cipher_list(tls->native_handle(), kTls12Suites) != 1) {
    return absl::InternalError("cannot set the TLS suites");
  }
  boost::system::error_code ec;
  if (remote.ca_file.empty()) {
    tls->set_default_verify_paths(ec);
  } else {
    tls->load_verify_file(remote.ca_file, ec);
  }
  if (ec) return absl::FailedPreconditionError(StrCat("[remote] ca_file: ", ec.message()));
  if (!remote.client_certificate.empty()) {
    tls->use_certificate_chain_file(remote.client_certificate, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          StrCat("[remote] client_certificate ", remote.client_certificate, ": ", ec.message()));
    }
    // A secret file, as the listeners' keys and the credentials file are (found by review
    // helper-59: one others could read was used); loaded from the bytes whose mode was checked,
    // then wiped.
    absl::StatusOr<std::string> pem = ReadSecretFile(remote.client_key, 64 * 1024);
    if (!pem.ok()) {
      return absl::FailedPreconditionError(StrCat("[remote] client_key: ", pem.status().message()));
    }
    const absl::Status loaded = UsePrivateKeyPem(tls->native_handle(), *pem);
    WipeString(*pem);
    if (!loaded.ok()) {
      return absl::FailedPreconditionError(
          StrCat("[remote] client_key ", remote.client_key, " ", loaded.message()));
    }
  }
  return tls;
}

UpstreamCredential CredentialFor(const models::RemoteConfig& remote, const SecretString& token) {
  if (remote.api_key_header == "authorization") {
    return {"Authorization", SecretString(StrCat("Bearer ", token.view()))};
  }
  return {remote.api_key_header, SecretString(std::string(token.view()))};
}

}  // namespace pillar::upstream
