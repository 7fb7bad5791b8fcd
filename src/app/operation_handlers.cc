#include "app/operation_handlers.h"

#include <set>

#include "common/json_writer.h"
#include "common/strings.h"
#include "policy/policy.h"
#include "protocol/openai_response.h"
#include "stages/access.h"

#ifndef PILLAR_VERSION
#define PILLAR_VERSION "0.0.0"
#endif

namespace pillar::app {
namespace {

using pipeline::Exchange;
using pipeline::Operation;

void WriteTensorSpecs(JsonWriter& w, const std::vector<models::TensorSpec>& specs, bool batched) {
  w.BeginArray();
  for (const models::TensorSpec& spec : specs) {
    w.BeginObject();
    w.Key("name");
    w.String(spec.name);
    w.Key("datatype");
    w.String(protocol::DataTypeName(spec.datatype));
    w.Key("shape");
    w.BeginArray();
    if (batched) w.Int(-1);
    for (int64_t d : spec.shape) w.Int(d);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
}

// GET /v2/models/{name}[/versions/{v}]: the model's versions, platform and tensors.
void ModelMetadata(Exchange& ex) {
  const runtime::ModelVersion& model = *ex.model;
  if (!model.config) {
    ex.Fail(absl::UnavailableError(StrCat("model '", model.name, "' version ", model.version,
                                          " has no valid model.toml: ", model.status.message())));
    return;
  }
  JsonWriter w(512);
  w.BeginObject();
  w.Key("name");
  w.String(model.name);
  w.Key("versions");
  w.BeginArray();
  if (ex.model_version.empty()) {
    // Only the versions this principal may see: listing must not reveal hidden ones.
    for (const auto& v : ex.models->VersionsOf(model.name)) {
      if (stages::Visible(ex, *v)) w.String(v->version_text);
    }
  } else {
    w.String(model.version_text);
  }
  w.EndArray();
  w.Key("platform");
  w.String(models::PlatformName(model.config->platform));
  const bool batched = model.config->max_batch_size > 0;
  w.Key("inputs");
  WriteTensorSpecs(w, model.config->inputs, batched);
  w.Key("outputs");
  WriteTensorSpecs(w, model.config->outputs, batched);
  w.EndObject();
  ex.response.body = std::move(w).Take();
}

// GET /v2/models/{name}[/versions/{v}]/ready
void ModelReady(Exchange& ex) {
  const runtime::ModelVersion& model = *ex.model;
  if (!model.ready()) {
    // The protocol answers "not ready" with a 4xx status.
    ex.Fail(absl::FailedPreconditionError(StrCat("model '", model.name, "' version ", model.version,
                                                 " is not ready: ", model.Reason())));
    return;
  }
  JsonWriter w(128);
  w.BeginObject();
  w.Key("name");
  w.String(model.name);
  w.Key("version");
  w.String(model.version_text);
  w.Key("ready");
  w.Bool(true);
  w.EndObject();
  ex.response.body = std::move(w).Take();
}

// GET /admin/v1/models: every version the principal may see, its state and aliases, and the
// models that failed to scan.
void AdminModels(const runtime::ModelCatalog& catalog, Exchange& ex) {
  const std::shared_ptr<const runtime::ModelRegistry> snapshot = catalog.Current();
  const runtime::ModelRegistry& registry = *snapshot;
  JsonWriter w(1024);
  w.BeginObject();
  w.Key("models");
  w.BeginArray();
  for (const auto& v : registry.versions()) {
    if (!stages::Visible(ex, *v)) continue;  // invisible models are not listed
    w.BeginObject();
    w.Key("name");
    w.String(v->name);
    w.Key("version");
    w.String(v->version_text);
    w.Key("state");
    w.String(v->ready() ? "READY" : "UNAVAILABLE");
    if (auto aliases = registry.aliases().find(v->name); aliases != registry.aliases().end()) {
      w.Key("aliases");
      w.BeginArray();
      for (const auto& [alias, version] : aliases->second) {
        if (version == v->version) w.String(alias);
      }
      w.EndArray();
    }
    if (!v->status.ok() || v->withdrawn()) {
      w.Key("reason");
      w.String(v->Reason());
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("errors");
  w.BeginArray();
  // A model that failed to scan has no attributes to decide on: only principals allowed to
  // manage models see those errors.
  const bool show_errors =
      ex.policy->Allowed(*ex.principal, stages::PlaneOf(ex), "manage_models", {"models", nullptr});
  for (const auto& [model, status] : registry.model_errors()) {
    if (!show_errors) break;
    w.BeginObject();
    w.Key("model");
    w.String(model);
    w.Key("reason");
    w.String(ToStd(status.message()));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  ex.response.body = std::move(w).Take();
}

void WriteUpstreamEndpoint(JsonWriter& w, const runtime::UpstreamStatus::Endpoint& e) {
  w.BeginObject();
  w.Key("url");
  w.String(e.url);
  w.Key("zone");
  w.String(e.zone);
  w.Key("priority");
  w.Int(e.priority);
  w.Key("weight");
  w.Int(e.weight);
  w.Key("health");
  w.String(e.health);
  w.Key("breaker");
  w.String(e.breaker);
  w.Key("breaker_open_ms");
  w.Int(e.breaker_open_ms);
  w.Key("outstanding");
  w.Int(e.outstanding);
  w.Key("latency_ms");
  w.Double(e.latency_ms);
  w.Key("ejections");
  w.Int(e.ejections);
  w.Key("trips");
  w.Int(e.trips);
  w.EndObject();
}

// GET /admin/v1/backends: the live state of every remote version the principal may see: its
// breaker, its load, and each endpoint's health, breaker, load and latency.
void AdminBackends(const runtime::ModelCatalog& catalog, Exchange& ex) {
  const std::shared_ptr<const runtime::ModelRegistry> snapshot = catalog.Current();
  JsonWriter w(1024);
  w.BeginObject();
  w.Key("backends");
  w.BeginArray();
  for (const auto& v : snapshot->versions()) {
    if (v->runner == nullptr || !stages::Visible(ex, *v)) continue;
    const std::optional<runtime::UpstreamStatus> status = v->runner->Upstreams();
    if (!status) continue;
    w.BeginObject();
    w.Key("model");
    w.String(v->name);
    w.Key("version");
    w.String(v->version_text);
    w.Key("breaker");
    w.String(status->breaker);
    w.Key("breaker_open_ms");
    w.Int(status->breaker_open_ms);
    w.Key("trips");
    w.Int(status->trips);
    w.Key("in_flight");
    w.Int(status->in_flight);
    w.Key("queued");
    w.Int(status->queued);
    w.Key("endpoints");
    w.BeginArray();
    for (const runtime::UpstreamStatus::Endpoint& e : status->endpoints) {
      WriteUpstreamEndpoint(w, e);
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  ex.response.body = std::move(w).Take();
}

// GET /v1/models: the language models the principal may call (the infer action allowed on a
// ready version), once each, in OpenAI's list shape. A model it may only read the metadata of is
// not listed, nor a model of tensors (the /v1 routes cannot call it): the list is of what can be
// used here.
void ListModels(const runtime::ModelCatalog& catalog, Exchange& ex) {
  const std::shared_ptr<const runtime::ModelRegistry> snapshot = catalog.Current();
  std::set<std::string_view> names;
  const policy::Plane plane = stages::PlaneOf(ex);
  for (const auto& v : snapshot->versions()) {
    if (names.contains(v->name) || !v->ready() || !v->config || !v->config->speaks_openai() ||
        !ex.policy->Allowed(*ex.principal, plane, "infer", stages::ResourceOf(*v))) {
      continue;
    }
    names.insert(v->name);
  }
  std::vector<protocol::ListedModel> listed;
  for (std::string_view name : names) {
    // pillar does not keep when a version was made; OpenAI's clients do not read it.
    listed.push_back({.id = std::string(name), .created = 0, .owned_by = "pillar"});
  }
  ex.response.body = protocol::ModelListBody(listed);
}

}  // namespace

std::map<Operation, stages::ExecuteStage::Handler> MakeOperationHandlers(
    const runtime::ModelCatalog& catalog, const monitor::MetricsRegistry& metrics) {
  std::map<Operation, stages::ExecuteStage::Handler> handlers;
  handlers[Operation::kServerMetadata] = [](Exchange& ex) {
    ex.response.body =
        StrCat("{\"name\":\"pillar\",\"version\":\"", PILLAR_VERSION, "\",\"extensions\":[]}");
  };
  handlers[Operation::kModelMetadata] = ModelMetadata;
  handlers[Operation::kModelReady] = ModelReady;
  handlers[Operation::kMetrics] = [&metrics](Exchange& ex) {
    ex.response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    ex.response.body = metrics.Render();
  };
  handlers[Operation::kAdminModels] = [&catalog](Exchange& ex) { AdminModels(catalog, ex); };
  handlers[Operation::kAdminBackends] = [&catalog](Exchange& ex) { AdminBackends(catalog, ex); };
  handlers[Operation::kListModels] = [&catalog](Exchange& ex) { ListModels(catalog, ex); };
  return handlers;
}

}  // namespace pillar::app
