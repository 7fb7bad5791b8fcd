// Bridges the HTTP listener and the pipeline: answers liveness and readiness itself (the only
// anonymous routes), and turns every other request into an Exchange that runs through the
// chain. It also counts requests in flight, which the drain on SIGTERM waits for.
//
// A request with a body is authenticated when its header arrives (BeforeBody), so that the
// server holds bodies only for callers it knows: the caller it finds goes on to the chain's
// authenticate stage, which takes it (stages/authenticate_stage.h); one it does not find is
// refused by that stage, as any other, with the body never read.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "common/clock.h"
#include "http/server.h"
#include "identity/authenticator.h"
#include "monitor/access_log.h"
#include "pipeline/chain.h"

namespace pillar::app {

class RequestHandler final : public http::Handler {
 public:
  // `models_ready` tells whether the models needed for readiness are loaded. Requests the HTTP
  // layer refuses itself are written to `access_log` (may be null).
  // `authenticator` (may be null: bodies are then read before anyone is authenticated) and
  // `clock` are the authenticate stage's.
  RequestHandler(pipeline::Chain& chain, std::function<bool()> models_ready,
                 monitor::AccessLog* access_log = nullptr,
                 const identity::Authenticator* authenticator = nullptr,
                 const Clock& clock = SystemClock());

  void Handle(http::Request request, std::shared_ptr<http::ResponseSink> sink) override;
  bool BeforeBody(http::Request& request) override;
  void OnRejected(const http::Rejection& rejection) override;
  void OnAnswerCut(const http::CutAnswer& cut) override;

  void SetDraining() { draining_ = true; }
  int64_t in_flight() const { return in_flight_.load(); }

 private:
  std::string NextRequestId();

  pipeline::Chain& chain_;
  std::function<bool()> models_ready_;
  monitor::AccessLog* access_log_;
  const identity::Authenticator* authenticator_;
  const Clock& clock_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> sequence_{0};
  std::string id_prefix_;
};

}  // namespace pillar::app
