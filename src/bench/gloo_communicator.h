// The Gloo backend: TCP between processes, meeting through a rendezvous store that every rank
// can reach -- a directory on a shared file system (file:/shared/dir) or a Redis server
// (redis://host:port) -- under a per-run key prefix (--job).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/communicator.h"

namespace pillar::bench {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string rendezvous;  // file:DIR or redis://HOST:PORT
  std::string job = "pillar";
  std::string iface;  // empty: the address the host name resolves to
  int timeout_ms = 120000;
};

[[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> OpenGlooCommunicator(
    const GlooOptions& options);

}  // namespace pillar::bench
