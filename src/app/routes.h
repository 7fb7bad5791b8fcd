// The route tables of pillar's two listeners. The data plane serves the Open Inference
// Protocol (KServe v2) REST surface; the admin plane serves metrics and administration. Only
// liveness and readiness are anonymous.
#pragma once

#include "http/router.h"
#include "pipeline/exchange.h"

namespace pillar::app {

enum RouteId : int {
  kLive = 100,
  kReady = 101,
  // Every other id is a pipeline::Operation.
};

http::Router DataRouter();
http::Router AdminRouter();

}  // namespace pillar::app
