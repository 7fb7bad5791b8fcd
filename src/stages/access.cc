#include "stages/access.h"

namespace pillar::stages {

using pipeline::Operation;

policy::Plane PlaneOf(const pipeline::Exchange& ex) {
  return ex.listener == "admin" ? policy::Plane::kAdmin : policy::Plane::kData;
}

std::string_view ActionOf(Operation op) {
  switch (op) {
    case Operation::kInfer:
    case Operation::kChatCompletions:
    case Operation::kCompletions:
    case Operation::kEmbeddings:
      return "infer";
    case Operation::kMetrics:
      return "read_metrics";
    case Operation::kJob:
      return "read_job";
    case Operation::kServerMetadata:
    case Operation::kListModels:
    case Operation::kModelMetadata:
    case Operation::kModelReady:
    case Operation::kAdminModels:
    case Operation::kAdminBackends:
      return "read_metadata";
  }
  return "read_metadata";
}

std::string_view ResourceOf(Operation op) {
  switch (op) {
    case Operation::kServerMetadata:
    case Operation::kListModels:
      return "server";
    case Operation::kMetrics:
      return "metrics";
    case Operation::kAdminModels:
    case Operation::kAdminBackends:
      return "models";
    case Operation::kJob:
      return "jobs";
    default:
      return "";
  }
}

Access AccessTo(const pipeline::Exchange& ex, const runtime::ModelVersion& version) {
  const policy::Plane plane = PlaneOf(ex);
  const policy::Resource resource = ResourceOf(version);
  const policy::Decision decision = ex.policy->Evaluate(*ex.principal, plane, ex.action, resource);
  if (decision.allowed) return {true, decision.rule};
  return {ex.action != "read_metadata" &&
              ex.policy->Allowed(*ex.principal, plane, "read_metadata", resource),
          nullptr};
}

}  // namespace pillar::stages
