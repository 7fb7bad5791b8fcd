// The synchronous answers of the execute stage for every operation that is not inference:
// server and model metadata, model readiness, metrics, the admin model list.
#pragma once

#include <map>

#include "monitor/metrics.h"
#include "runtime/model_catalog.h"
#include "stages/execute_stage.h"

namespace pillar::app {

std::map<pipeline::Operation, stages::ExecuteStage::Handler> MakeOperationHandlers(
    const runtime::ModelCatalog& catalog, const monitor::MetricsRegistry& metrics);

}  // namespace pillar::app
