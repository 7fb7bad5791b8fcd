#include "app/routes.h"

namespace pillar::app {

using pipeline::Operation;

http::Router DataRouter() {
  http::Router r;
  r.Add({"GET", "/v2/health/live", kLive, "live", true});
  r.Add({"GET", "/v2/health/ready", kReady, "ready", true});
  r.Add({"GET", "/v2", int(Operation::kServerMetadata), "server_metadata", false});
  r.Add({"GET", "/v2/models/{model}", int(Operation::kModelMetadata), "model_metadata", false});
  r.Add({"GET", "/v2/models/{model}/versions/{version}", int(Operation::kModelMetadata),
         "model_version_metadata", false});
  r.Add({"GET", "/v2/models/{model}/ready", int(Operation::kModelReady), "model_ready", false});
  r.Add({"GET", "/v2/models/{model}/versions/{version}/ready", int(Operation::kModelReady),
         "model_version_ready", false});
  r.Add({"POST", "/v2/models/{model}/infer", int(Operation::kInfer), "infer", false});
  r.Add({"POST", "/v2/models/{model}/versions/{version}/infer", int(Operation::kInfer),
         "version_infer", false});
  r.Add({"GET", "/v2/jobs/{job}", int(Operation::kJob), "job", false});
  // OpenAI-compatible (docs/protocol.md).
  r.Add({"GET", "/v1/models", int(Operation::kListModels), "openai_models", false});
  r.Add({"POST", "/v1/chat/completions", int(Operation::kChatCompletions), "chat_completions",
         false});
  r.Add({"POST", "/v1/completions", int(Operation::kCompletions), "completions", false});
  r.Add({"POST", "/v1/embeddings", int(Operation::kEmbeddings), "embeddings", false});
  return r;
}

http::Router AdminRouter() {
  http::Router r;
  r.Add({"GET", "/v2/health/live", kLive, "live", true});
  r.Add({"GET", "/v2/health/ready", kReady, "ready", true});
  r.Add({"GET", "/metrics", int(Operation::kMetrics), "metrics", false});
  r.Add({"GET", "/admin/v1/models", int(Operation::kAdminModels), "admin_models", false});
  r.Add({"GET", "/admin/v1/backends", int(Operation::kAdminBackends), "admin_backends", false});
  return r;
}

}  // namespace pillar::app
