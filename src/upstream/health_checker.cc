#include "upstream/health_checker.h"

#include <random>

#include "common/strings.h"

namespace pillar::upstream {

HealthChecker::HealthChecker(boost::asio::io_context& io, std::vector<Endpoint> endpoints,
                             std::shared_ptr<boost::asio::ssl::context> tls,
                             const UpstreamCredential* credential, models::HealthCheck check,
                             Report report)
    : io_(io),
      tls_(std::move(tls)),
      credential_(credential),
      check_(std::move(check)),
      report_(std::move(report)) {
  for (Endpoint& endpoint : endpoints) {
    targets_.push_back(
        {std::move(endpoint), std::make_unique<boost::asio::steady_timer>(io_), nullptr});
  }
}

void HealthChecker::Start() {
  std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> spread(0, check_.interval_ms);
  for (size_t e = 0; e < targets_.size(); ++e) {
    Schedule(e, std::chrono::milliseconds(spread(rng)));
  }
}

void HealthChecker::Stop() {
  stopped_ = true;
  for (Target& target : targets_) {
    target.timer->cancel();
    if (target.connection) target.connection->Close();
  }
}

void HealthChecker::Schedule(size_t e, std::chrono::milliseconds after) {
  if (stopped_) return;
  targets_[e].timer->expires_after(after);
  targets_[e].timer->async_wait([self = shared_from_this(), e](boost::system::error_code ec) {
    if (!ec && !self->stopped_) self->Check(e);
  });
}

void HealthChecker::Check(size_t e) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(check_.timeout_ms);
  Target& target = targets_[e];
  if (target.connection && target.connection->Idle()) return Send(e, deadline);
  target.connection.reset();
  Connect(io_, target.endpoint, tls_, deadline,
          [self = shared_from_this(), e,
           deadline](absl::StatusOr<std::shared_ptr<UpstreamConnection>> connection) {
            if (self->stopped_) {
              if (connection.ok()) (*connection)->Close();
              return;
            }
            if (!connection.ok()) return self->Done(e, false, ToStd(connection.status().message()));
            self->targets_[e].connection = std::move(*connection);
            self->Send(e, deadline);
          });
}

void HealthChecker::Send(size_t e, Clock::time_point deadline) {
  Target& target = targets_[e];
  auto request = std::make_shared<UpstreamRequest>();
  const bool present = credential_ != nullptr && !credential_->value.empty();
  request->head = RequestHead("GET", StrCat(target.endpoint.base_path, check_.path),
                              target.endpoint.host_header,
                              {{"User-Agent", "pillar-health-check"},
                               {present ? std::string_view(credential_->header) : "Authorization",
                                present ? credential_->value.view() : ""}},
                              0);
  // A readiness reply is small: anything larger is not one.
  constexpr int64_t kMaxCheckReply = 64 << 10;
  target.connection->Call(
      std::move(request), deadline, kMaxCheckReply,
      [self = shared_from_this(), e](absl::StatusOr<UpstreamReply> reply, CallFailure) {
        if (self->stopped_) return;
        if (!reply.ok()) return self->Done(e, false, ToStd(reply.status().message()));
        if (reply->status != 200) {
          return self->Done(e, false, StrCat("the readiness route answered ", reply->status));
        }
        self->Done(e, true, "");
      },
      nullptr);
}

void HealthChecker::Done(size_t e, bool passed, std::string_view why) {
  Target& target = targets_[e];
  if (!passed && target.connection) {
    target.connection->Close();
    target.connection.reset();
  }
  report_(e, passed, why);
  Schedule(e, std::chrono::milliseconds(check_.interval_ms));
}

}  // namespace pillar::upstream
