// `pillar serve`: wires the parts (state, identity, models, runtime, pipeline, listeners) and
// runs until SIGTERM or SIGINT, then drains: readiness turns false, the listeners close,
// requests in flight finish, and the process exits 0.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "app/backends_source.h"
#include "app/commands.h"
#include "app/config.h"
#include "app/operation_handlers.h"
#include "app/request_handler.h"
#include "app/routes.h"
#include "app/version_loader.h"
#include "audit/audit_config.h"
#include "audit/counting_audit_sink.h"
#include "common/env.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "jobs/job_queue.h"
#include "limits/limiter_config.h"
#include "models/high_water_marks.h"
#include "models/model_repository.h"
#include "monitor/access_log.h"
#include "policy/policy_source.h"
#include "runtime/model_reverifier.h"
#include "runtime/model_watcher.h"
#include "stages/request_chain.h"
#include "state/state_store.h"
#include "upstream/redis_breaker_sync.h"

namespace pillar::app {
namespace {

struct ServeOptions {
  std::string config_path;  // empty: defaults
  std::string ports_file;   // where to write the bound ports once listening (tests use port 0)
};

// What remote versions share in this server: breaker trips with other instances (through the
// limits' Redis, when there is one), and the operator's backends file.
struct RemoteParts {
  std::unique_ptr<upstream::BreakerSync> breaker_sync;
  std::unique_ptr<BackendsSource> backends;
};

[[nodiscard]] absl::StatusOr<std::unique_ptr<upstream::BreakerSync>> MakeBreakerSync(
    const limits::LimiterConfig& limiter) {
  if (limiter.backend != limits::LimiterConfig::Backend::kRedis) return nullptr;
  upstream::RedisBreakerSyncOptions options;
  options.host = limiter.redis_host;
  options.port = limiter.redis_port;
  options.timeout_ms = absl::ToInt64Milliseconds(limiter.redis_timeout);
  options.key_prefix = limiter.redis_key_prefix;
  if (!limiter.redis_password_file.empty()) {
    absl::StatusOr<std::string> password = ReadSecretFile(limiter.redis_password_file, 4096);
    if (!password.ok()) return password.status();
    while (!password->empty() && (password->back() == '\n' || password->back() == '\r')) {
      password->pop_back();
    }
    options.password = SecretString(std::move(*password));
  }
  return std::make_unique<upstream::RedisBreakerSync>(std::move(options));
}

// The keys job payloads are sealed with at rest: [jobs] payload_keys, or jobs.key beside the
// state file, made on the first start.
[[nodiscard]] absl::StatusOr<std::shared_ptr<const jobs::PayloadSealer>> OpenPayloadSealer(
    const Config& config) {
  std::vector<std::string> keys = config.jobs.payload_keys;
  if (keys.empty()) {
    const std::string path =
        (std::filesystem::path(config.state_path).parent_path() / "jobs.key").string();
    absl::StatusOr<bool> made = jobs::PayloadSealer::CreateKeyIfMissing(path);
    if (!made.ok()) return made.status();
    if (*made) {
      std::fprintf(stderr,
                   "pillar: made %s, the key job payloads are sealed with at rest; keep it with "
                   "the state file (docs/operations.md)\n",
                   path.c_str());
    }
    keys.push_back(path);
  }
  return jobs::PayloadSealer::Load(keys);
}

[[nodiscard]] absl::StatusOr<RemoteParts> MakeRemoteParts(const Config& config,
                                                          audit::AuditSink& audit) {
  RemoteParts parts;
  absl::StatusOr<std::unique_ptr<upstream::BreakerSync>> sync = MakeBreakerSync(config.limiter);
  if (!sync.ok()) return sync.status();
  parts.breaker_sync = std::move(*sync);
  parts.backends =
      std::make_unique<BackendsSource>(config.backends_file, config.backends_reload, &audit);
  if (absl::Status s = parts.backends->Load(); !s.ok()) return s;
  return parts;
}

// Watches the store and loads what it names: only versions signed by a trusted key for their
// own name and version, and only aliases a trusted key signed, never older than seen before.
[[nodiscard]] absl::StatusOr<std::unique_ptr<runtime::ModelWatcher>> WatchModels(
    const Config& config, const std::vector<signing::PublicKey>& trusted,
    models::HighWaterMarks& marks, monitor::MetricsRegistry& metrics, audit::AuditSink& audit,
    RemoteParts& remote) {
  const models::RepositoryOptions& options = config.repository;
  models::AliasTrust alias_trust{
      .trusted = trusted,
      .require_signature = options.require_signatures,
      .admit_generation = [&marks](std::string_view model, int64_t generation) {
        return marks.Admit(model, generation);
      }};
  models::ModelRepository repository(options.path, options.version_policy, options.model_policies,
                                     std::move(alias_trust));
  runtime::RunnerLoader loader = MakeVersionLoader(
      {.require_signatures = options.require_signatures,
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
       .remote = {.metrics = upstream::UpstreamMetrics::Register(metrics),
                  .zone = config.zone,
                  .audit = &audit,
                  .active_checks = true,
                  .breaker_sync = remote.breaker_sync.get()},
       .backends = [backends = remote.backends.get()] { return backends->Current(); },
       .torch_threads = config.torch_threads});
  auto watcher = std::make_unique<runtime::ModelWatcher>(std::move(repository), std::move(loader),
                                                         options.poll, audit);
  remote.backends->Start(watcher->catalog());
  return watcher;
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
  // A write to a pipe or socket whose reader went away (the access log on a pipe to a log
  // shipper that restarted, hiredis's write() to a Redis that closed) raises SIGPIPE, whose
  // default action ends the server with every connection on it. Ignored, the write fails with
  // EPIPE, which each writer handles as the error it is. (The shell commands a health check
  // runs get the default back before their exec.)
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (::sigaction(SIGPIPE, &ignore, nullptr) != 0) {
    return absl::InternalError("cannot ignore SIGPIPE");
  }
  // SIGHUP (a closed terminal, `systemctl reload`) would end the server on the spot, without
  // its drain (review helper-102). There is nothing to reload on it: the files a change is made
  // in (policy, models, backends, TLS) are watched, and pillar.toml is read at start.
  if (::sigaction(SIGHUP, &ignore, nullptr) != 0) {
    return absl::InternalError("cannot ignore SIGHUP");
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

// The threads started after this inherit a mask that blocks the stop signals, so none of them
// is interrupted; the main thread unblocks `signals` once it waits for one.
[[nodiscard]] absl::Status BlockStopSignals(sigset_t& signals) {
  PILLAR_RETURN_IF_ERROR(InstallStopHandler());
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return absl::OkStatus();
}

// Null when [jwt] is not configured: tokens are then refused.
[[nodiscard]] absl::StatusOr<std::unique_ptr<identity::JwtVerifier>> MakeJwtVerifier(
    const Config& config) {
  if (!config.jwt) return nullptr;
  return identity::JwtVerifier::Create(*config.jwt);
}

// Checks the loaded versions' files against their signatures again, every reverify_interval.
std::unique_ptr<runtime::ModelReverifier> StartReverifier(
    const models::RepositoryOptions& repository, runtime::ModelCatalog& catalog,
    const std::vector<signing::PublicKey>& trusted, audit::AuditSink& audit) {
  if (!repository.require_signatures || repository.reverify_interval <= absl::ZeroDuration()) {
    return nullptr;
  }
  auto reverifier = std::make_unique<runtime::ModelReverifier>(
      catalog, trusted, repository.reverify_interval, repository.poll, audit);
  reverifier->Start();
  return reverifier;
}

// Ready: every version loaded (strict_readiness), or at least one.
std::function<bool()> Readiness(const runtime::ModelCatalog& catalog, bool strict) {
  return [&catalog, strict] {
    const std::shared_ptr<const runtime::ModelRegistry> models = catalog.Current();
    return strict ? models->AllReady() && !models->versions().empty()
                  : std::any_of(models->versions().begin(), models->versions().end(),
                                [](const auto& v) { return v->ready(); });
  };
}

// "https://127.0.0.1:8000"
std::string Where(const http::ListenerOptions& listener, uint16_t port) {
  return StrCat(listener.tls_certificate.empty() ? "http" : "https", "://", listener.address, ":",
                port);
}

// Binds both listeners and writes their ports to `ports_file` (when given); returns the line
// that says where they are, printed once the server runs.
[[nodiscard]] absl::StatusOr<std::string> Listen(http::HttpServer& server, const Config& config,
                                                 const http::Router& data_router,
                                                 const http::Router& admin_router,
                                                 const std::string& ports_file, int threads) {
  PILLAR_ASSIGN_OR_RETURN(const uint16_t data_port, server.AddListener(config.data, data_router));
  PILLAR_ASSIGN_OR_RETURN(const uint16_t admin_port,
                          server.AddListener(config.admin, admin_router));
  if (!ports_file.empty()) {
    PILLAR_RETURN_IF_ERROR(WritePortsFile(ports_file, data_port, admin_port));
  }
  return StrCat("pillar: serving data plane on ", Where(config.data, data_port),
                ", admin plane on ", Where(config.admin, admin_port), " (", threads, " threads)\n");
}

// The exit code once drained: 1 when requests were still in flight at the drain timeout.
int Drained(int64_t abandoned) {
  if (abandoned > 0) {
    std::fprintf(stderr, "pillar: drain timed out with %lld requests in flight\n",
                 static_cast<long long>(abandoned));
    return 1;
  }
  std::fprintf(stderr, "pillar: drained; exiting\n");
  return 0;
}

// One event loop per core.
int ThreadsPerCore() { return int(std::max(1u, std::thread::hardware_concurrency())); }

// Stops taking requests and new jobs, and waits, at most `timeout` in all, for the requests in
// flight to be answered and then for the job runs in flight; returns how many requests were
// abandoned.
int64_t Drain(RequestHandler& handler, http::HttpServer& server, jobs::JobQueue& jobs,
              absl::Duration timeout) {
  jobs.StopClaiming();
  handler.SetDraining();
  server.SetDraining();
  server.StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  while ((handler.in_flight() > 0 || server.ResponsesInProgress() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int64_t abandoned = handler.in_flight();
  server.Stop();
  // Job runs get what is left of the drain; any still running then are given up, to be run
  // again by the next instance.
  const auto left = absl::FromChrono(deadline - std::chrono::steady_clock::now());
  jobs.Stop(std::max(absl::ZeroDuration(), left));
  return abandoned;
}

// Raises the soft limit on descriptors to the hard one, as Go's runtime and most servers do (the
// soft one is often 1,024 while the hard one is far higher); returns the limit then in force
// (RLIM_INFINITY when there is none, or when it cannot be read).
rlim_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return RLIM_INFINITY;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur;
}

// A connection holds a descriptor, and each of the two listeners (data, admin) admits
// max_connections (10,000 by default). A quarter of `open_files` (at least 64), and four per
// event loop, are kept for pillar's own files (models, logs, state, upstream pools), and
// max_connections is lowered, saying so, until both listeners fit in the rest. Otherwise clients
// holding connections could exhaust the descriptors, and every file pillar opens would fail while
// they held them (the model store's scan and the signature checks among them).
size_t ConnectionsWithin(rlim_t open_files, size_t max_connections, int threads) {
  constexpr size_t kListeners = 2;
  if (open_files == RLIM_INFINITY) return max_connections;
  // Each event loop holds an epoll, an eventfd and a timer of its own (review helper-56: 24
  // threads filled the quarter of a limit of 256).
  const rlim_t own = std::max<rlim_t>(64, open_files / 4) + 4 * rlim_t(std::max(threads, 1));
  const size_t fits =
      open_files > own ? std::max<size_t>(1, size_t(open_files - own) / kListeners) : 1;
  if (fits >= max_connections) return max_connections;
  std::fprintf(stderr,
               "pillar: max_connections lowered from %zu to %zu on each listener: the open-file "
               "limit is %llu, and %llu are kept for pillar's own files (raise `ulimit -n`, or "
               "LimitNOFILE= in a systemd unit)\n",
               max_connections, fits, static_cast<unsigned long long>(open_files),
               static_cast<unsigned long long>(own));
  return fits;
}

// Lets the stop signals in, and returns once one arrived.
void AwaitStopSignal(const sigset_t& signals) {
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  const int signal_number = WaitForStopSignal();
  std::fprintf(stderr, "pillar: %s received; draining\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
}

// One function: the composition root. Each part is made after what it depends on and torn down
// in reverse by scope; split up, that order would be spread over functions read together anyway.
int RunServe(const ServeOptions& options) {
  absl::StatusOr<Config> config = LoadConfig(options.config_path);
  if (!config.ok()) return Fail("serve", config.status());
  sigset_t signals;
  if (absl::Status s = BlockStopSignals(signals); !s.ok()) return Fail("serve", s);
  config->limits.max_connections =
      ConnectionsWithin(RaiseOpenFileLimit(), config->limits.max_connections,
                        config->threads > 0 ? config->threads : ThreadsPerCore());
  absl::StatusOr<std::unique_ptr<state::StateStore>> store =
      state::OpenSqliteStateStore(config->state_path);
  if (!store.ok()) return Fail("serve", store.status());
  identity::ApiKeyTable keys(
      **store, {.refresh_interval = config->key_refresh, .touch_interval = config->key_touch});
  if (absl::Status s = keys.Refresh(); !s.ok()) return Fail("serve", s);
  absl::StatusOr<std::unique_ptr<identity::JwtVerifier>> jwt = MakeJwtVerifier(*config);
  if (!jwt.ok()) return Fail("serve", jwt.status());
  identity::Authenticator authenticator(&keys, jwt->get(), config->certificate_clients);
  monitor::MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<audit::AuditLog>> audit_log =
      audit::OpenAuditLog(config->audit, &metrics, /*server=*/true);
  if (!audit_log.ok()) return Fail("serve", audit_log.status());
  audit::CountingAuditSink audit(metrics, audit_log->get());
  absl::StatusOr<std::unique_ptr<policy::PolicySource>> policy =
      policy::PolicySource::Open(config->policy_path, config->policy_reload, &audit);
  if (!policy.ok()) return Fail("serve", policy.status());
  absl::StatusOr<limits::Limiters> limiters =
      limits::MakeLimiters(config->limiter, **store, metrics);
  if (!limiters.ok()) return Fail("serve", limiters.status());
  monitor::AccessLog access_log;
  if (absl::Status s = access_log.Open(config->access_log); !s.ok()) return Fail("serve", s);
  absl::StatusOr<std::vector<signing::PublicKey>> trusted =
      signing::ReadPublicKeys(config->repository.trusted_keys);
  if (!trusted.ok()) return Fail("serve", trusted.status());
  models::HighWaterMarks high_water_marks(**store);
  absl::StatusOr<RemoteParts> remote = MakeRemoteParts(*config, audit);
  if (!remote.ok()) return Fail("serve", remote.status());
  absl::StatusOr<std::unique_ptr<runtime::ModelWatcher>> watcher =
      WatchModels(*config, *trusted, high_water_marks, metrics, audit, *remote);
  if (!watcher.ok()) return Fail("serve", watcher.status());
  absl::Cleanup stop_backends = [&remote] { remote->backends->Stop(); };  // before the catalog
  runtime::ModelCatalog& catalog = (*watcher)->catalog();
  std::unique_ptr<runtime::ModelReverifier> reverifier =
      StartReverifier(config->repository, catalog, *trusted, audit);
  absl::StatusOr<std::shared_ptr<const jobs::PayloadSealer>> sealer = OpenPayloadSealer(*config);
  if (!sealer.ok()) return Fail("serve", sealer.status());
  jobs::JobQueue job_queue(**store, config->jobs, *std::move(sealer), metrics);
  pipeline::Chain chain(stages::RequestStages({.metrics = metrics,
                                               .access_log = access_log,
                                               .authenticator = authenticator,
                                               .audit = audit,
                                               .catalog = catalog,
                                               .policy = **policy,
                                               .default_alias = config->repository.default_alias,
                                               .limiter = *limiters->primary,
                                               .fallback_limiter = limiters->fallback.get(),
                                               .handlers = MakeOperationHandlers(catalog, metrics),
                                               .jobs = &job_queue,
                                               .guard = config->guard}),
                        &metrics);
  job_queue.Attach(chain);
  RequestHandler handler(chain, Readiness(catalog, config->strict_readiness), &access_log,
                         &authenticator);
  http::Router data_router = DataRouter();
  http::Router admin_router = AdminRouter();
  const int threads = config->threads > 0 ? config->threads : ThreadsPerCore();
  http::HttpServer server(config->limits, handler, &metrics, threads);
  // Each listener's newest client CRLs outlive a restart, so none older can be put back then.
  server.KeepRevocationMarks([&state = **store](const std::string& name, int64_t value) {
    return state.RaiseHighWater(name, value);
  });
  // A job submitted with a client certificate runs only while the certificate still verifies.
  authenticator.SetCertificateCheck([&server](std::string_view listener, std::string_view der) {
    return server.VerifyClientCertificate(listener, der);
  });
  absl::StatusOr<std::string> serving =
      Listen(server, *config, data_router, admin_router, options.ports_file, threads);
  if (!serving.ok()) return Fail("serve", serving.status());
  (*watcher)->Start();
  server.Start();
  job_queue.Start();
  std::fputs(serving->c_str(), stderr);
  AwaitStopSignal(signals);
  const int64_t abandoned = Drain(handler, server, job_queue, config->drain_timeout);
  // Unload the models while the event loop still exists: a request abandoned by a timed-out
  // drain is failed by its runner and posts its answer to that (stopped) loop.
  reverifier.reset();  // before the versions it checks go away
  std::move(stop_backends).Invoke();
  (*watcher)->UnloadAll();
  watcher->reset();
  access_log.Flush();
  // The audit log writes what is queued, and a final checkpoint, when destroyed: after the
  // policy source and the model parts that record into it (declared after it).
  return Drained(abandoned);
}

}  // namespace

void AddServeCommand(CLI::App& cli, Commands& commands) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* serve = cli.add_subcommand("serve", "Run the inference server (data and admin planes)");
  serve->add_option("-c,--config", options->config_path, "Configuration file (TOML)");
  serve->add_option("--ports-file", options->ports_file,
                    "Write the bound ports here once listening");
  commands.On(serve, [options] { return RunServe(*options); });
}

}  // namespace pillar::app
