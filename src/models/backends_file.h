// The backends file ([upstream] backends_file in pillar.toml): what an operator changes about
// remote models while they serve, without signing a new version: their endpoints (with weights,
// priorities and zones), health checks, breakers, hedging, retries and timeouts. A table per
// model, with the keys of model.toml's [remote] that may change (models/remote_config.h:
// ApplyRemoteOverride); it applies to every loaded remote version of that model.
//
//   [backends.digits]
//   endpoints = ["http://10.0.0.5:8000", { url = "http://10.0.0.6:8000", weight = 2 }]
//   [backends.digits.breaker]
//   failure_count = 5
//
// The upstream's model name, `idempotent`, and the credentials and TLS files stay as signed: the
// file changes where a model's traffic goes, so it must be as protected as pillar.toml (the
// server refuses one that group or others may write). A file that does not parse, or that would
// give any loaded version an invalid configuration, is refused as a whole, with its file:line.
#pragma once

#include <toml++/toml.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "models/remote_config.h"

namespace pillar::models {

class BackendsFile {
 public:
  BackendsFile() = default;  // names no model
  [[nodiscard]] static absl::StatusOr<BackendsFile> Parse(std::string_view text,
                                                          std::string_view source);

  // `signed_remote` with this file's table for `model` applied; as it is when none names it.
  [[nodiscard]] absl::StatusOr<RemoteConfig> Apply(std::string_view model,
                                                   const RemoteConfig& signed_remote) const;
  bool Names(std::string_view model) const { return tables_.count(std::string(model)) > 0; }
  size_t size() const { return tables_.size(); }

 private:
  std::string source_;
  // The parsed file, kept whole: toml++ copies a node without its place in the text, and
  // Apply's errors name the line (shared, so that a copy of this object points into it too).
  std::shared_ptr<const toml::table> root_;
  std::map<std::string, const toml::table*, std::less<>> tables_;  // into root_
};

}  // namespace pillar::models
