// A HealthReport for people (a table), for programs (JSON) and for Prometheus (a textfile for
// node_exporter's textfile collector, written atomically).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "health/health_checks.h"

namespace pillar::health {

std::string FormatHealthTable(const HealthReport& report);
std::string HealthJson(const HealthReport& report);
std::string HealthPrometheus(const HealthReport& report);

}  // namespace pillar::health
