// `pillar serve`: wires the parts (state, identity, models, runtime, pipeline, listeners) and
// runs until SIGTERM or SIGINT, then drains: readiness turns false, the listeners close,
// requests in flight finish, and the process exits 0.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "app/audit_setup.h"
#include "app/commands.h"
#include "app/config.h"
#include "app/high_water_marks.h"
#include "app/model_reverifier.h"
#include "app/model_watcher.h"
#include "app/operation_handlers.h"
#include "app/request_handler.h"
#include "app/routes.h"
#include "app/version_loader.h"
#include "audit/counting_audit_sink.h"
#include "common/env.h"
#include "common/files.h"
#include "common/strings.h"
#include "limits/local_limiter.h"
#include "limits/redis_limiter.h"
#include "models/model_repository.h"
#include "monitor/access_log.h"
#include "policy/policy_source.h"
#include "stages/request_chain.h"
#include "state/state_store.h"

namespace pillar::app {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "pillar serve: %s\n", std::string(status.message()).c_str());
  return 1;
}

// Watches the store and loads what it names: only versions signed by a trusted key for their
// own name and version, and only aliases a trusted key signed, never older than seen before.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ModelWatcher>> WatchModels(
    const Config& config, const std::vector<signing::PublicKey>& trusted, HighWaterMarks& marks,
    monitor::MetricsRegistry& metrics, audit::AuditSink& audit) {
  absl::StatusOr<models::VersionPolicy> policy =
      models::VersionPolicy::Parse(config.version_policy);
  if (!policy.ok()) return policy.status();
  std::map<std::string, models::VersionPolicy> policies;
  for (const auto& [model, text] : config.model_policies) {
    policies.emplace(model, *models::VersionPolicy::Parse(text));  // validated with the config
  }
  models::AliasTrust alias_trust{
      .trusted = trusted,
      .require_signature = config.require_signatures,
      .admit_generation = [&marks](std::string_view model, int64_t generation) {
        return marks.Admit(model, generation);
      }};
  models::ModelRepository repository(config.repository_path, *policy, std::move(policies),
                                     std::move(alias_trust));
  runtime::RunnerLoader loader = MakeVersionLoader(
      {.require_signatures = config.require_signatures,
       .trusted = trusted,
       .batch_sizes = &metrics.AddHistogram("pillar_batch_size", "Rows in each executed batch.",
                                            {"model", "version"}, monitor::BatchSizeBuckets()),
       .after_read = {},
       // Every number a signed version had stays taken, even if its directory goes later.
       .verified =
           [&marks](std::string_view model, int64_t version) {
             if (absl::Status s = marks.NoteVersion(model, version); !s.ok()) {
               std::fprintf(stderr, "pillar: %s\n", std::string(s.message()).c_str());
             }
           },
       .torch_threads = config.torch_threads});
  return std::make_unique<ModelWatcher>(std::move(repository), std::move(loader),
                                        absl::Milliseconds(config.poll_ms), audit);
}

[[nodiscard]] absl::StatusOr<std::unique_ptr<identity::JwtVerifier>> MakeJwtVerifier(
    const Config& config) {
  if (config.jwt.jwks.empty()) return nullptr;
  identity::JwtOptions options;
  options.jwks_path = config.jwt.jwks;
  options.issuer = config.jwt.issuer;
  options.audiences = config.jwt.audiences;
  options.clock_skew = absl::Seconds(config.jwt.clock_skew_s);
  options.reload_interval = absl::Milliseconds(config.jwt.reload_ms);
  options.subject_claim = config.jwt.subject_claim;
  options.tenant_claim = config.jwt.tenant_claim;
  options.roles_claim = config.jwt.roles_claim;
  options.attribute_claims = config.jwt.attributes;
  return identity::JwtVerifier::Create(std::move(options));
}

struct Limiters {
  std::unique_ptr<limits::Limiter> primary;
  std::unique_ptr<limits::Limiter> fallback;  // null: fail closed
};

[[nodiscard]] absl::StatusOr<Limiters> MakeLimiters(const Config& config, state::StateStore& store,
                                                    monitor::MetricsRegistry& metrics) {
  Limiters limiters;
  if (config.limiter_backend == "embedded") {
    auto local = std::make_unique<limits::LocalLimiter>(limits::LocalLimiterOptions{
        .store = &store, .flush_interval = absl::Milliseconds(config.quota_flush_ms)});
    if (absl::Status s = local->LoadQuotas(); !s.ok()) return s;
    limiters.primary = std::move(local);
    return limiters;
  }
  limits::RedisLimiterOptions options;
  options.host = config.redis_host;
  options.port = config.redis_port;
  options.timeout = absl::Milliseconds(config.redis_timeout_ms);
  options.key_prefix = config.redis_key_prefix;
  options.lease_ttl = absl::Milliseconds(config.lease_ttl_ms);
  options.metrics = &metrics;
  if (!config.redis_password_file.empty()) {
    absl::StatusOr<std::string> password = ReadSecretFile(config.redis_password_file, 4096);
    if (!password.ok()) return password.status();
    while (!password->empty() && (password->back() == '\n' || password->back() == '\r')) {
      password->pop_back();
    }
    options.password = std::move(*password);
    WipeString(*password);  // what the move leaves of a short password
  }
  limiters.primary = std::make_unique<limits::RedisLimiter>(std::move(options));
  WipeString(options.password);  // likewise: the limiter keeps the one copy it reconnects with
  if (config.on_redis_failure == "open") {
    limiters.fallback = std::make_unique<limits::LocalLimiter>(
        limits::LocalLimiterOptions{.divisor = config.instances});
  }
  return limiters;
}

[[nodiscard]] absl::Status WritePortsFile(const std::string& path, uint16_t data, uint16_t admin) {
  return PublishAtomically(*Env::Default(), path, StrCat("data=", data, "\nadmin=", admin, "\n"),
                           0644);
}

// SIGTERM and SIGINT are delivered to any thread that does not block them, and libraries start
// threads of their own before main() runs (OpenBLAS's pool, with nothing blocked): there, the
// default action would kill the process mid-drain. So every thread runs this handler instead,
// which hands the signal's number to the main thread through a pipe.
int stop_pipe[2] = {-1, -1};

void OnStopSignal(int number) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(number);
  [[maybe_unused]] const ssize_t n = ::write(stop_pipe[1], &byte, 1);
  errno = saved;
}

[[nodiscard]] absl::Status InstallStopHandler() {
  if (::pipe2(stop_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(StrCat("cannot create the signal pipe: ", std::strerror(errno)));
  }
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (::sigaction(SIGTERM, &action, nullptr) != 0 || ::sigaction(SIGINT, &action, nullptr) != 0) {
    return absl::InternalError("cannot install the SIGTERM/SIGINT handler");
  }
  return absl::OkStatus();
}

// Blocks until SIGTERM or SIGINT; returns which.
int WaitForStopSignal() {
  unsigned char byte = 0;
  while (::read(stop_pipe[0], &byte, 1) != 1) {
    if (errno != EINTR) return SIGTERM;  // the pipe broke: behave as told to stop
  }
  return byte;
}

}  // namespace

int RunServe(const ServeOptions& options) {
  absl::StatusOr<Config> config = LoadConfig(options.config_path);
  if (!config.ok()) return Fail(config.status());

  // The threads started below inherit a mask that blocks the stop signals, so none of them is
  // interrupted; the main thread unblocks them once it waits for one.
  if (absl::Status s = InstallStopHandler(); !s.ok()) return Fail(s);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<state::StateStore>> store =
      state::OpenSqliteStateStore(config->state_path);
  if (!store.ok()) return Fail(store.status());
  identity::ApiKeyTable keys(**store,
                             {.refresh_interval = absl::Milliseconds(config->key_refresh_ms),
                              .touch_interval = absl::Milliseconds(config->key_touch_ms)});
  if (absl::Status s = keys.Refresh(); !s.ok()) return Fail(s);
  absl::StatusOr<std::unique_ptr<identity::JwtVerifier>> jwt = MakeJwtVerifier(*config);
  if (!jwt.ok()) return Fail(jwt.status());
  std::map<std::string, identity::CertificateClient> certificate_clients;
  for (const auto& [name, client] : config->certificate_clients) {
    identity::CertificateClient& c = certificate_clients[name];
    c.tenant = client.tenant;
    c.roles = client.roles;
    for (const auto& [attribute, values] : client.attributes) c.attributes[attribute] = values;
  }
  identity::Authenticator authenticator(&keys, jwt->get(), certificate_clients);
  monitor::MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<audit::AuditLog>> audit_log =
      OpenAuditLog(*config, &metrics, /*server=*/true);
  if (!audit_log.ok()) return Fail(audit_log.status());
  audit::CountingAuditSink audit(metrics, audit_log->get());
  absl::StatusOr<std::unique_ptr<policy::PolicySource>> policy = policy::PolicySource::Open(
      config->policy_path, absl::Milliseconds(config->policy_reload_ms), &audit);
  if (!policy.ok()) return Fail(policy.status());
  absl::StatusOr<Limiters> limiters = MakeLimiters(*config, **store, metrics);
  if (!limiters.ok()) return Fail(limiters.status());
  monitor::AccessLog access_log;
  if (absl::Status s = access_log.Open(config->access_log); !s.ok()) return Fail(s);

  absl::StatusOr<std::vector<signing::PublicKey>> trusted =
      signing::ReadPublicKeys(config->trusted_keys);
  if (!trusted.ok()) return Fail(trusted.status());
  HighWaterMarks high_water_marks(**store);
  absl::StatusOr<std::unique_ptr<ModelWatcher>> watcher =
      WatchModels(*config, *trusted, high_water_marks, metrics, audit);
  if (!watcher.ok()) return Fail(watcher.status());
  runtime::ModelCatalog& catalog = (*watcher)->catalog();
  std::unique_ptr<ModelReverifier> reverifier;
  if (config->require_signatures && config->reverify_interval_ms > 0) {
    reverifier = std::make_unique<ModelReverifier>(catalog, *trusted,
                                                   absl::Milliseconds(config->reverify_interval_ms),
                                                   absl::Milliseconds(config->poll_ms), audit);
    reverifier->Start();
  }

  pipeline::Chain chain(
      stages::RequestStages({.metrics = metrics,
                             .access_log = access_log,
                             .authenticator = authenticator,
                             .audit = audit,
                             .catalog = catalog,
                             .policy = **policy,
                             .default_alias = config->default_alias,
                             .limiter = *limiters->primary,
                             .fallback_limiter = limiters->fallback.get(),
                             .handlers = MakeOperationHandlers(catalog, metrics)}),
      &metrics);

  const bool strict = config->strict_readiness;
  RequestHandler handler(
      chain,
      [&catalog, strict] {
        const std::shared_ptr<const runtime::ModelRegistry> models = catalog.Current();
        return strict ? models->AllReady() && !models->versions().empty()
                      : std::any_of(models->versions().begin(), models->versions().end(),
                                    [](const auto& v) { return v->ready(); });
      },
      &access_log);

  http::Router data_router = DataRouter();
  http::Router admin_router = AdminRouter();
  const int threads = config->threads > 0 ? config->threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
  http::HttpServer server(config->limits, handler, &metrics, threads);
  absl::StatusOr<uint16_t> data_port = server.AddListener(config->data, data_router);
  if (!data_port.ok()) return Fail(data_port.status());
  absl::StatusOr<uint16_t> admin_port = server.AddListener(config->admin, admin_router);
  if (!admin_port.ok()) return Fail(admin_port.status());
  if (!options.ports_file.empty()) {
    if (absl::Status s = WritePortsFile(options.ports_file, *data_port, *admin_port); !s.ok())
      return Fail(s);
  }
  (*watcher)->Start();
  server.Start();
  std::fprintf(
      stderr, "pillar: serving data plane on %s://%s:%u, admin plane on %s://%s:%u (%d threads)\n",
      config->data.tls_certificate.empty() ? "http" : "https", config->data.address.c_str(),
      *data_port, config->admin.tls_certificate.empty() ? "http" : "https",
      config->admin.address.c_str(), *admin_port, threads);

  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  const int signal_number = WaitForStopSignal();
  std::fprintf(stderr, "pillar: %s received; draining\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  handler.SetDraining();
  server.SetDraining();
  server.StopAccepting();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(config->drain_timeout_ms);
  while ((handler.in_flight() > 0 || server.ResponsesInProgress() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int64_t abandoned = handler.in_flight();
  server.Stop();
  // Unload the models while the event loop still exists: a request abandoned by a timed-out
  // drain is failed by its runner and posts its answer to that (stopped) loop.
  reverifier.reset();  // before the versions it checks go away
  (*watcher)->UnloadAll();
  watcher->reset();
  access_log.Flush();
  // The audit log writes what is queued, and a final checkpoint, when destroyed: after the
  // policy source and the model parts that record into it (declared after it).
  if (abandoned > 0) {
    std::fprintf(stderr, "pillar: drain timed out with %lld requests in flight\n",
                 static_cast<long long>(abandoned));
    return 1;
  }
  std::fprintf(stderr, "pillar: drained; exiting\n");
  return 0;
}

}  // namespace pillar::app
