#include "app/request_handler.h"

#include "app/routes.h"
#include "common/crypto.h"
#include "common/strings.h"
#include "guard/screen.h"

namespace pillar::app {
namespace {

// What the access log keeps of a refused request's target (the HTTP layer hands it whole: it is
// redacted before it is cut).
constexpr size_t kMaxRejectedTarget = 1024;
// A method is a token of any length (RFC 9110): the real ones are short.
constexpr size_t kMaxRejectedMethod = 32;
// A refusal's message, after its redaction (the HTTP layer's quote nothing a client wrote).
constexpr size_t kMaxRejectedError = 1024;

}  // namespace

RequestHandler::RequestHandler(pipeline::Chain& chain, std::function<bool()> models_ready,
                               monitor::AccessLog* access_log,
                               const identity::Authenticator* authenticator, const Clock& clock)
    : chain_(chain),
      models_ready_(std::move(models_ready)),
      access_log_(access_log),
      authenticator_(authenticator),
      clock_(clock),
      id_prefix_(HexEncode(RandomBytes(4))) {}

bool RequestHandler::BeforeBody(http::Request& request) {
  if (authenticator_ == nullptr) return true;
  // Every route but liveness and readiness (which take no body) authenticates its caller, and
  // which route this is does not change who the caller is. Done once: the stage takes the
  // answer, whichever it is.
  const int64_t began_ns = clock_.MonotonicNanos();
  const int64_t now_us = clock_.UnixMicros();
  absl::StatusOr<std::shared_ptr<const identity::Principal>> who = authenticator_->Authenticate(
      request.authorization, request.peer_identity, request.listener, now_us);
  request.caller_check_ns = clock_.MonotonicNanos() - began_ns;
  if (!who.ok()) {
    request.caller_refusal = std::string(who.status().message());
    return false;
  }
  request.caller = std::move(*who);
  request.caller_checked_ns = began_ns;
  return true;
}

std::string RequestHandler::NextRequestId() {
  // A random per-process prefix and a sequence: unique across restarts and replicas, and cheap.
  return StrCat(id_prefix_, "-", Hex(sequence_.fetch_add(1, std::memory_order_relaxed), 8));
}

void RequestHandler::OnRejected(const http::Rejection& rejection) {
  if (access_log_ == nullptr || !access_log_->enabled()) return;
  const std::string request_id = NextRequestId();
  monitor::AccessRecord record;
  record.request_id = request_id;
  record.listener = rejection.listener;
  record.remote = rejection.remote;
  // The method of a refused request is any token the client sent, escapes included (reviews
  // helper-136 and 137: a key as the method was logged whole, 15,000 bytes of one too, and an
  // escaped email as sent).
  const std::string method = guard::RedactPath(rejection.method);
  record.method = CutForLog(method, kMaxRejectedMethod);
  // What was read of a refused request is the client's, and may hold anything: what the
  // guard's recognizers find in it is not kept, and it is cut after that (a cut first can leave
  // a secret no recognizer knows, an email without its domain: review helper-135).
  const std::string path = guard::RedactPath(rejection.target);
  const std::string error = guard::RedactPath(rejection.message);
  record.path = CutForLog(path, kMaxRejectedTarget);
  record.status = rejection.status;
  record.outcome = "rejected";
  record.reason = rejection.reason;
  record.error = CutForLog(error, kMaxRejectedError);
  access_log_->Write(record);
}

void RequestHandler::OnAnswerCut(const http::CutAnswer& cut) {
  if (access_log_ == nullptr || !access_log_->enabled()) return;
  // A second line under the request's id: its first said how it was answered, written as the
  // answer was handed over; this one says that the answer did not reach the client whole.
  monitor::AccessRecord record;
  record.request_id = cut.request_id;
  record.listener = cut.listener;
  record.remote = cut.remote;
  record.status = cut.status;
  record.outcome = "cut";
  record.reason = cut.reason;
  const std::string error = StrCat(
      "the answer did not reach the client whole (", cut.unsent, " bytes undelivered): ",
      cut.reason == "write_timeout"   ? "the client did not take it within the write timeout"
      : cut.reason == "answer_unread" ? "the client had not read it a write timeout after the end"
      : cut.reason == "stopped"       ? "the server closed the connection"
                                      : "the connection ended under it (the client reset it)");
  record.error = error;
  access_log_->Write(record);
}

void RequestHandler::Handle(http::Request request, std::shared_ptr<http::ResponseSink> sink) {
  const int route = request.route->id;
  if (route == kLive) {
    sink->Send(http::Response{200, "application/json", "{\"live\":true}", {}});
    return;
  }
  if (route == kReady) {
    const bool ready = !draining_.load() && models_ready_();
    sink->Send(http::Response{ready ? 200 : 503,
                              "application/json",
                              ready ? "{\"ready\":true}" : "{\"ready\":false}",
                              {}});
    return;
  }
  auto* ex = new pipeline::Exchange;
  ex->request_id = NextRequestId();
  ex->operation = static_cast<pipeline::Operation>(route);
  ex->listener = request.listener;
  ex->method = std::move(request.method);
  ex->target = std::move(request.target);
  ex->authorization = std::move(request.authorization);
  ex->body = std::move(request.body);
  ex->remote = std::move(request.remote);
  ex->peer_identity = std::move(request.peer_identity);
  ex->peer_unnamed = request.peer_unnamed;
  ex->peer_certificate = std::move(request.peer_certificate);
  if (request.caller != nullptr) {
    ex->principal = std::static_pointer_cast<const identity::Principal>(std::move(request.caller));
    ex->principal_checked_ns = request.caller_checked_ns;
  }
  ex->caller_refusal = std::move(request.caller_refusal);
  ex->caller_check_ns = request.caller_check_ns;
  ex->model_name = std::string(request.Param("model"));
  ex->model_version = std::string(request.Param("version"));
  ex->start_ns = request.received_ns;
  ex->timeout_ms = request.timeout_ms;
  ex->priority = std::move(request.priority);
  ex->respond_async = request.respond_async;
  ex->job_id = std::string(request.Param("job"));
  ex->post = [sink](absl::AnyInvocable<void() &&> task) { sink->Post(std::move(task)); };
  ex->sink = sink;
  ex->on_complete = [this, sink = std::move(sink)](pipeline::Exchange& done) {
    if (done.streaming) {  // its head and events went out as they came
      sink->EndStream();
    } else {
      done.response.headers.emplace_back("X-Request-Id", done.request_id);
      sink->Send(std::move(done.response));
    }
    delete &done;
    in_flight_.fetch_sub(1);
  };
  in_flight_.fetch_add(1);
  chain_.Start(*ex);
}

}  // namespace pillar::app
