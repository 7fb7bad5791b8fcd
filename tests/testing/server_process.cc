#include "testing/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "signing/model_manifest.h"
#include "testing/http_client.h"

namespace pillar::testing {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string PillarBinary() {
  const char* binary = std::getenv("PILLAR_BINARY");
  return binary ? binary : "pillar";
}

std::filesystem::path SourceDir() {
  const char* dir = std::getenv("PILLAR_SOURCE_DIR");
  return dir ? dir : ".";
}

std::filesystem::path DemoStore() { return SourceDir() / "models/demo/store"; }

int RunPillar(const std::vector<std::string>& args, std::string* out, std::string* err) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    std::vector<char*> argv;
    std::string binary = PillarBinary();
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  // Both outputs are small; drain them one after the other.
  std::string o, e;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out_pipe[0], buf, sizeof buf)) > 0) o.append(buf, size_t(n));
  while ((n = ::read(err_pipe[0], buf, sizeof buf)) > 0) e.append(buf, size_t(n));
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (out) *out = o;
  if (err) *err = e;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

ServerProcess::ServerProcess() : store_(DemoStore()) {}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void ServerProcess::WriteConfig() {
  const std::string audit_key = (dir_ / "audit").string();
  if (!std::filesystem::exists(audit_key + ".key")) {
    (void)signing::WriteKeyPair(signing::GenerateSigningKey(), audit_key);
  }
  std::ofstream out(config_path());
  out << "[data]\nport = 0\n"
      << data_config_ << "[admin]\nport = 0\n"
      << "[repository]\npath = \"" << store_.string() << "\"\ntrusted_keys = [\""
      << trusted_key().string() << "\"]\n";
  // The key that signs the store also signs what the CLI pushes and the alias files it writes.
  if (std::filesystem::exists(dir_ / "trust.key")) {
    out << "signing_key = \"" << (dir_ / "trust.key").string() << "\"\n";
  }
  out << repository_config_ << "[state]\npath = \"" << state_path().string()
      << "\"\nkey_refresh_ms = 50\n"
      << "[logging]\naccess_log = \""
      << (access_log_.empty() ? (dir_ / "access.log").string() : access_log_) << "\"\n"
      << "[audit]\nfile = \"" << audit_log().string() << "\"\nsigning_key = \"" << audit_key
      << ".key\"\npublic_keys = [\"" << audit_public_key().string() << "\"]\n"
      << audit_config_ << extra_config_;
}

std::string ServerProcess::CreateKey(const std::string& name) {
  return CreateKey(name, {"--role", "admin"});
}

std::string ServerProcess::CreateKey(const std::string& name,
                                     const std::vector<std::string>& options) {
  WriteConfig();
  std::string out;
  std::vector<std::string> args = {"key", "create", "-c", config_path().string(), "--name", name};
  args.insert(args.end(), options.begin(), options.end());
  if (RunPillar(args, &out) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

bool ServerProcess::RevokeKey(const std::string& key) {
  // The id is the 12 characters after "pk_".
  return RunPillar({"key", "revoke", "-c", config_path().string(), key.substr(3, 12)}) == 0;
}

bool ServerProcess::SignStore() {
  namespace fs = std::filesystem;
  if (store_ == DemoStore()) store_ = CopyDemoStore(dir_);
  const std::string prefix = (dir_ / "trust").string();
  if (!fs::exists(prefix + ".key") &&
      !signing::WriteKeyPair(signing::GenerateSigningKey(), prefix).ok()) {
    return false;
  }
  absl::StatusOr<signing::SigningKey> key = signing::ReadPrivateKey(prefix + ".key");
  if (!key.ok()) return false;
  // In process, not through `pillar model sign`: the CLI is tested on its own, and a process per
  // version would add seconds to every suite that starts servers.
  std::error_code ec;
  for (const auto& model : fs::directory_iterator(store_, ec)) {
    if (!model.is_directory()) continue;
    for (const auto& version : fs::directory_iterator(model.path(), ec)) {
      if (!version.is_directory() || fs::is_empty(version.path())) continue;
      const std::string name =
          model.path().filename().string() + "/" + version.path().filename().string();
      if (!signing::SignModel(version.path().string(), name, *key).ok()) return false;
    }
  }
  return !ec;
}

bool ServerProcess::Start() {
  if (sign_store_ && !SignStore()) return false;
  WriteConfig();
  std::filesystem::path ports = dir_ / "ports";
  std::filesystem::path log = dir_ / "server.log";
  std::filesystem::remove(ports);  // a restart must not read the ports of the previous run
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (open_file_limit_ > 0) {
      const rlimit limit{rlim_t(open_file_limit_), rlim_t(open_file_limit_)};
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    std::string binary = PillarBinary();
    std::string config = config_path().string();
    std::string ports_file = ports.string();
    ::execl(binary.c_str(), binary.c_str(), "serve", "-c", config.c_str(), "--ports-file",
            ports_file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;  // exited during start-up; Log() says why
    }
    std::string text = ReadFile(ports);
    if (text.find("admin=") != std::string::npos) {
      std::istringstream in(text);
      std::string line;
      while (std::getline(in, line)) {
        if (line.rfind("data=", 0) == 0) data_port_ = uint16_t(std::stoi(line.substr(5)));
        if (line.rfind("admin=", 0) == 0) admin_port_ = uint16_t(std::stoi(line.substr(6)));
      }
      const bool tls = data_config_.find("tls_certificate") != std::string::npos;
      if (tls || Fetch(data_port_, "GET", "/v2/health/live").status == 200) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the start-up
  }
  return false;
}

int ServerProcess::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  return WaitForExit();
}

int ServerProcess::WaitForExit() {
  if (pid_ <= 0) return -1;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ServerProcess::Log() const { return ReadFile(dir_ / "server.log"); }

void WriteSimulatedVersion(const std::filesystem::path& store, const std::string& model,
                           const std::string& simulated, int instances,
                           const std::string& histogram) {
  const std::filesystem::path dir = store / model / "1";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "model.toml") << R"(platform = "simulated"
max_batch_size = 8
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]
[instance]
count = )" << instances << R"(
[access]
tenant = "demo"
[simulated]
)" << simulated;
  if (!histogram.empty()) std::ofstream(dir / "latency_histogram.txt") << histogram;
}

std::vector<std::pair<std::string, std::string>> FilesUnder(const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    files.emplace_back(entry.path().string(), std::string(std::istreambuf_iterator<char>(in), {}));
  }
  return files;
}

std::vector<std::string> SeededValuesWritten(
    const std::vector<std::pair<std::string, std::string>>& written,
    const std::vector<std::string>& seeded) {
  std::vector<std::string> found;
  bool access_log_seen = false;
  for (const auto& [path, bytes] : written) {
    access_log_seen = access_log_seen || (path.ends_with("access.log") && !bytes.empty());
    for (const std::string& value : seeded) {
      if (bytes.find(value) != std::string::npos) found.push_back(value + " is in " + path);
    }
  }
  if (!access_log_seen) found.push_back("no access.log was searched");
  return found;
}

std::filesystem::path CopyDemoStore(const std::filesystem::path& dir,
                                    const std::string& digits_toml) {
  std::filesystem::path store = dir / "store";
  std::filesystem::copy(DemoStore(), store, std::filesystem::copy_options::recursive);
  if (!digits_toml.empty()) {
    std::ofstream out(store / "digits/1/model.toml", std::ios::trunc);
    out << digits_toml;
  }
  return store;
}

std::string DigitsToml(int max_batch_size, int64_t max_queue_delay_us, int64_t max_queue_size,
                       int instances, bool adaptive_delay) {
  std::ostringstream t;
  t << "platform = \"torchscript\"\nmax_batch_size = " << max_batch_size << "\n"
    << "[[input]]\nname = \"pixels\"\ndatatype = \"FP32\"\nshape = [64]\n"
    << "[[output]]\nname = \"probabilities\"\ndatatype = \"FP32\"\nshape = [10]\n"
    << "[batching]\nmax_queue_delay_us = " << max_queue_delay_us
    << "\nmax_queue_size = " << max_queue_size
    << "\nadaptive_delay = " << (adaptive_delay ? "true" : "false")
    << "\n[instance]\ncount = " << instances << "\nkind = \"cpu\"\n";
  return t.str();
}

std::vector<Digit> LoadHeldOut() {
  std::ifstream in(SourceDir() / "models/demo/heldout.csv");
  std::vector<Digit> digits;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string field;
    Digit d{};
    std::getline(fields, field, ',');
    d.label = std::stoi(field);
    while (std::getline(fields, field, ',')) d.pixels.push_back(std::stoi(field));
    digits.push_back(std::move(d));
  }
  return digits;
}

std::string InferBody(const std::vector<const Digit*>& digits) {
  std::string body = "{\"inputs\":[{\"name\":\"pixels\",\"datatype\":\"FP32\",\"shape\":[" +
                     std::to_string(digits.size()) + ",64],\"data\":[";
  bool first = true;
  for (const Digit* d : digits) {
    for (int p : d->pixels) {
      if (!first) body += ',';
      body += std::to_string(p);
      first = false;
    }
  }
  return body + "]}]}";
}

}  // namespace pillar::testing
