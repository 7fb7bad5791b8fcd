// platform = "remote" through real processes on loopback: a pillar gateway in front of another
// pillar (serving simulated models) and of a server that answers badly on purpose
// (bad_upstream.py). Every upstream failure is a clear 502 or 504 naming the endpoint, never its
// credentials, and never a crash or a hang.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/server_process.h"
#include "testing/temp_dir.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;
using testing::HttpReply;

constexpr char kTwoRows[] =
    R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8]}]})";

std::string ModelToml(const std::string& platform_tables) {
  return R"(max_batch_size = 8
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]
[access]
tenant = "demo"
)" + platform_tables;
}

void WriteVersion(const std::filesystem::path& store, const std::string& model,
                  const std::string& toml) {
  std::filesystem::create_directories(store / model / "1");
  std::ofstream(store / model / "1" / "model.toml") << toml;
}

std::string Simulated(const std::string& settings) {
  return "platform = \"simulated\"\n" +
         ModelToml("[instance]\ncount = 4\n[simulated]\n" + settings);
}

std::string Remote(const std::vector<std::string>& endpoints, const std::string& settings) {
  std::string list;
  for (const std::string& e : endpoints) list += (list.empty() ? "\"" : ", \"") + e + "\"";
  // No list: `settings` gives the endpoints (as inline tables).
  const std::string line = endpoints.empty() ? "" : "endpoints = [" + list + "]\n";
  return "platform = \"remote\"\n" + ModelToml("[remote]\n" + line + settings);
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

class RemoteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    upstream_ = new testing::ServerProcess;
    const std::filesystem::path upstream_store = upstream_->dir() / "store";
    WriteVersion(upstream_store, "sim", Simulated("latency_ms = 5\n"));
    WriteVersion(upstream_store, "slow", Simulated("latency_ms = 1000\n"));
    WriteVersion(upstream_store, "throttled",
                 Simulated("throttle_rate = 1.0\nretry_after_s = 2\n"));
    WriteVersion(upstream_store, "failing", Simulated("error_rate = 1.0\n"));
    WriteVersion(upstream_store, "pause", Simulated("latency_ms = 0\n"));
    WriteVersion(upstream_store, "good", Simulated("latency_ms = 0\n"));
    WriteVersion(upstream_store, "flaky", Simulated("latency_ms = 0\n"));
    WriteVersion(upstream_store, "slowish", Simulated("latency_ms = 100\n"));
    upstream_->SetStore(upstream_store);
    token_ = upstream_->CreateKey("gateway");
    ASSERT_TRUE(upstream_->Start()) << upstream_->Log();

    bad_dir_ = new testing::TempDir;
    bad_port_ = testing::FreeLoopbackPort();
    tls_port_ = testing::FreeLoopbackPort();
    const std::string certificate =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout " +
        (bad_dir_->path() / "key.pem").string() + " -out " +
        (bad_dir_->path() / "cert.pem").string() + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(certificate.c_str()), 0);
    // Two more TLS upstreams for "localhost": one whose certificate names it only in its
    // subject CN (no SAN), one that names it as a DNS SAN.
    for (const auto& [name, extra] : {std::pair<std::string, std::string>{"cnonly", ""},
                                      std::pair<std::string, std::string>{
                                          "dnsname", " -addext subjectAltName=DNS:localhost"}}) {
      const std::string command =
          "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost" + extra +
          " -keyout " + (bad_dir_->path() / (name + ".key")).string() + " -out " +
          (bad_dir_->path() / (name + ".pem")).string() + " >/dev/null 2>&1";
      ASSERT_EQ(std::system(command.c_str()), 0);
    }
    cn_only_port_ = testing::FreeLoopbackPort();
    dns_name_port_ = testing::FreeLoopbackPort();
    stall_port_ = testing::FreeLoopbackPort();
    for (int& port : more_bad_ports_) port = testing::FreeLoopbackPort();
    bad_pid_ = ::fork();
    if (bad_pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      if (::chdir(bad_dir_->path().c_str()) != 0) ::_exit(126);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);  // the script's tracebacks for connections pillar cut off
      const std::string script =
          (testing::SourceDir() / "tests/integration/bad_upstream.py").string();
      const std::string port = std::to_string(bad_port_);
      const std::string port2 = std::to_string(more_bad_ports_[0]);
      const std::string port3 = std::to_string(more_bad_ports_[1]);
      const std::string port4 = std::to_string(more_bad_ports_[2]);
      const std::string tls = "tls:" + std::to_string(tls_port_);
      const std::string cn_only = "tls:" + std::to_string(cn_only_port_) + ":cnonly";
      const std::string dns_name = "tls:" + std::to_string(dns_name_port_) + ":dnsname";
      ::execl("/usr/bin/python3", "python3", script.c_str(), port.c_str(), port2.c_str(),
              port3.c_str(), port4.c_str(), tls.c_str(), cn_only.c_str(), dns_name.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_GT(bad_pid_, 0);
    for (int i = 0; i < 200 && !Listening(bad_port_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(Listening(bad_port_));
    for (int port : {more_bad_ports_[0], more_bad_ports_[1], more_bad_ports_[2], tls_port_,
                     cn_only_port_, dns_name_port_}) {
      for (int i = 0; i < 200 && !Listening(port); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
      ASSERT_TRUE(Listening(port));
    }

    gateway_ = new testing::ServerProcess;
    const std::filesystem::path credentials = gateway_->dir() / "upstream.token";
    std::ofstream(credentials) << token_ << "\n";
    std::filesystem::permissions(
        credentials, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    const std::filesystem::path leaky = gateway_->dir() / "leaky.token";
    std::ofstream(leaky) << token_ << "\n";
    std::filesystem::permissions(
        leaky, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                   std::filesystem::perms::group_read | std::filesystem::perms::others_read);
    const std::string up = "http://127.0.0.1:" + std::to_string(upstream_->data_port());
    const std::string bad = "http://127.0.0.1:" + std::to_string(bad_port_);
    const std::string closed = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
    const std::string auth = "credentials_file = \"" + credentials.string() + "\"\n";
    const std::filesystem::path store = gateway_->dir() / "store";
    WriteVersion(store, "sim", Remote({up}, auth));
    WriteVersion(store, "failover", Remote({closed, up}, auth + "model = \"sim\"\n"));
    WriteVersion(store, "slow", Remote({up}, auth + "timeout_ms = 100\n"));
    WriteVersion(store, "patient", Remote({up}, auth + "model = \"slow\"\n"));
    WriteVersion(store, "throttled", Remote({up}, auth));
    WriteVersion(store, "failing", Remote({up}, auth));
    WriteVersion(store, "leaky", Remote({up}, "credentials_file = \"" + leaky.string() + "\"\n"));
    for (const char* model :
         {"good",        "malformed",     "wrongshape", "wrongtype", "errorinside",
          "errordenied", "errorcontrols", "reset",      "notfound",  "early",
          "extra",       "late408",       "chunkext",   "echo",      "echocut",
          "prefixecho",  "noid",          "wrongid",    "busy503",   "busy503zero"}) {
      WriteVersion(store, model, Remote({bad}, auth));
    }
    WriteVersion(store, "huge", Remote({bad}, auth + "max_response_bytes = 1048576\n"));
    WriteVersion(store, "pause", Remote({bad, up}, auth));
    WriteVersion(store, "flaky",
                 Remote({bad, up}, auth + "consecutive_failures = 2\nbase_ejection_ms = 2000\n"));
    WriteVersion(store, "drip", Remote({bad}, auth + "timeout_ms = 400\n"));
    WriteVersion(store, "holding", Remote({bad}, auth + "model = \"hold\"\n"));
    WriteVersion(store, "leaving", "fallback = [\"holding\"]\n" + Remote({closed}, auth));
    WriteVersion(store, "stalled",
                 Remote({"https://127.0.0.1:" + std::to_string(stall_port_)},
                        auth + "model = \"good\"\nconnect_timeout_ms = 8000\nca_file = \"" +
                            (bad_dir_->path() / "cert.pem").string() +
                            "\"\n[remote.health_check]\nenabled = false\n"));
    WriteVersion(store, "attempted",
                 Remote({bad}, auth + "model = \"good\"\nattempt_timeout_ms = 250\n"));
    WriteVersion(store, "tlsextra",
                 Remote({"https://127.0.0.1:" + std::to_string(tls_port_)},
                        auth + "model = \"corkextra\"\nconnections = 1\nca_file = \"" +
                            (bad_dir_->path() / "cert.pem").string() + "\"\n"));
    for (const auto& [model, port, name] :
         {std::tuple<const char*, int, const char*>{"cnonly", cn_only_port_, "cnonly"},
          std::tuple<const char*, int, const char*>{"dnsname", dns_name_port_, "dnsname"}}) {
      WriteVersion(store, model,
                   Remote({"https://localhost:" + std::to_string(port)},
                          auth + "model = \"good\"\nca_file = \"" +
                              (bad_dir_->path() / (std::string(name) + ".pem")).string() + "\"\n"));
    }
    for (const char* model : {"strayahead", "strayaheadnoid", "mixedid", "crlfafter", "idlejunk"}) {
      WriteVersion(store, model, Remote({bad}, auth + "connections = 1\n"));
    }
    for (const char* model : {"dropsecond", "closeidle", "read408"}) {
      WriteVersion(store, model, Remote({bad}, auth + "idempotent = false\nconnections = 1\n"));
    }
    // Two dead endpoints first, the pillar upstream second; ejection may take the whole group.
    const std::string dead1 = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
    const std::string dead2 = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
    WriteVersion(store, "spill",
                 Remote({}, auth +
                                "model = \"good\"\nconsecutive_failures = 1\n"
                                "max_ejection_percent = 100\nendpoints = [{ url = \"" +
                                dead1 + "\" }, { url = \"" + dead2 + "\" }, { url = \"" + up +
                                "\", priority = 2 }]\n"));
    // The pillar upstream first; the bad one (whose "good" answers well) only when it is out.
    WriteVersion(store, "prio",
                 Remote({}, auth + "model = \"good\"\nendpoints = [{ url = \"" + bad +
                                "\", priority = 2 }, { url = \"" + up +
                                "\", priority = 1, weight = 5, zone = \"a\" }]\n"));
    WriteVersion(store, "budget",
                 Remote({bad, "http://127.0.0.1:" + std::to_string(more_bad_ports_[0]),
                         "http://127.0.0.1:" + std::to_string(more_bad_ports_[1])},
                        auth + "model = \"slowdown\"\nconsecutive_failures = 1000\n"
                               "retry_backoff_base_ms = 1\nretry_backoff_max_ms = 1\n"));
    // Its own breaker trips after three failed requests.
    WriteVersion(store, "tripping",
                 Remote({bad}, auth + "model = \"broken\"\nconsecutive_failures = 1000\n"
                                      "[remote.backend_breaker]\nfailure_count = 3\n"
                                      "trip_duration_ms = 1500\n"));
    // Checked every 200 ms: the third bad port's readiness fails while unready.<port> exists.
    WriteVersion(store, "checked",
                 Remote({"http://127.0.0.1:" + std::to_string(more_bad_ports_[2]), up},
                        auth + "model = \"good\"\n[remote.health_check]\ninterval_ms = 200\n"
                               "timeout_ms = 500\n"));
    // Its only endpoint is down: the simulated "lite" on the gateway itself answers in its place.
    WriteVersion(store, "lite", Simulated("latency_ms = 0\n"));
    std::string hidden = Simulated("latency_ms = 0\n");
    hidden.replace(hidden.find("tenant = \"demo\""), 15, "tenant = \"else\"");
    WriteVersion(store, "hidden", hidden);
    WriteVersion(store, "degrading",
                 "fallback = [\"missing\", \"lite\"]\n" + Remote({closed}, auth));
    WriteVersion(store, "guarded", "fallback = [\"hidden\"]\n" + Remote({closed}, auth));
    WriteVersion(store, "picky",
                 "fallback = [\"lite\"]\n" + Remote({bad}, auth + "model = \"notfound\"\n"));
    WriteVersion(store, "open-primary",
                 "fallback = [\"lite\"]\n" +
                     Remote({bad}, auth + "model = \"broken\"\nconsecutive_failures = 1000\n"
                                          "[remote.backend_breaker]\nfailure_count = 2\n"
                                          "trip_duration_ms = 60000\n"));
    // One call at a time; two failures open its breaker for 300 ms, then one probe may pass.
    WriteVersion(store, "probing",
                 Remote({bad}, auth + "model = \"bydata\"\nconnections = 1\nmax_queue = 4\n"
                                      "idempotent = false\nconsecutive_failures = 1000\n"
                                      "[remote.health_check]\nenabled = false\n"
                                      "[remote.backend_breaker]\nfailure_count = 2\n"
                                      "trip_duration_ms = 300\n"));
    // One connection, and more event loops: a call on another loop moves to where it idles.
    WriteVersion(store, "moving",
                 Remote({bad}, auth + "model = \"bydata\"\nconnections = 1\n"
                                      "[remote.health_check]\nenabled = false\n"));
    // One call at a time to a 100 ms model, four may wait.
    WriteVersion(store, "narrow",
                 Remote({up}, auth + "model = \"slowish\"\nconnections = 1\nmax_queue = 4\n"));
    // Two replicas of one model; a second attempt after the median latency (at least 20 ms).
    WriteVersion(store, "hedged",
                 Remote({"http://127.0.0.1:" + std::to_string(more_bad_ports_[0]),
                         "http://127.0.0.1:" + std::to_string(more_bad_ports_[1])},
                        auth + "model = \"maybeslow\"\n[remote.health_check]\nenabled = false\n"
                               "[remote.hedge]\nenabled = true\nquantile = 0.5\n"
                               "min_delay_ms = 20\n"));
    // Two replicas; one may claim that every deadline is too short for it.
    WriteVersion(store, "shedding",
                 Remote({"http://127.0.0.1:" + std::to_string(more_bad_ports_[0]),
                         "http://127.0.0.1:" + std::to_string(more_bad_ports_[1])},
                        auth + "model = \"maybeshed\"\n[remote.health_check]\nenabled = false\n"));
    // Two connections at most, and more event loops than that: a call finds the endpoint's
    // connections idle on other loops.
    WriteVersion(store, "pooled", Remote({up}, auth + "model = \"good\"\nconnections = 2\n"));
    gateway_->SetStore(store);
    // A deny rule: an upstream's error that quotes a codename is withheld.
    gateway_->AddConfig(
        "[server]\nthreads = 4\n[[guard.deny]]\nname = \"codenames\"\n"
        "words = [\"project nightingale\"]\n");
    key_ = gateway_->CreateKey("client");
    low_key_ = gateway_->CreateKey("batch-jobs", {"--role", "admin", "--attr", "priority=low"});
    tenant_key_ = gateway_->CreateKey("demo-user", {"--role", "user", "--tenant", "demo"});
    ASSERT_TRUE(gateway_->Start()) << gateway_->Log();
  }

  static void TearDownTestSuite() {
    EXPECT_EQ(gateway_->Stop(), 0) << gateway_->Log();
    EXPECT_EQ(upstream_->Stop(), 0) << upstream_->Log();
    if (bad_pid_ > 0) {
      ::kill(bad_pid_, SIGKILL);
      ::waitpid(bad_pid_, nullptr, 0);
    }
    delete gateway_;
    delete upstream_;
    delete bad_dir_;
  }

  static HttpReply Infer(const std::string& model, double* seconds = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    HttpReply r = Fetch(gateway_->data_port(), "POST", "/v2/models/" + model + "/infer", kTwoRows,
                        {Bearer(key_)});
    if (seconds != nullptr) {
      *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return r;
  }

  // When bad_upstream.py answered each request for `model` (pause, flaky), in seconds.
  static std::vector<double> Hits(const std::string& model) {
    std::vector<double> hits;
    std::istringstream lines(ReadFile(bad_dir_->path() / (model + ".hits")));
    for (double t; lines >> t;) hits.push_back(t);
    return hits;
  }

  static std::string BadEndpoint() {
    return "upstream http://127.0.0.1:" + std::to_string(bad_port_);
  }

  static testing::ServerProcess* upstream_;
  static testing::ServerProcess* gateway_;
  static testing::TempDir* bad_dir_;
  static pid_t bad_pid_;
  static int bad_port_;
  static std::array<int, 3> more_bad_ports_;  // the same bad upstream, listening there too
  static int tls_port_;                       // and there over TLS (its cert.pem)
  static int cn_only_port_;   // over TLS for "localhost", named only by the subject CN
  static int dns_name_port_;  // over TLS for "localhost", named by a DNS SAN
  static int stall_port_;     // the test's own listener that never completes a TLS handshake
  static std::string token_;
  static std::string key_;
  static std::string tenant_key_;  // role user, tenant demo: sees demo's models only
  static std::string low_key_;     // its requests are low priority, whatever they ask
};

testing::ServerProcess* RemoteTest::upstream_ = nullptr;
testing::ServerProcess* RemoteTest::gateway_ = nullptr;
testing::TempDir* RemoteTest::bad_dir_ = nullptr;
pid_t RemoteTest::bad_pid_ = -1;
int RemoteTest::bad_port_ = 0;
std::array<int, 3> RemoteTest::more_bad_ports_ = {0, 0, 0};
int RemoteTest::tls_port_ = 0;
int RemoteTest::cn_only_port_ = 0;
int RemoteTest::dns_name_port_ = 0;
int RemoteTest::stall_port_ = 0;
std::string RemoteTest::token_;
std::string RemoteTest::key_;
std::string RemoteTest::tenant_key_;
std::string RemoteTest::low_key_;

// The backends' live state from the admin API, as JSON.
std::string Backends(testing::ServerProcess& server, const std::string& key) {
  HttpReply r = Fetch(server.admin_port(), "GET", "/admin/v1/backends", "", {Bearer(key)});
  EXPECT_EQ(r.status, 200) << r.body;
  return r.body;
}

// The JSON object of `model` in /admin/v1/backends' answer (crudely cut, enough for finds).
std::string BackendOf(const std::string& backends, const std::string& model) {
  const size_t at = backends.find("{\"model\":\"" + model + "\"");
  if (at == std::string::npos) return "";
  const size_t end = backends.find("{\"model\":", at + 1);
  return backends.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST_F(RemoteTest, ForwardsToThePillarUpstreamAndAnswersWithItsOutputs) {
  for (int i = 0; i < 20; ++i) {  // the same kept-alive connections, request after request
    HttpReply r = Infer("sim");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.body.find(R"("name":"y","datatype":"FP32","shape":[2,2],"data":[0,0,0,0])"),
              std::string::npos)
        << r.body;
  }
  HttpReply metadata = Fetch(gateway_->data_port(), "GET", "/v2/models/sim", "", {Bearer(key_)});
  EXPECT_NE(metadata.body.find(R"("platform":"remote")"), std::string::npos) << metadata.body;
}

TEST_F(RemoteTest, LoopsOutnumberingTheConnectionsShareThemInsteadOfOpeningNewOnes) {
  auto accepted = [&] {
    const std::string metrics =
        Fetch(upstream_->admin_port(), "GET", "/metrics", "", {Bearer(token_)}).body;
    const std::string name = "pillar_http_connections_total{listener=\"data\"} ";
    const size_t at = metrics.find(name);
    return at == std::string::npos ? -1 : std::stoll(metrics.substr(at + name.size()));
  };
  ASSERT_EQ(Infer("pooled").status, 200);
  const int64_t before = accepted();
  ASSERT_GE(before, 0);
  // Each request on a connection of its own: the gateway's loops take them in turn.
  for (int i = 0; i < 100; ++i) ASSERT_EQ(Infer("pooled").status, 200);
  // A connection per request or so before (75 of 100 were closed and opened again); now the
  // two are shared, a few more at most (the other models' active checks share the upstream).
  EXPECT_LE(accepted() - before, 10);
}

TEST_F(RemoteTest, AnEndpointThatIsDownIsPassedOverForTheNext) {
  for (int i = 0; i < 10; ++i) {
    HttpReply r = Infer("failover");
    EXPECT_EQ(r.status, 200) << r.body;
  }
}

TEST_F(RemoteTest, TheTimeoutAnswers504AndCutsTheUpstreamOff) {
  double seconds = 0;
  HttpReply r = Infer("slow", &seconds);
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_NE(r.body.find("no answer from the upstream within 100 ms"), std::string::npos) << r.body;
  EXPECT_GE(seconds, 0.09);
  EXPECT_LT(seconds, 0.6);  // well before the upstream's 1000 ms, with room for a loaded machine
}

TEST_F(RemoteTest, TheClientsOwnDeadlineIsKeptAndPassedOn) {
  const auto start = std::chrono::steady_clock::now();
  HttpReply r = Fetch(gateway_->data_port(), "POST", "/v2/models/patient/infer", kTwoRows,
                      {Bearer(key_), "X-Pillar-Timeout-Ms: 150"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, 504) << r.body;  // timeout_ms is 30 s; the client said 150 ms
  EXPECT_GE(seconds, 0.14);
  EXPECT_LT(seconds, 0.6);
  // What the upstream is told is what is left of the client's 150 ms.
  ASSERT_EQ(Fetch(gateway_->data_port(), "POST", "/v2/models/good/infer", kTwoRows,
                  {Bearer(key_), "X-Pillar-Timeout-Ms: 5000"})
                .status,
            200);
  std::istringstream told(ReadFile(bad_dir_->path() / "timeout.log"));
  std::string last;
  for (std::string line; std::getline(told, line);) last = line;
  ASSERT_NE(last, "-");
  EXPECT_GT(std::stoll(last), 4000);
  EXPECT_LE(std::stoll(last), 5000);
}

TEST_F(RemoteTest, AThrottledUpstreamGives503WithItsRetryAfter) {
  HttpReply r = Infer("throttled");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.Header("retry-after"), "2");
}

TEST_F(RemoteTest, AFailingUpstreamGives502NamingTheEndpoint) {
  HttpReply r = Infer("failing");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_NE(r.body.find("upstream http://127.0.0.1:" + std::to_string(upstream_->data_port()) +
                        ": answered 500"),
            std::string::npos)
      << r.body;
}

TEST_F(RemoteTest, EveryBadReplyIsAClear502) {
  EXPECT_EQ(Infer("good").status, 200);
  EXPECT_EQ(Infer("noid").status, 200);  // echoing the id is optional in the protocol
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"malformed", "a reply pillar cannot use: malformed JSON"},
      {"wrongshape",
       "a reply pillar cannot use: output 'y' has a shape the model does not declare"},
      {"wrongtype", "a reply pillar cannot use: output 'y' is INT64, not FP32"},
      {"errorinside", "a reply pillar cannot use: the reply carries an error: CUDA error"},
      {"huge", "the reply is over max_response_bytes"},
      {"reset", "partial message"},
      {"notfound", "answered 404"},
      {"wrongid", "the reply's id 'another-request' is not the request's"},
  };
  for (const auto& [model, why] : cases) {
    HttpReply r = Infer(model);
    EXPECT_EQ(r.status, 502) << model << ": " << r.body;
    EXPECT_NE(r.body.find(BadEndpoint()), std::string::npos) << model << ": " << r.body;
    EXPECT_NE(r.body.find(why), std::string::npos) << model << ": " << r.body;
  }
  // Found by a review (helper-39): an upstream's error is held to the deny rules too (its
  // personal data was tagged already); a block withholds the message, the status kept.
  HttpReply r = Infer("errordenied");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.body.find("nightingale"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("the model's error was withheld by the content guard: deny rule "
                        "'codenames'"),
            std::string::npos)
      << r.body;
  // A client prints an error's message: it goes without its display controls.
  r = Infer("errorcontrols");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.body.find("\\u001b"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("the reply carries an error: bad thing"), std::string::npos) << r.body;
}

// Found by review helper-126: a 503 without Retry-After was taken for a throttle, and the client
// got 503 "every upstream is busy" where docs/resilience.md's table says a failure, 502.
TEST_F(RemoteTest, A503WithoutRetryAfterIsAFailureNotAThrottle) {
  for (const char* model : {"busy503", "busy503zero"}) {  // none, or 0 (review helper-127)
    HttpReply r = Infer(model);
    EXPECT_EQ(r.status, 502) << model << ": " << r.body;
    EXPECT_NE(r.body.find("answered 503"), std::string::npos) << r.body;
    EXPECT_EQ(r.Header("retry-after"), "") << r.body;
  }
}

TEST_F(RemoteTest, AnUpstreamsRetryAfterKeepsRequestsAwayUntilThen) {
  const auto start = std::chrono::steady_clock::now();
  int served = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500)) {
    ASSERT_EQ(Infer("pause").status, 200);  // the other endpoint answers
    ++served;
  }
  EXPECT_GT(served, 10);
  std::vector<double> hits = Hits("pause");
  ASSERT_EQ(hits.size(), 1u) << "the throttled endpoint was asked again within its Retry-After";
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // past the 2 s it asked for
  // The picker sends a request to it at least a quarter of the time (the less loaded of two
  // drawn): 40 requests miss it with a chance of 1e-5.
  for (int i = 0; i < 40; ++i) EXPECT_EQ(Infer("pause").status, 200);
  hits = Hits("pause");
  ASSERT_GE(hits.size(), 2u) << "the endpoint was never asked again after its Retry-After";
  EXPECT_GE(hits[1] - hits[0], 1.95);
}

TEST_F(RemoteTest, AFailingEndpointIsEjectedThenProbed) {
  // The other one answers. 60 requests: the picker chooses the failing one first at least twice
  // (it does so a quarter of the time or more).
  for (int i = 0; i < 60; ++i) EXPECT_EQ(Infer("flaky").status, 200);
  EXPECT_EQ(Hits("flaky").size(), 2u) << "consecutive_failures = 2, then ejected for 2 s";
  EXPECT_NE(gateway_->Log().find(BadEndpoint() + " ejected for 2000 ms"), std::string::npos)
      << gateway_->Log();
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  for (int i = 0; i < 40; ++i) EXPECT_EQ(Infer("flaky").status, 200);
  // One half-open probe, which failed: out again, for 4 s.
  EXPECT_EQ(Hits("flaky").size(), 3u);
  EXPECT_NE(gateway_->Log().find(BadEndpoint() + " ejected for 4000 ms"), std::string::npos)
      << gateway_->Log();
  // And as metrics, per endpoint.
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  const std::string bad =
      "model=\"flaky\",version=\"1\",endpoint=\"http://127.0.0.1:" + std::to_string(bad_port_) +
      "\"";
  EXPECT_NE(metrics.find("pillar_upstream_ejections_total{" + bad + "} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("pillar_upstream_attempts_total{" + bad + ",outcome=\"failed\"} 3"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("pillar_upstream_state{" + bad + "} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("pillar_upstream_outstanding{" + bad + "} 0"), std::string::npos)
      << metrics;
}

// A reply is read only for the request it answers: an interim 1xx is skipped, bytes nobody asked
// for close the connection, and an idle connection the upstream wrote to is not reused.
TEST_F(RemoteTest, RepliesNeverCrossFromOneRequestToAnother) {
  for (int i = 0; i < 3; ++i) {
    HttpReply r = Infer("early");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.body.find("[0.5,0.5,0.5,0.5]"), std::string::npos) << r.body;
  }
  for (int i = 0; i < 5; ++i) {
    HttpReply r = Infer("extra");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body.find("999"), std::string::npos) << "an unasked-for reply answered: " << r.body;
  }
  EXPECT_EQ(Infer("late408").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the 408 reaches the idle one
  HttpReply r = Infer("late408");
  EXPECT_EQ(r.status, 200) << r.body;
}

// Review helper-57: an upstream out of step sends an unasked reply that arrives after the next
// request went out, where no idle check can see it; it was taken as that request's answer
// (another client's, when the upstream mixes them up). From a server that echoes ids, a reply
// without one on a reused connection is not taken: the request goes again on a new connection.
// From one that echoes none, the answer that follows the stray is seen as unasked, and the
// endpoint's connections then carry one request each: past the strays already on their way
// (one here, with a single connection), none crosses.
TEST_F(RemoteTest, AnUnaskedReplyAheadOfTheAnswerNeverAnswersAnotherRequest) {
  for (int i = 0; i < 6; ++i) {
    HttpReply r = Infer("strayahead");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body.find("999"), std::string::npos) << "request " << i << ": " << r.body;
  }
  int crossed = 0;
  for (int i = 0; i < 6; ++i) {
    HttpReply r = Infer("strayaheadnoid");
    EXPECT_EQ(r.status, 200) << r.body;
    crossed += r.body.find("999") != std::string::npos;
  }
  EXPECT_LE(crossed, 1);
}

// Review helper-58: a server that omits the id now and then, having echoed it before, had those
// replies refused (502). A reply without an id on a new connection cannot be a stray: taken.
TEST_F(RemoteTest, AServerThatOmitsTheIdNowAndThenIsStillAnswered) {
  for (int i = 0; i < 9; ++i) {
    HttpReply r = Infer("mixedid");
    EXPECT_EQ(r.status, 200) << "request " << i << ": " << r.body;
  }
}

// Review helper-58: bytes to an idle connection were news to the pool only when it next took
// that connection, so the endpoint went on being trusted meanwhile. Now they call the endpoint
// out of step as they come.
TEST_F(RemoteTest, BytesToAnIdleConnectionCallTheEndpointOutOfStepAtOnce) {
  const auto episodes = [] {
    const std::string log = gateway_->Log();
    size_t n = 0;
    for (size_t at = log.find("nobody asked for"); at != std::string::npos;
         at = log.find("nobody asked for", at + 1)) {
      ++n;
    }
    return n;
  };
  const size_t before = episodes();
  EXPECT_EQ(Infer("idlejunk").status, 200);
  for (int i = 0; i < 100 && episodes() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(episodes(), before + 1) << gateway_->Log();
}

// A line end too many after a reply is no reply: the connection is kept, not closed as out of
// step (which would cost a connection per request for a minute).
TEST_F(RemoteTest, ALineEndAfterAReplyKeepsTheConnection) {
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Infer("crlfafter").status, 200);
  std::ifstream in(bad_dir_->path() / "crlfafter.ports");
  std::set<std::string> ports;
  for (std::string port; std::getline(in, port);) ports.insert(port);
  EXPECT_EQ(ports.size(), 1u);
}

TEST_F(RemoteTest, AnEndlessChunkHeaderEndsAtItsBound) {
  HttpReply r = Infer("chunkext");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_NE(r.body.find("a chunk header or trailer is over 64 KiB"), std::string::npos) << r.body;
}

TEST_F(RemoteTest, ATokenAnUpstreamEchoesIsRedacted) {
  HttpReply r = Infer("echo");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.body.find(token_), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("bad token Bearer [redacted]"), std::string::npos) << r.body;
  // Padded so that a cut at 256 bytes would fall inside the token: quoted whole, redacted.
  r = Infer("echocut");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.body.find(token_.substr(0, 8)), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("bad token Bearer [redacted]"), std::string::npos) << r.body;
  // Found by review helper-93: half of the token, quoted as OpenAI-style servers quote a key.
  r = Infer("prefixecho");
  EXPECT_EQ(r.status, 502) << r.body;
  for (size_t at = 0; at + 8 <= token_.size(); ++at) {
    ASSERT_EQ(r.body.find(token_.substr(at, 8)), std::string::npos) << r.body;
  }
  EXPECT_NE(r.body.find("Incorrect API key provided: [redacted]*****"), std::string::npos)
      << r.body;
}

// Found by review helper-93: a client that hung up after 0.3 s kept its upstream call (and its
// key's place among the requests in flight) until the upstream answered or the timeout passed.
TEST_F(RemoteTest, AClientThatGoesAwayEndsItsUpstreamCall) {
  // Posts to `model` and hangs up after 300 ms; returns what the access log says of it.
  auto leave = [](const std::string& model, const std::string& after = "") {
    const std::string path = "\"path\":\"/v2/models/" + model + "/infer\"";
    auto lines = [&path] {
      std::vector<std::string> found;
      std::istringstream log(ReadFile(gateway_->dir() / "access.log"));
      for (std::string line; std::getline(log, line);) {
        if (line.find(path) != std::string::npos) found.push_back(line);
      }
      return found;
    };
    const size_t before = lines().size();
    const std::string body = kTwoRows;
    {
      testing::HttpConnection client(gateway_->data_port());
      EXPECT_TRUE(client.connected());
      EXPECT_TRUE(client.SendRaw(
          "POST /v2/models/" + model + "/infer HTTP/1.1\r\nHost: pillar\r\n" + Bearer(key_) +
          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\n\r\n" + body + after));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }  // hung up
    for (int i = 0; i < 200; ++i) {
      const std::vector<std::string> now = lines();
      if (now.size() > before) return now.back();
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return std::string();
  };
  const std::string logged = leave("holding");
  EXPECT_NE(logged.find("\"status\":499"), std::string::npos) << logged;
  std::string hits;
  for (int i = 0; i < 200 && hits.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    hits = ReadFile(bad_dir_->path() / "hold.hits");
  }
  ASSERT_EQ(hits.rfind("closed ", 0), 0u) << hits;  // not "answered" after 3 s
  EXPECT_LT(std::atof(hits.c_str() + 7), 1.5) << hits;
  // Found by review helper-94: a client that left while its primary's fallback ran was logged
  // with the primary's 502 (and counted as an error).
  const std::string fallen = leave("leaving");
  EXPECT_NE(fallen.find("\"status\":499"), std::string::npos) << fallen;
  // Found by review helper-94: a line end after the request (which RFC 9112 lets a client send)
  // read as a pipelined request, so that the client's close was never noticed.
  const std::string trailing = leave("leaving", "\r\n");
  EXPECT_NE(trailing.find("\"status\":499"), std::string::npos) << trailing;
  // Found by review helper-96: a client that half-closed, took the interim 100 and then closed
  // sent nothing more, and was served to the end.
  {
    const std::string path = "\"path\":\"/v2/models/holding/infer\"";
    auto count = [&path] {
      std::istringstream log(ReadFile(gateway_->dir() / "access.log"));
      size_t n = 0;
      for (std::string line; std::getline(log, line);) n += line.find(path) != std::string::npos;
      return n;
    };
    const size_t before = count();
    const std::string body = kTwoRows;
    testing::HttpConnection client(gateway_->data_port());
    ASSERT_TRUE(client.connected());
    const int fd = client.fd();
    const std::string request =
        "POST /v2/models/holding/infer HTTP/1.1\r\nHost: pillar\r\n" + Bearer(key_) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, request.data(), request.size(), 0), ssize_t(request.size()));
    ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    std::string interim;
    char bytes[256];
    while (interim.find("\r\n\r\n") == std::string::npos) {
      pollfd readable{fd, POLLIN, 0};
      ASSERT_EQ(::poll(&readable, 1, 2000), 1) << interim;
      const ssize_t n = ::recv(fd, bytes, sizeof bytes, 0);
      ASSERT_GT(n, 0);
      interim.append(bytes, size_t(n));
    }
    EXPECT_EQ(interim.rfind("HTTP/1.1 100", 0), 0u) << interim;
    client.Close();  // nothing unread: no reset of its own
    std::string line;
    for (int i = 0; i < 200 && count() == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::istringstream log(ReadFile(gateway_->dir() / "access.log"));
    for (std::string l; std::getline(log, l);) {
      if (l.find(path) != std::string::npos) line = l;
    }
    EXPECT_NE(line.find("\"status\":499"), std::string::npos) << line;
  }
  // A client that stays gets its answer.
  HttpReply r = Infer("holding");
  EXPECT_EQ(r.status, 200) << r.body;
}

// Found by review helper-97: a call that had moved to another loop's connection was abandoned on
// its client's loop, which closed the connection while the other loop read from it, and ended
// the call while a stream's first event was on its way to the exchange it destroyed (the gateway
// aborted, under a debugger that held that loop for the race). Now the call is ended on the loop
// its connection is on. This test takes the path (the race itself needs the debugger's pause).
TEST_F(RemoteTest, AClientThatLeavesACallMovedToAnotherLoopIsLetGo) {
  auto request = [](int first) {
    std::string body = kTwoRows;
    body.replace(body.find("[1,"), 3, "[" + std::to_string(first) + ",");
    return "POST /v2/models/moving/infer HTTP/1.1\r\nHost: pillar\r\n" + Bearer(key_) +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  };
  const std::string path = "\"path\":\"/v2/models/moving/infer\"";
  auto logged = [&path] {
    std::vector<std::string> found;
    std::istringstream log(ReadFile(gateway_->dir() / "access.log"));
    for (std::string line; std::getline(log, line);) {
      if (line.find(path) != std::string::npos) found.push_back(line);
    }
    return found;
  };
  const size_t before = logged().size();
  // The one connection to the upstream idles on this client's loop after its answer.
  testing::HttpConnection staying(gateway_->data_port());
  ASSERT_TRUE(staying.SendRaw(request(9)));
  ASSERT_EQ(staying.ReadReply().status, 200);
  {
    // Accepted next, so on the next loop: its call (held 4 s upstream) moves to that connection.
    testing::HttpConnection leaving(gateway_->data_port());
    ASSERT_TRUE(leaving.SendRaw(request(8)));
    std::string state;
    for (int i = 0; i < 200 && state.find("\"in_flight\":1,") == std::string::npos; ++i) {
      state = BackendOf(Backends(*gateway_, key_), "moving");
    }
    ASSERT_NE(state.find("\"in_flight\":1,"), std::string::npos) << state;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }  // hangs up
  // Both calls logged (the access log is written a moment later): the first's 200, then 499.
  std::vector<std::string> lines;
  for (int i = 0; i < 200 && lines.size() < before + 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    lines = logged();
  }
  ASSERT_EQ(lines.size(), before + 2);
  EXPECT_NE(lines.back().find("\"status\":499"), std::string::npos) << lines.back();
  // Well before the upstream's 4 s: the call's place was given back, and the gateway serves on.
  ASSERT_TRUE(staying.SendRaw(request(9)));
  EXPECT_EQ(staying.ReadReply().status, 200);
  EXPECT_EQ(BackendOf(Backends(*gateway_, key_), "moving").find("\"in_flight\":1,"),
            std::string::npos);
}

// Found by review helper-94: a call abandoned while its TLS handshake hung kept the connection
// until connect_timeout_ms, so that clients who left held connections past the endpoint's cap.
TEST_F(RemoteTest, AClientThatGoesAwayWhileItsUpstreamConnectsEndsTheConnect) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  const int yes = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(stall_port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  std::thread client([] {
    const std::string body = kTwoRows;
    testing::HttpConnection connection(gateway_->data_port());
    connection.SendRaw("POST /v2/models/stalled/infer HTTP/1.1\r\nHost: pillar\r\n" + Bearer(key_) +
                       "\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });  // hangs up
  pollfd waiting{listener, POLLIN, 0};
  ASSERT_EQ(::poll(&waiting, 1, 5000), 1);
  const int upstream = ::accept(listener, nullptr, nullptr);  // and never answers its hello
  ASSERT_GE(upstream, 0);
  const auto accepted = std::chrono::steady_clock::now();
  char bytes[4096];
  for (;;) {  // the client hello, then the end
    pollfd readable{upstream, POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 10000), 1);
    if (::recv(upstream, bytes, sizeof bytes, 0) <= 0) break;
  }
  const double open_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - accepted).count();
  client.join();
  ::close(upstream);
  ::close(listener);
  EXPECT_LT(open_s, 2.0);  // not connect_timeout_ms's 8 s
}

// A plaintext client that pipelines a second request and then half-closes its side still waits
// for both answers: it is not taken as gone.
TEST_F(RemoteTest, AClientThatHalfClosesAndWaitsGetsItsAnswers) {
  const std::string body = kTwoRows;
  auto request = [&](const std::string& model) {
    return "POST /v2/models/" + model + "/infer HTTP/1.1\r\nHost: pillar\r\n" + Bearer(key_) +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  };
  // What the client writes, in writes apart (each after a pause of 400 ms), before it shuts its
  // side: the slow one first and last (review helper-94: the last of a batch got 499 once its
  // bytes were read), the second written while the first waits (helper-95), and a lone request.
  const std::vector<std::vector<std::string>> cases = {{request("holding") + request("good")},
                                                       {request("good") + request("holding")},
                                                       {request("holding"), request("holding")},
                                                       {request("holding")}};
  for (const std::vector<std::string>& writes : cases) {
    testing::HttpConnection client(gateway_->data_port());
    ASSERT_TRUE(client.connected());
    const int fd = client.fd();
    size_t requests = 0;
    for (size_t w = 0; w < writes.size(); ++w) {
      if (w > 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
      ASSERT_EQ(::send(fd, writes[w].data(), writes[w].size(), 0), ssize_t(writes[w].size()));
      for (size_t at = writes[w].find("POST "); at != std::string::npos;
           at = writes[w].find("POST ", at + 1)) {
        ++requests;
      }
    }
    ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    timeval wait{15, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    std::string replies;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) {
      replies.append(buffer, size_t(n));
    }
    client.Close();
    size_t answered = 0;
    for (size_t at = replies.find("HTTP/1.1 200"); at != std::string::npos;
         at = replies.find("HTTP/1.1 200", at + 1)) {
      ++answered;
    }
    EXPECT_EQ(answered, requests) << writes.size() << " writes: " << replies;
  }
}

// Found by review helper-93: an attempt cut off by attempt_timeout_ms told the upstream it had
// what was left of the whole deadline (30 s), so that a pillar upstream worked on for nobody.
TEST_F(RemoteTest, TheUpstreamIsToldTheAttemptsOwnTime) {
  HttpReply r = Infer("attempted");
  ASSERT_EQ(r.status, 200) << r.body;
  std::istringstream lines(ReadFile(bad_dir_->path() / "timeout.log"));
  std::string line, last;
  while (std::getline(lines, line)) last = line;
  const int told = std::atoi(last.c_str());
  EXPECT_GT(told, 0) << last;
  EXPECT_LE(told, 250) << last;
}

// A caller that gives up early says nothing of the upstream: its cut-off attempts do not count
// against the endpoint, or one client could take a healthy replica out for everyone.
TEST_F(RemoteTest, ACallersShortDeadlineDoesNotCountAgainstTheEndpoint) {
  int shed = 0;
  for (int i = 0; i < 8; ++i) {
    HttpReply r = Fetch(gateway_->data_port(), "POST", "/v2/models/patient/infer", kTwoRows,
                        {Bearer(key_), "X-Pillar-Timeout-Ms: 20"});
    if (r.status == 503) {
      // Once the upstream's queue holds the earlier ones (its model takes a second), it refuses
      // at once what cannot start within 20 ms, and says why: passed on as it came.
      ++shed;
      EXPECT_EQ(r.headers["x-pillar-shed"], "deadline");
      EXPECT_NE(r.body.find("longer than the deadline"), std::string::npos) << r.body;
      continue;
    }
    EXPECT_EQ(r.status, 504) << r.body;
    EXPECT_NE(r.body.find("within the caller's deadline"), std::string::npos) << r.body;
  }
  EXPECT_GT(shed, 0);
  // Neither the cut-off attempts nor the sheds paused or ejected the endpoint for others.
  EXPECT_EQ(Infer("sim").status, 200);
  HttpReply patient = Infer("patient");
  EXPECT_EQ(patient.status, 200) << patient.body;
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  const std::string up = "model=\"patient\",version=\"1\",endpoint=\"http://127.0.0.1:" +
                         std::to_string(upstream_->data_port()) + "\"";
  EXPECT_NE(metrics.find("pillar_upstream_ejections_total{" + up + "} 0"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("pillar_upstream_attempts_total{" + up + ",outcome=\"failed\"} 0"),
            std::string::npos)
      << metrics;
}

// Every endpoint failing: each request would try all three. The retry budget (20 % of the
// requests in flight, at least 3, retrying at once) keeps the attempts near the requests'
// number instead of three times it.
TEST_F(RemoteTest, RetriesStayWithinTheBudgetWhenEveryEndpointFails) {
  constexpr int kRequests = 40;
  std::vector<std::thread> clients;
  std::atomic<int> bad_gateway{0};
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&] { bad_gateway += Infer("budget").status == 502; });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(bad_gateway.load(), kRequests);
  const size_t attempts = Hits("slowdown").size();
  EXPECT_GE(attempts, size_t(kRequests));
  // 40 first attempts, then retries by at most max(3, 20 % of the requests in flight) requests
  // at once. The budget bounds retries in flight, not in total (as Envoy's does), so how many
  // happen depends on how the failures spread in time: 56 attempts were measured here (8 requests
  // retrying twice). Without a budget every request would try all three endpoints: 120.
  EXPECT_LE(attempts, size_t(2 * kRequests)) << attempts;
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  const std::string sample =
      "pillar_upstream_retry_budget_exhausted_total{model=\"budget\",version=\"1\"} ";
  const size_t at = metrics.find(sample);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GE(std::stoi(metrics.substr(at + sample.size())), 20) << metrics.substr(at, 80);
}

TEST_F(RemoteTest, ALowerPriorityGroupServesOnlyWhenTheOneAboveIsOut) {
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Infer("prio").status, 200);
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  auto ok = [&](const std::string& url) {
    return "pillar_upstream_attempts_total{model=\"prio\",version=\"1\",endpoint=\"" + url +
           "\",outcome=\"ok\"} ";
  };
  const std::string up = "http://127.0.0.1:" + std::to_string(upstream_->data_port());
  EXPECT_NE(metrics.find(ok(up) + "20"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(ok("http://127.0.0.1:" + std::to_string(bad_port_)) + "0"),
            std::string::npos)
      << metrics;
}

// A model that is not idempotent is never sent twice: a request the upstream read and then closed
// the connection on is answered 502, not resent. (One connection: the second request reuses it,
// from whichever of the gateway's loops takes it.)
TEST_F(RemoteTest, ANonIdempotentRequestIsNeverSentTwice) {
  EXPECT_EQ(Infer("dropsecond").status, 200);
  EXPECT_EQ(Infer("dropsecond").status, 502);  // read by the upstream, then the connection closed
  EXPECT_EQ(Hits("dropsecond").size(), 2u);
}

// Found by review helper-103: a 408 on a reused connection had the request sent again on a new
// one whatever the model; an upstream that read the request before answering 408 got a model
// that is not idempotent twice.
TEST_F(RemoteTest, A408DoesNotSendANonIdempotentRequestAgain) {
  EXPECT_EQ(Infer("read408").status, 200);
  EXPECT_EQ(Infer("read408").status, 502);
  EXPECT_EQ(Hits("read408").size(), 2u);
}

// Bytes an upstream sent after its reply are never read as the next request's reply, even when
// they came in with the reply and TLS took them off the socket: the connection is not reused.
// (No id in these replies: the check of the id would otherwise catch it.)
TEST_F(RemoteTest, BytesAfterATlsReplyAreNeverTheNextReply) {
  for (int i = 0; i < 6; ++i) {
    HttpReply r = Infer("tlsextra");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body.find("999"), std::string::npos) << "an unasked-for reply answered: " << r.body;
  }
}

// Found by review helper-59: an upstream's certificate that names the host only in its subject
// CN was taken for it (OpenSSL's host check falls back to the CN without a DNS SAN); any other
// certificate of the same CA without SANs (a client's, a machine's) could stand in for it.
TEST_F(RemoteTest, AnUpstreamIsNamedByItsCertificatesSubjectAltNamesOnly) {
  HttpReply r = Infer("cnonly");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_NE(r.body.find("certificate verify failed"), std::string::npos) << r.body;
  r = Infer("dnsname");
  EXPECT_EQ(r.status, 200) << r.body;
}

// A kept-alive connection the upstream closed while it idled is found closed before anything is
// written on it: even a request that may not be sent twice goes out once, on a new connection.
TEST_F(RemoteTest, AConnectionClosedWhileIdleIsReplacedBeforeTheRequestGoesOut) {
  EXPECT_EQ(Infer("closeidle").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the close reaches the idle one
  HttpReply r = Infer("closeidle");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Hits("closeidle").size(), 2u);
}

// A priority group mostly out passes its traffic to the next group before anything panics.
TEST_F(RemoteTest, AGroupMostlyOutPassesItsTrafficOn) {
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Infer("spill").status, 200);
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  size_t failed = 0;
  for (size_t at = 0; (at = metrics.find("pillar_upstream_attempts_total{model=\"spill\"", at)) !=
                      std::string::npos;
       ++at) {
    const size_t end = metrics.find('\n', at);
    const std::string line = metrics.substr(at, end - at);
    if (line.find("outcome=\"failed\"") != std::string::npos) {
      failed += std::stoul(line.substr(line.rfind(' ') + 1));
    }
  }
  EXPECT_LE(failed, 2u) << metrics;  // each dead endpoint once, then ejected with its group
}

TEST_F(RemoteTest, ASlowDripEndsAtTheDeadline) {
  double seconds = 0;
  HttpReply r = Infer("drip", &seconds);
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_LT(seconds, 1.5);
}

TEST_F(RemoteTest, CredentialsOthersCanReadAreRefusedAndNeverLogged) {
  EXPECT_NE(Infer("leaky").status, 200);
  EXPECT_NE(gateway_->Log().find("is readable by group or others; chmod 600 it"), std::string::npos)
      << gateway_->Log();
  // What pillar sent upstream: the token, as a bearer credential.
  EXPECT_NE(ReadFile(bad_dir_->path() / "auth.log").find("Bearer " + token_), std::string::npos);
  // And nowhere in what the gateway writes.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(gateway_->dir())) {
    if (!entry.is_regular_file() || entry.path().filename() == "upstream.token" ||
        entry.path().filename() == "leaky.token") {
      continue;
    }
    EXPECT_EQ(ReadFile(entry.path()).find(token_), std::string::npos) << entry.path();
  }
}

TEST_F(RemoteTest, ABackendBreakerOpensAnswersAtOnceAndProbesAfterItsTrip) {
  for (int i = 0; i < 3; ++i) {
    HttpReply r = Infer("tripping");
    EXPECT_EQ(r.status, 502) << r.body;
  }
  const size_t hits = Hits("broken").size();
  double seconds = 0;
  HttpReply refused = Infer("tripping", &seconds);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("circuit breaker of model 'tripping' version 1 is open"),
            std::string::npos)
      << refused.body;
  EXPECT_EQ(refused.headers["retry-after"], "2");  // 1.5 s left, rounded up
  EXPECT_LT(seconds, 0.1);
  EXPECT_EQ(Hits("broken").size(), hits);  // the upstream never saw it

  const std::string state = BackendOf(Backends(*gateway_, key_), "tripping");
  EXPECT_NE(state.find("\"breaker\":\"open\""), std::string::npos) << state;
  EXPECT_NE(state.find("\"trips\":1"), std::string::npos) << state;
  // The audit log's writer gathers records for batch_delay_ms and writes them a moment later:
  // read until it has (run alone, this test read the file before the write).
  std::string audit = ReadFile(gateway_->audit_log());
  for (int i = 0; i < 300 && audit.find("breaker_open") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    audit = ReadFile(gateway_->audit_log());
  }
  EXPECT_NE(audit.find("breaker_open"), std::string::npos) << gateway_->Log();
  EXPECT_NE(audit.find("model:tripping/1"), std::string::npos);
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  EXPECT_NE(metrics.find("pillar_backend_breaker_state{model=\"tripping\",version=\"1\"} 1"),
            std::string::npos);

  // After the trip: one probe reaches the upstream, fails, and opens the breaker again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  EXPECT_EQ(Infer("tripping").status, 502);
  EXPECT_EQ(Hits("broken").size(), hits + 1);
  EXPECT_EQ(Infer("tripping").status, 503);
  EXPECT_EQ(Hits("broken").size(), hits + 1);
}

// Found by review (74c1ff2): a call that took the half-open breaker's one probe place and left
// while it waited behind a call admitted before the trip kept the place, and every request after
// it was refused as if the probe were still out.
TEST_F(RemoteTest, AProbeWhoseClientLeavesTheQueueGivesItsPlaceBack) {
  auto post = [](int first) {
    std::string body = kTwoRows;
    body.replace(body.find("[1,"), 3, "[" + std::to_string(first) + ",");
    return Fetch(gateway_->data_port(), "POST", "/v2/models/probing/infer", body, {Bearer(key_)});
  };
  auto state = [] { return BackendOf(Backends(*gateway_, key_), "probing"); };
  auto wait_for = [&state](const std::vector<std::string>& parts) {
    std::string now;
    for (int i = 0; i < 400; ++i) {
      now = state();
      bool all = true;
      for (const std::string& part : parts) all = all && now.find(part) != std::string::npos;
      if (all) return now;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "never " << ::testing::PrintToString(parts) << " in " << now;
    return now;
  };
  // Two calls that fail in turn open the breaker; a call queued behind them, admitted before
  // the trip, holds the one connection for 4 s.
  std::vector<std::thread> calls;
  std::array<int, 3> statuses{};
  for (int i = 0; i < 3; ++i) {
    calls.emplace_back([&, i] { statuses[size_t(i)] = post(i < 2 ? 7 : 8).status; });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  wait_for({"\"breaker\":\"open\"", "\"in_flight\":1,", "\"queued\":0,"});
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past the 300 ms trip
  {
    // Takes the probe place, waits behind the holding call, and leaves.
    const std::string body = kTwoRows;
    testing::HttpConnection leaving(gateway_->data_port());
    ASSERT_TRUE(leaving.connected());
    ASSERT_TRUE(leaving.SendRaw(
        "POST /v2/models/probing/infer HTTP/1.1\r\nHost: pillar\r\n" + Bearer(key_) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body));
    wait_for({"\"queued\":1,"});
  }
  wait_for({"\"queued\":0,"});
  // The place is free again: this request is the probe, served after the holding call, and
  // its success closes the breaker.
  HttpReply probe = post(1);
  EXPECT_EQ(probe.status, 200) << probe.body;
  for (std::thread& call : calls) call.join();
  EXPECT_EQ(statuses, (std::array<int, 3>{502, 502, 200}));
  EXPECT_NE(state().find("\"breaker\":\"closed\""), std::string::npos) << state();
}

TEST_F(RemoteTest, FailingActiveChecksTakeAnEndpointOutBeforeAnyRequestFails) {
  const std::string checked = "http://127.0.0.1:" + std::to_string(more_bad_ports_[2]);
  const std::filesystem::path unready =
      bad_dir_->path() / ("unready." + std::to_string(more_bad_ports_[2]));
  std::ofstream(unready).close();
  std::string state;
  for (int i = 0; i < 50; ++i) {  // two failed checks, 200 ms apart
    state = BackendOf(Backends(*gateway_, key_), "checked");
    if (state.find("\"health\":\"unhealthy\"") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(state.find("{\"url\":\"" + checked +
                       "\",\"zone\":\"\",\"priority\":1,\"weight\":1,"
                       "\"health\":\"unhealthy\""),
            std::string::npos)
      << state;
  // Out of service: every request goes to the other endpoint.
  const size_t before = ReadFile(bad_dir_->path() / "auth.log").size();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Infer("checked").status, 200);
  EXPECT_EQ(ReadFile(bad_dir_->path() / "auth.log").size(), before);
  std::filesystem::remove(unready);
  for (int i = 0; i < 50; ++i) {
    state = BackendOf(Backends(*gateway_, key_), "checked");
    if (state.find("\"health\":\"unhealthy\"") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(state.find("\"health\":\"unhealthy\""), std::string::npos) << state;
}

TEST_F(RemoteTest, TheBackendsCommandShowsTheLiveState) {
  for (int i = 0; i < 4; ++i) Infer("tripping");  // open, or opened again
  const std::string command =
      "PILLAR_API_KEY=" + key_ + " " + testing::PillarBinary() +
      " backends --admin http://127.0.0.1:" + std::to_string(gateway_->admin_port()) + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << out;
  EXPECT_NE(out.find("tripping/1  breaker open"), std::string::npos) << out;
  EXPECT_NE(out.find("http://127.0.0.1:" + std::to_string(bad_port_)), std::string::npos) << out;
  EXPECT_NE(out.find("sim/1  breaker closed"), std::string::npos) << out;
  // Without a key: refused, with the reason.
  FILE* anonymous = ::popen((testing::PillarBinary() + " backends --admin http://127.0.0.1:" +
                             std::to_string(gateway_->admin_port()) + " 2>&1")
                                .c_str(),
                            "r");
  ASSERT_NE(anonymous, nullptr);
  out.clear();
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, anonymous)) > 0;) out.append(buffer, n);
  EXPECT_NE(::pclose(anonymous), 0);
  EXPECT_NE(out.find("no key"), std::string::npos) << out;
}

TEST_F(RemoteTest, AModelThatCannotAnswerIsServedByItsFallback) {
  HttpReply r = Infer("degrading");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-pillar-fallback"], "lite/1");
  EXPECT_NE(r.body.find("\"model_name\":\"lite\""), std::string::npos) << r.body;
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  EXPECT_NE(metrics.find("pillar_fallbacks_total{model=\"degrading\",fallback=\"lite\"} 1"),
            std::string::npos);
  std::string access;
  for (int i = 0; i < 50 && access.find("\"fallback\":\"lite/1\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the access log's flush
    access = ReadFile(gateway_->dir() / "access.log");
  }
  EXPECT_NE(access.find("\"model\":\"degrading\",\"version\":\"1\",\"fallback\":\"lite/1\""),
            std::string::npos);
  const std::string audit = ReadFile(gateway_->audit_log());
  EXPECT_NE(audit.find("model:lite/1"), std::string::npos);
}

TEST_F(RemoteTest, AnOpenBreakerSendsEveryRequestToTheFallbackAtOnce) {
  for (int i = 0; i < 2; ++i) {  // failed after their attempt, answered by the fallback
    HttpReply r = Infer("open-primary");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-pillar-fallback"], "lite/1");
  }
  const size_t hits = Hits("broken").size();
  for (int i = 0; i < 10; ++i) {
    double seconds = 0;
    HttpReply r = Infer("open-primary", &seconds);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-pillar-fallback"], "lite/1");
    EXPECT_LT(seconds, 0.1);
  }
  EXPECT_EQ(Hits("broken").size(), hits);  // the breaker kept them from the upstream
}

TEST_F(RemoteTest, AFallbackTheCallerMayNotSeeIsNeverUsed) {
  // "hidden" belongs to another tenant: a user of tenant demo gets the primary's own error.
  HttpReply r = Fetch(gateway_->data_port(), "POST", "/v2/models/guarded/infer", kTwoRows,
                      {Bearer(tenant_key_)});
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.headers.count("x-pillar-fallback"), 0u);
  EXPECT_EQ(r.body.find("hidden"), std::string::npos) << r.body;
  // An administrator may use it.
  HttpReply admin = Infer("guarded");
  EXPECT_EQ(admin.status, 200) << admin.body;
  EXPECT_EQ(admin.headers["x-pillar-fallback"], "hidden/1");
}

TEST_F(RemoteTest, ARefusalOfTheRequestItselfDoesNotFallBack) {
  // The upstream answers 404 to what pillar sent: a configuration error no lighter model fixes.
  HttpReply r = Infer("picky");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.headers.count("x-pillar-fallback"), 0u);
}

TEST_F(RemoteTest, AFullQueueShedsTheLowerClassAndHopelessDeadlinesAtOnce) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Infer("narrow").status, 200);  // measures a call
  // One call in flight and three waiting: past half of the queue, all a low request may fill,
  // for as long as two calls take (one waiting would leave a window of what remains of one).
  std::vector<std::thread> load;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    load.emplace_back([&] { ok += Infer("narrow").status == 200; });
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
  }
  // In place before the requests below (under load, the three may take longer to arrive: the
  // suite failed once with a queue that had not filled yet).
  bool in_place = false;
  for (int i = 0; i < 500 && !in_place; ++i) {
    const std::string narrow = BackendOf(Backends(*gateway_, key_), "narrow");
    in_place = narrow.find("\"in_flight\":1,") != std::string::npos &&
               narrow.find("\"queued\":3,") != std::string::npos;
  }
  ASSERT_TRUE(in_place) << Backends(*gateway_, key_);
  auto timed = [&](const std::vector<std::string>& headers, double* seconds) {
    const auto start = std::chrono::steady_clock::now();
    HttpReply r =
        Fetch(gateway_->data_port(), "POST", "/v2/models/narrow/infer", kTwoRows, headers);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  double seconds = 0;
  HttpReply low = timed({Bearer(key_), "X-Pillar-Priority: low"}, &seconds);
  EXPECT_EQ(low.status, 503) << low.body;
  EXPECT_NE(low.body.find("low-priority"), std::string::npos) << low.body;
  EXPECT_GE(std::stoi(low.headers["retry-after"].empty() ? "0" : low.headers["retry-after"]), 1);
  EXPECT_LT(seconds, 0.05);
  // A key whose attribute says low cannot ask for more.
  HttpReply raised = timed({Bearer(low_key_), "X-Pillar-Priority: high"}, &seconds);
  EXPECT_EQ(raised.status, 503) << raised.body;
  EXPECT_NE(raised.body.find("low-priority"), std::string::npos) << raised.body;
  // Calls ahead of it at about 100 ms each: a 120 ms deadline cannot be met.
  HttpReply hurried = timed({Bearer(key_), "X-Pillar-Timeout-Ms: 120"}, &seconds);
  EXPECT_EQ(hurried.status, 503) << hurried.body;
  EXPECT_NE(hurried.body.find("estimated wait"), std::string::npos) << hurried.body;
  EXPECT_LT(seconds, 0.05);
  HttpReply bad = timed({Bearer(key_), "X-Pillar-Priority: urgent"}, &seconds);
  EXPECT_EQ(bad.status, 400) << bad.body;
  for (std::thread& t : load) t.join();
  EXPECT_EQ(ok.load(), 4);  // the admitted ones were served
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  EXPECT_NE(metrics.find("pillar_shed_total{model=\"narrow\",version=\"1\"} 3"), std::string::npos);
}

TEST_F(RemoteTest, AHedgeToAnotherReplicaAnswersWhileOneIsSlow) {
  for (int i = 0; i < 30; ++i) ASSERT_EQ(Infer("hedged").status, 200);  // latencies to hedge on
  const std::filesystem::path slow =
      bad_dir_->path() / ("slow." + std::to_string(more_bad_ports_[0]));
  std::ofstream(slow).close();
  double slowest = 0;
  for (int i = 0; i < 20; ++i) {
    double seconds = 0;
    HttpReply r = Infer("hedged", &seconds);
    EXPECT_EQ(r.status, 200) << r.body;
    slowest = std::max(slowest, seconds);
  }
  std::filesystem::remove(slow);
  // Without hedging, the requests sent to the slow replica would take 500 ms.
  EXPECT_LT(slowest, 0.3);
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  const size_t at =
      metrics.find("pillar_upstream_hedge_wins_total{model=\"hedged\",version=\"1\"} ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stoi(metrics.substr(at + 61)), 0);
}

// An upstream's 4xx is the request's fault: however many a caller sends, the version's breaker
// stays closed and the endpoint in service for everyone.
TEST_F(RemoteTest, RequestsAnUpstreamRefusesCannotOpenTheBreaker) {
  for (int i = 0; i < 30; ++i) EXPECT_EQ(Infer("picky").status, 502);
  const std::string state = BackendOf(Backends(*gateway_, key_), "picky");
  EXPECT_NE(state.find("\"breaker\":\"closed\""), std::string::npos) << state;
  EXPECT_NE(state.find("\"health\":\"healthy\""), std::string::npos) << state;
  EXPECT_NE(state.find("\"trips\":0"), std::string::npos) << state;
}

// A replica that answers every request "X-Pillar-Shed: deadline" (with Retry-After: 3600) is not
// believed without a caller's deadline (a plain 503: it is paused), and with one it is sent less
// as the time it claims to need is taken as its latency; no request fails either way.
TEST_F(RemoteTest, AReplicaClaimingEveryDeadlineIsTooShortCannotTakeTheTraffic) {
  const std::filesystem::path shed =
      bad_dir_->path() / ("shed." + std::to_string(more_bad_ports_[0]));
  std::ofstream(shed).close();
  for (int i = 0; i < 30; ++i) {
    HttpReply deadline = Fetch(gateway_->data_port(), "POST", "/v2/models/shedding/infer", kTwoRows,
                               {Bearer(key_), "X-Pillar-Timeout-Ms: 2000"});
    EXPECT_EQ(deadline.status, 200) << deadline.body;
    HttpReply plain = Infer("shedding");
    EXPECT_EQ(plain.status, 200) << plain.body;
  }
  std::filesystem::remove(shed);
}

}  // namespace
}  // namespace pillar
