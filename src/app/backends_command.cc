// `pillar backends`: the live state of a running server's remote backends, from its admin API
// (GET /admin/v1/backends): each remote version's breaker and load, and each endpoint's health,
// breaker, load and latency.
#include <simdjson.h>

#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <cstdlib>

#include "app/commands.h"
#include "common/strings.h"
#include "upstream/endpoint.h"
#include "upstream/upstream_connection.h"
#include "upstream/upstream_credentials.h"

namespace pillar::app {
namespace {

struct BackendsOptions {
  std::string admin = "http://127.0.0.1:8001";
  std::string key_file;  // empty: the PILLAR_API_KEY environment variable
  std::string ca_file;
  bool json = false;
};

// GET `path` from the admin listener with the key, waiting at most 10 s.
[[nodiscard]] absl::StatusOr<std::string> AdminGet(const BackendsOptions& options,
                                                   std::string_view path) {
  // The URL is not echoed: a mistaken one may carry a password.
  if (options.admin.find('@') != std::string::npos) {
    return absl::InvalidArgumentError("--admin must not carry credentials; give the key apart");
  }
  absl::StatusOr<upstream::Endpoint> endpoint = upstream::ParseEndpoint(options.admin);
  if (!endpoint.ok()) return absl::InvalidArgumentError("--admin must be http[s]://host[:port]");
  SecretString key;
  if (!options.key_file.empty()) {
    absl::StatusOr<SecretString> read = upstream::ReadToken(options.key_file);
    if (!read.ok()) return read.status();
    key = std::move(*read);
  } else if (const char* env = std::getenv("PILLAR_API_KEY"); env != nullptr && *env != '\0') {
    key = SecretString(std::string(env));
  } else {
    return absl::InvalidArgumentError("no key: give --key-file or set PILLAR_API_KEY");
  }
  std::shared_ptr<boost::asio::ssl::context> tls;
  if (endpoint->tls) {
    models::RemoteConfig remote;
    remote.ca_file = options.ca_file;
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> made =
        upstream::MakeTlsContext(remote);
    if (!made.ok()) return made.status();
    tls = std::move(*made);
  }
  boost::asio::io_context io;
  const upstream::Clock::time_point deadline = upstream::Clock::now() + std::chrono::seconds(10);
  absl::StatusOr<upstream::UpstreamReply> reply = absl::UnknownError("no reply");
  upstream::Connect(
      io, *endpoint, tls, deadline,
      [&](absl::StatusOr<std::shared_ptr<upstream::UpstreamConnection>> connection) {
        if (!connection.ok()) {
          reply = connection.status();
          return;
        }
        auto request = std::make_shared<upstream::UpstreamRequest>();
        request->head =
            upstream::RequestHead("GET", StrCat(endpoint->base_path, path), endpoint->host_header,
                                  {{"Authorization", StrCat("Bearer ", key.view())}}, 0);
        (*connection)
            ->Call(
                std::move(request), deadline, 64 << 20,
                [&, connection = *connection](absl::StatusOr<upstream::UpstreamReply> r,
                                              upstream::CallFailure) {
                  reply = std::move(r);
                  connection->Close();
                },
                nullptr);
      });
  io.run();
  if (!reply.ok()) return reply.status();
  if (reply->status != 200) {
    return absl::FailedPreconditionError(
        StrCat(options.admin, path, " answered ", reply->status, ": ", reply->body.substr(0, 300)));
  }
  return std::move(reply->body);
}

std::string_view Text(simdjson::dom::element e, const char* key) {
  std::string_view out;
  return e[key].get(out) == simdjson::SUCCESS ? out : std::string_view();
}

int64_t Number(simdjson::dom::element e, const char* key) {
  int64_t out = 0;
  return e[key].get(out) == simdjson::SUCCESS ? out : 0;
}

// One block per remote version: its own line, then a line per endpoint.
[[nodiscard]] absl::Status PrintTable(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::array backends;
  if (parser.parse(body).get(root) != simdjson::SUCCESS ||
      root["backends"].get(backends) != simdjson::SUCCESS) {
    return absl::DataLossError("the server's answer is not a list of backends");
  }
  if (backends.size() == 0) std::printf("no remote backends\n");
  for (simdjson::dom::element b : backends) {
    const std::string breaker(Text(b, "breaker"));
    std::printf("%s/%s  breaker %s%s  in flight %lld  queued %lld  trips %lld\n",
                std::string(Text(b, "model")).c_str(), std::string(Text(b, "version")).c_str(),
                breaker.c_str(),
                breaker == "open" ? StrCat(" (", Number(b, "breaker_open_ms"), " ms)").c_str() : "",
                static_cast<long long>(Number(b, "in_flight")),
                static_cast<long long>(Number(b, "queued")),
                static_cast<long long>(Number(b, "trips")));
    std::printf("  %-40s %-8s %4s %6s %-10s %-9s %5s %10s %5s %5s\n", "ENDPOINT", "ZONE", "PRIO",
                "WEIGHT", "HEALTH", "BREAKER", "OUT", "LATENCY_MS", "EJECT", "TRIPS");
    simdjson::dom::array endpoints;
    if (b["endpoints"].get(endpoints) != simdjson::SUCCESS) continue;
    for (simdjson::dom::element e : endpoints) {
      double latency = 0;
      if (e["latency_ms"].get(latency) != simdjson::SUCCESS) latency = 0;
      std::printf("  %-40s %-8s %4lld %6lld %-10s %-9s %5lld %10.2f %5lld %5lld\n",
                  std::string(Text(e, "url")).c_str(), std::string(Text(e, "zone")).c_str(),
                  static_cast<long long>(Number(e, "priority")),
                  static_cast<long long>(Number(e, "weight")),
                  std::string(Text(e, "health")).c_str(), std::string(Text(e, "breaker")).c_str(),
                  static_cast<long long>(Number(e, "outstanding")), latency,
                  static_cast<long long>(Number(e, "ejections")),
                  static_cast<long long>(Number(e, "trips")));
    }
  }
  return absl::OkStatus();
}

int RunBackends(const BackendsOptions& options) {
  absl::StatusOr<std::string> body = AdminGet(options, "/admin/v1/backends");
  if (!body.ok()) return Fail("backends", body.status());
  if (options.json) {
    std::printf("%s\n", body->c_str());
    return 0;
  }
  if (absl::Status s = PrintTable(*body); !s.ok()) return Fail("backends", s);
  return 0;
}

}  // namespace

void AddBackendsCommand(CLI::App& cli, Commands& commands) {
  auto options = std::make_shared<BackendsOptions>();
  CLI::App* cmd = cli.add_subcommand(
      "backends", "Show a running server's remote backends: breakers, health, load, latency");
  cmd->add_option("--admin", options->admin, "The server's admin listener")->capture_default_str();
  cmd->add_option("--key-file", options->key_file,
                  "A file (readable by its owner only) holding an API key; default: "
                  "the PILLAR_API_KEY environment variable");
  cmd->add_option("--ca-file", options->ca_file, "CA bundle for an https admin listener");
  cmd->add_flag("--json", options->json, "The admin API's JSON as it is");
  commands.On(cmd, [options] { return RunBackends(*options); });
}

}  // namespace pillar::app
