// Active health checks of a remote version's endpoints (Envoy's HTTP health checking): every
// interval, a GET of each endpoint's readiness route (the Open Inference Protocol's
// /v2/health/ready by default) on a connection of its own, kept alive between checks; a 200
// within the timeout passes, anything else fails. Results go to `report`, which feeds
// EndpointHealth's thresholds. Runs on the runner's io_context, like everything of a version.
//
//   auto checker = std::make_shared<HealthChecker>(io, endpoints, tls, token, check, report);
//   checker->Start();
//   ...
//   checker->Stop();   // on the io_context's thread
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "models/remote_config.h"
#include "upstream/endpoint.h"
#include "upstream/upstream_connection.h"
#include "upstream/upstream_credentials.h"

namespace pillar::upstream {

class HealthChecker : public std::enable_shared_from_this<HealthChecker> {
 public:
  // `why` is empty for a pass, the failure otherwise (never with credentials).
  using Report = std::function<void(size_t endpoint, bool passed, std::string_view why)>;

  // `credential` (may be null) is presented as with inference; it must outlive the checker.
  HealthChecker(boost::asio::io_context& io, std::vector<Endpoint> endpoints,
                std::shared_ptr<boost::asio::ssl::context> tls,
                const UpstreamCredential* credential, models::HealthCheck check, Report report);

  // The first checks are spread over the first interval, so a gateway with many endpoints does
  // not check them all at once.
  void Start();
  // Cancels the timers and closes the connections; no report follows.
  void Stop();

 private:
  struct Target {
    Endpoint endpoint;
    std::unique_ptr<boost::asio::steady_timer> timer;
    std::shared_ptr<UpstreamConnection> connection;
  };

  void Schedule(size_t e, std::chrono::milliseconds after);
  void Check(size_t e);
  void Send(size_t e, Clock::time_point deadline);
  void Done(size_t e, bool passed, std::string_view why);

  boost::asio::io_context& io_;
  std::vector<Target> targets_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  const UpstreamCredential* credential_;
  models::HealthCheck check_;
  Report report_;
  bool stopped_ = false;
};

}  // namespace pillar::upstream
