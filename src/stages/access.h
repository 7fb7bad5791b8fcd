// What the policy sees of a request: its plane, action and resource, and whether a principal
// may see a model version at all. A version the principal may neither use for the requested
// action nor read the metadata of is invisible: it answers 404 exactly as a version that does
// not exist, so nobody can enumerate another tenant's models.
#pragma once

#include "pipeline/exchange.h"
#include "policy/policy.h"
#include "runtime/model_registry.h"

namespace pillar::stages {

policy::Plane PlaneOf(const pipeline::Exchange& ex);

// The action an operation asks for and the resource it names (models: set from ex.model).
std::string_view ActionOf(pipeline::Operation op);
std::string_view ResourceOf(pipeline::Operation op);

inline policy::Resource ResourceOf(const runtime::ModelVersion& version) {
  return {version.resource, &version.attributes};
}

// What `ex.principal` may do with `version`: `granted_by` is the rule that allows `ex.action`
// (null when none does); `visible` is true when that, or reading the metadata, is allowed.
struct Access {
  bool visible = false;
  const policy::Rule* granted_by = nullptr;
};
Access AccessTo(const pipeline::Exchange& ex, const runtime::ModelVersion& version);

// True when `ex.principal` may do `ex.action`, or read the metadata of, `version`.
inline bool Visible(const pipeline::Exchange& ex, const runtime::ModelVersion& version) {
  return AccessTo(ex, version).visible;
}

}  // namespace pillar::stages
