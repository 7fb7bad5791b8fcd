#include "stages/route_stage.h"

#include <algorithm>

#include "common/strings.h"
#include "stages/access.h"
#include "stages/openai_call.h"

namespace pillar::stages {

const runtime::ModelVersion* ResolveVersion(const pipeline::Exchange& ex, std::string_view model,
                                            std::string_view wanted, std::string_view default_alias,
                                            const policy::Rule** granted_by) {
  // Versions ascend: walk down from the highest, so the common case (the highest version is
  // ready and visible) costs one policy evaluation however many versions the model has.
  const runtime::ModelRegistry& models = *ex.models;
  *granted_by = nullptr;
  if (!wanted.empty() && (wanted[0] < '0' || wanted[0] > '9')) {
    const runtime::ModelVersion* target = models.AliasTarget(model, wanted);
    if (target == nullptr) return nullptr;
    wanted = target->version_text;
  } else if (wanted.empty() && !default_alias.empty()) {
    if (const runtime::ModelVersion* target = models.AliasTarget(model, default_alias);
        target != nullptr && target->ready()) {
      const Access access = AccessTo(ex, *target);
      if (access.visible) {
        *granted_by = access.granted_by;
        return target;
      }
    }
  }
  const runtime::ModelVersion* fallback = nullptr;  // the highest visible one, ready or not
  const policy::Rule* fallback_rule = nullptr;
  auto versions = models.VersionsOf(model);
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
    const runtime::ModelVersion& v = **it;
    if (!wanted.empty() && v.version_text != wanted) continue;
    const Access access = AccessTo(ex, v);
    if (!access.visible) continue;
    if (v.ready()) {
      // The decision on the chosen version is made here once; the authorize stage reuses it.
      *granted_by = access.granted_by;
      return &v;
    }
    if (fallback == nullptr) {
      fallback = &v;
      fallback_rule = access.granted_by;
    }
  }
  *granted_by = fallback_rule;
  return fallback;
}

namespace {

// A language model is called on the OpenAI-compatible routes, a model of tensors with the Open
// Inference Protocol: the other kind cannot read the request.
[[nodiscard]] absl::Status CheckKind(pipeline::Operation op, const runtime::ModelVersion& model) {
  const bool language_model = model.config && model.config->speaks_openai();
  if (op == pipeline::Operation::kInfer && language_model) {
    return absl::InvalidArgumentError(
        StrCat("model '", model.name,
               "' is a language model: call it on the OpenAI-compatible routes "
               "(/v1/chat/completions, /v1/completions, /v1/embeddings)"));
  }
  if (pipeline::GeneratesText(op) && !language_model) {
    return absl::InvalidArgumentError(
        StrCat("model '", model.name,
               "' is not a language model: call it with the Open Inference Protocol (/v2/models/",
               model.name, "/infer)"));
  }
  return absl::OkStatus();
}

// The model's [generation] bounds: a call asking for more is refused (it would be refused or cut
// by the upstream anyway, after pillar reserved its tokens); one naming no length gets the
// model's default, which the upstream is sent.
[[nodiscard]] absl::Status ApplyGeneration(const models::GenerationConfig& bounds,
                                           runtime::GenerateRequest& call) {
  if (call.route == runtime::OpenAiRoute::kEmbeddings) return absl::OkStatus();
  if (call.max_tokens.has_value() && *call.max_tokens > bounds.max_tokens) {
    return absl::InvalidArgumentError(StrCat(
        "max_tokens ", *call.max_tokens, " is above this model's limit of ", bounds.max_tokens));
  }
  if (call.n > bounds.max_n) {
    return absl::InvalidArgumentError(
        StrCat("n ", call.n, " is above this model's limit of ", bounds.max_n, " choices"));
  }
  if (!call.max_tokens.has_value() && bounds.default_max_tokens > 0) {
    call.max_tokens = bounds.default_max_tokens;
    call.set_max_tokens = true;
  }
  return absl::OkStatus();
}

// The tokens a call reserves of token limits on arrival: its prompt as estimated, and the most it
// may generate (n choices of max_tokens, when the request or the model's [generation] table
// bounds them; otherwise its completion is charged once it is known).
int64_t ReservedTokens(const runtime::GenerateRequest& call) {
  // Every prompt of a completion is answered with n choices (review helper-127: ten prompts
  // reserved one prompt's completions, and a call could pass the limit tenfold).
  const int64_t choices = std::max<int64_t>(call.n, 1) * std::max<int64_t>(call.prompts, 1);
  const int64_t completion =
      call.route == runtime::OpenAiRoute::kEmbeddings ? 0 : choices * call.max_tokens.value_or(0);
  return call.prompt_tokens + completion;
}

}  // namespace

pipeline::StageResult RouteStage::OnRequest(pipeline::Exchange& ex) {
  ex.policy = policy_.Current();
  ex.action = ActionOf(ex.operation);
  if (!pipeline::TargetsModel(ex.operation)) {
    ex.resource = ResourceOf(ex.operation);
    return pipeline::StageResult::kContinue;
  }
  if (pipeline::GeneratesText(ex.operation)) {
    if (absl::Status read = DecodeOpenAiCall(ex, openai_limits_); !read.ok()) {
      ex.Fail(read);
      return pipeline::StageResult::kStop;
    }
  }
  ex.models = catalog_.Current();
  const runtime::ModelVersion* model =
      ResolveVersion(ex, ex.model_name, ex.model_version, default_alias_, &ex.granted_by);
  if (model == nullptr) {
    bool model_visible = false;
    for (const auto& v : ex.models->VersionsOf(ex.model_name)) {
      model_visible = model_visible || Visible(ex, *v);
    }
    if (!model_visible) {
      ex.Fail(absl::NotFoundError(StrCat("unknown model '", ex.model_name, "'")));
    } else {
      ex.Fail(absl::NotFoundError(
          StrCat("unknown version '", ex.model_version, "' of model '", ex.model_name, "'")));
    }
    return pipeline::StageResult::kStop;
  }
  ex.model = model;
  ex.resource = model->resource;
  const bool runs =
      ex.operation == pipeline::Operation::kInfer || pipeline::GeneratesText(ex.operation);
  if (runs && !model->ready()) {
    ex.Fail(absl::UnavailableError(StrCat("model '", model->name, "' version ", model->version,
                                          " is not ready: ", model->Reason())));
    return pipeline::StageResult::kStop;
  }
  if (absl::Status kind = CheckKind(ex.operation, *model); runs && !kind.ok()) {
    ex.Fail(kind);
    return pipeline::StageResult::kStop;
  }
  if (ex.generate.has_value() && model->config) {
    if (absl::Status within = ApplyGeneration(model->config->generation, *ex.generate);
        !within.ok()) {
      ex.Fail(within);
      return pipeline::StageResult::kStop;
    }
    if (model->tokenizer != nullptr) CountPromptTokens(*model->tokenizer, ex);
    ex.reserved_tokens = ReservedTokens(*ex.generate);
  }
  return pipeline::StageResult::kContinue;
}

}  // namespace pillar::stages
