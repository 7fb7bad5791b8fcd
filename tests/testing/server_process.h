// Runs the real `pillar serve` binary for integration tests: a temp directory with its own
// config and state, ports chosen by the kernel (port 0) and read back from the ports file,
// readiness polled (no sleeps), SIGTERM on Stop().
//
//   ServerProcess server;  server.AddConfig("[server]\nthreads = 2\n");
//   std::string key = server.CreateKey("tests");
//   ASSERT_TRUE(server.Start());
//   HttpReply r = Fetch(server.data_port(), "GET", "/v2", "", {Bearer(key)});
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "testing/temp_dir.h"

namespace pillar::testing {

// The pillar binary and source tree, from the environment CTest sets (PILLAR_BINARY,
// PILLAR_SOURCE_DIR).
std::string PillarBinary();
std::filesystem::path SourceDir();
std::filesystem::path DemoStore();

// Runs `pillar args...` to completion; returns its exit code and stdout.
int RunPillar(const std::vector<std::string>& args, std::string* out = nullptr,
              std::string* err = nullptr);

class ServerProcess {
 public:
  ServerProcess();
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path config_path() const { return dir_ / "pillar.toml"; }
  // Appended to the generated config (which sets the store, state, ports 0, access log).
  void AddConfig(const std::string& toml) { extra_config_ += toml; }
  // Added inside the generated [data] section, e.g. TLS settings. With TLS on, Start() waits
  // for the listeners to be bound instead of asking liveness over plaintext.
  void AddDataConfig(const std::string& toml) { data_config_ += toml; }
  // Added inside the generated [repository] section.
  void AddRepositoryConfig(const std::string& toml) { repository_config_ += toml; }
  // Lines for the [audit] section, whose file and checkpoint key live in dir().
  void AddAuditConfig(const std::string& toml) { audit_config_ += toml; }
  std::filesystem::path audit_log() const { return dir_ / "audit.log"; }
  std::filesystem::path audit_public_key() const { return dir_ / "audit.pub"; }
  void SetStore(const std::filesystem::path& store) { store_ = store; }
  // The server's soft and hard limit on open files (none set: the test's own).
  void SetOpenFileLimit(int files) { open_file_limit_ = files; }
  // Where the access log goes instead of dir()/access.log ("-" for the server's stdout).
  void SetAccessLog(const std::string& destination) { access_log_ = destination; }
  // By default Start() signs every version of the store with a key of its own and trusts only
  // that key, as a deployment would (the committed demo store is copied first, never written).
  // Off: the store is served as it is, signatures still required.
  void SetSignStore(bool sign) { sign_store_ = sign; }
  std::filesystem::path trusted_key() const { return dir_ / "trust.pub"; }
  // Shares another server's state database (keys), as instances behind one balancer do.
  void SetStatePath(const std::filesystem::path& state) { state_path_ = state; }
  std::filesystem::path state_path() const {
    return state_path_.empty() ? dir_ / "state.db" : state_path_;
  }
  // A key with role admin, or with the given `pillar key create` options (roles, tenant ...).
  std::string CreateKey(const std::string& name);
  std::string CreateKey(const std::string& name, const std::vector<std::string>& options);
  bool RevokeKey(const std::string& key);
  // Writes config_path() as the server will read it (Start() and CreateKey() do this too), for
  // tests that run `pillar` commands against it themselves.
  void WriteConfig();

  // Starts the server and waits until it listens and /v2/health/live answers.
  bool Start();
  // SIGTERM, then waits for the exit; returns the exit code (or -1).
  int Stop();
  // Waits for the process to exit by itself (after a signal the test sent); the exit code or -1.
  int WaitForExit();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string Log() const;

  uint16_t data_port() const { return data_port_; }
  uint16_t admin_port() const { return admin_port_; }

 private:
  TempDir temp_;
  std::filesystem::path dir_ = temp_.path();
  std::filesystem::path store_;
  std::string access_log_;
  int open_file_limit_ = 0;
  std::filesystem::path state_path_;
  std::string repository_config_;
  std::string audit_config_;
  bool sign_store_ = true;
  bool SignStore();
  std::string extra_config_;
  std::string data_config_;
  pid_t pid_ = -1;
  uint16_t data_port_ = 0;
  uint16_t admin_port_ = 0;
};

// Every regular file under `dir`, as (path, contents): what a test looks through for values that
// must not have been written.
std::vector<std::pair<std::string, std::string>> FilesUnder(const std::filesystem::path& dir);

// What of `seeded` is in `written` (as FilesUnder gives it), one line for each "VALUE is in
// PATH"; and a line saying so when no non-empty access.log is among `written`, since a search
// that did not look where the logs are proves nothing. Empty: none of it was written.
std::vector<std::string> SeededValuesWritten(
    const std::vector<std::pair<std::string, std::string>>& written,
    const std::vector<std::string>& seeded);

// Copies the demo store into `dir` and, when `digits_toml` is not empty, replaces the model.toml
// of digits version 1 with it. Returns the new store's path.
std::filesystem::path CopyDemoStore(const std::filesystem::path& dir,
                                    const std::string& digits_toml = "");

// Writes version 1 of a `platform = "simulated"` model into `store`: input "x" (FP32 [4]) and
// output "y" (FP32 [2]), batches of 8, `instances` instances, tenant "demo", and `simulated` as
// the body of its [simulated] table; `histogram`, when given, as its latency_histogram.txt.
void WriteSimulatedVersion(const std::filesystem::path& store, const std::string& model,
                           const std::string& simulated, int instances = 2,
                           const std::string& histogram = "");

// The model.toml of the demo's digits model with other batching settings.
// With adaptive_delay false, every request waits the full delay: tests use it to hold requests
// in flight.
std::string DigitsToml(int max_batch_size, int64_t max_queue_delay_us, int64_t max_queue_size,
                       int instances, bool adaptive_delay = false);

// Reads the held-out set: each row is a label and 64 pixel intensities.
struct Digit {
  int label;
  std::vector<int> pixels;
};
std::vector<Digit> LoadHeldOut();
std::string InferBody(const std::vector<const Digit*>& digits);

}  // namespace pillar::testing
