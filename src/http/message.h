// The HTTP request and response as the rest of pillar sees them: plain values, no Beast types,
// so that the pipeline and its tests never include Boost.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/held_bytes.h"

namespace pillar::http {

// The header with which a client (or a pillar in front) says how long it will wait, in ms.
inline constexpr std::string_view kTimeoutHeader = "X-Pillar-Timeout-Ms";
// The priority class a caller asks for (high, normal, low): it may lower its own class, never
// raise it above what its credential allows (stages/execute_stage.h).
inline constexpr std::string_view kPriorityHeader = "X-Pillar-Priority";
// RFC 7240 Prefer: a request with the preference respond-async is run as a job (jobs/).
inline constexpr std::string_view kPreferHeader = "Prefer";

// Whether a Prefer header's value (RFC 7240: preferences separated by commas, each a token with
// an optional value and parameters) holds respond-async.
bool PrefersRespondAsync(std::string_view prefer);

struct Route;

struct Request {
  std::string_view listener;  // the listener's name, e.g. "data" or "admin"
  std::string method;
  std::string target;
  std::string authorization;  // the Authorization header, empty when absent
  std::string body;
  std::string remote;  // peer address
  // The verified client certificate's identity (per the listener's client_identity), when the
  // listener asks for client certificates and the client sent a valid one; else empty.
  std::string peer_identity;
  // A verified client certificate came that names nobody: two names of the kind the listener
  // reads, or past the end of its chain (peer_identity is then empty).
  bool peer_unnamed = false;
  // That certificate and the ones the client sent with it (DER, one after the other), only on a
  // request to be run as a job (respond_async) from a named client: the job checks it again
  // against the listener's CAs and CRLs when it runs.
  std::string peer_certificate;
  const Route* route = nullptr;
  // Captured path parameters, in pattern order, e.g. {"model", "digits"}.
  std::vector<std::pair<std::string_view, std::string>> params;
  int64_t received_ns = 0;  // monotonic time when the request was fully read
  // X-Pillar-Timeout-Ms: how long the client will wait, when it said so (1 ms .. a day); 0 when
  // absent or not a number in that range. Another pillar in front sends what it has left.
  int64_t timeout_ms = 0;
  // X-Pillar-Priority as sent (cut to 16 bytes); empty when absent.
  std::string priority;
  // True when a Prefer header holds the preference respond-async.
  bool respond_async = false;
  // Set by Handler::BeforeBody, for a request with a body, before any of it is read: the caller
  // it found (opaque to this layer; the handler's own type) and when, or why it found none.
  std::shared_ptr<const void> caller;
  int64_t caller_checked_ns = 0;  // monotonic
  int64_t caller_check_ns = 0;    // what the check took, for the server-side overhead
  std::string caller_refusal;
  // BeforeBody refused the caller: the body was never read (`body` is empty) and the connection
  // closes after the answer.
  bool body_unread = false;

  std::string_view Param(std::string_view name) const {
    for (const auto& [key, value] : params) {
      if (key == name) return value;
    }
    return {};
  }
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Kept by the connection until the client has taken the answer (or the connection ends), told
  // meanwhile what the socket has yet to deliver: a place in a budget the answer's bytes count
  // against (jobs/fetch_budget.h).
  std::shared_ptr<HeldBytes> held = nullptr;
};

}  // namespace pillar::http
