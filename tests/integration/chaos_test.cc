// Replicas failing under load, through real processes on loopback: three `pillar serve`
// upstreams (simulated models) behind one pillar gateway, with clients sending steadily.
// - one upstream SIGKILLed mid-load: no client request fails (retries reach the others);
// - one upstream SIGSTOPped: the failures it causes stop within a measured time, every request
//   is answered within its deadline, and after SIGCONT it rejoins;
// - bulkhead: one model flooded past its capacity, another model's success stays 100 % and its
//   p99 within 2x of its unloaded p99;
// - deadline: a 100 ms client deadline against a 300 ms upstream answers 504 in about 100 ms,
//   and the upstream drops the request instead of computing it.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;
using testing::HttpReply;
using Clock = std::chrono::steady_clock;

constexpr char kTwoRows[] =
    R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8]}]})";

std::string Tensors() {
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
)";
}

void WriteVersion(const std::filesystem::path& store, const std::string& model,
                  const std::string& toml) {
  std::filesystem::create_directories(store / model / "1");
  std::ofstream(store / model / "1" / "model.toml") << toml;
}

std::string Simulated(int latency_ms, int instances) {
  return "platform = \"simulated\"\n" + Tensors() +
         "[instance]\ncount = " + std::to_string(instances) +
         "\n[simulated]\nlatency_ms = " + std::to_string(latency_ms) + "\n";
}

std::string Remote(const std::vector<const testing::ServerProcess*>& upstreams,
                   const std::string& settings) {
  std::string list;
  for (const testing::ServerProcess* u : upstreams) {
    list += (list.empty() ? "\"" : ", \"") + std::string("http://127.0.0.1:") +
            std::to_string(u->data_port()) + "\"";
  }
  return "platform = \"remote\"\n" + Tensors() + "[remote]\nendpoints = [" + list + "]\n" +
         settings;
}

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, size_t(double(values.size()) * p))];
}

// What a client saw of one request.
struct Sample {
  double at = 0;  // seconds since the load began, when it was sent
  double seconds = 0;
  int status = 0;
};

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The upstreams share one state database, so that the gateway's key works on each.
    for (int i = 0; i < 3; ++i) {
      auto& u = upstreams_[i];
      u = std::make_unique<testing::ServerProcess>();
      const std::filesystem::path store = u->dir() / "store";
      WriteVersion(store, "digits", Simulated(2, 4));
      WriteVersion(store, "slow", Simulated(300, 1));
      WriteVersion(store, "stall", Simulated(3000, 4));
      u->SetStore(store);
      if (i > 0) u->SetStatePath(upstreams_[0]->state_path());
    }
    token_ = upstreams_[0]->CreateKey("gateway");
    const std::string& token = token_;
    for (auto& u : upstreams_) ASSERT_TRUE(u->Start()) << u->Log();
    // An upstream that refuses bodies over 2 KiB with 413 and closes, before reading them (the
    // gateway sends about 3 MB: more than the sockets buffer, so its write fails).
    strict_ = std::make_unique<testing::ServerProcess>();
    WriteVersion(
        strict_->dir() / "store", "wide",
        Simulated(0, 1).replace(Simulated(0, 1).find("shape = [4]"), 11, "shape = [262144]"));
    strict_->SetStore(strict_->dir() / "store");
    strict_->SetStatePath(upstreams_[0]->state_path());
    strict_->AddConfig("[limits]\nbody_limit_bytes = 2048\n");
    ASSERT_TRUE(strict_->Start()) << strict_->Log();

    gateway_ = std::make_unique<testing::ServerProcess>();
    const std::filesystem::path credentials = gateway_->dir() / "upstream.token";
    std::ofstream(credentials) << token << "\n";
    std::filesystem::permissions(
        credentials, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    const std::string auth = "credentials_file = \"" + credentials.string() + "\"\n";
    const std::filesystem::path store = gateway_->dir() / "store";
    const testing::ServerProcess* u0 = upstreams_[0].get();
    const testing::ServerProcess* u1 = upstreams_[1].get();
    const testing::ServerProcess* u2 = upstreams_[2].get();
    // The replicated model: a stopped replica is given 150 ms per attempt, checked every 250 ms,
    // and ejected for 1 s (growing) rather than 30 s, so that the test sees it come back.
    WriteVersion(
        store, "digits",
        Remote({u0, u1, u2}, auth + "attempt_timeout_ms = 150\nmin_retry_concurrency = 16\n"
                                    "base_ejection_ms = 1000\n"
                                    "max_ejection_percent = 34\n"
                                    "[remote.health_check]\ninterval_ms = 250\n"
                                    "timeout_ms = 100\n"));
    // Bulkhead: "flooded" has two connections and a queue of four to a 300 ms model; "steady" is
    // another model of the same upstream.
    WriteVersion(store, "flooded",
                 Remote({u0}, auth + "model = \"slow\"\nconnections = 2\nmax_queue = 4\n"));
    WriteVersion(store, "steady", Remote({u0}, auth + "model = \"digits\"\n"));
    WriteVersion(store, "slow", Remote({u2}, auth));
    // Every attempt fails at 600 ms (the upstream takes 3 s); two failures in a row eject.
    WriteVersion(store, "stalling",
                 Remote({u2}, auth + "model = \"stall\"\nattempt_timeout_ms = 600\n"
                                     "idempotent = false\nconsecutive_failures = 2\n"
                                     "[remote.health_check]\nenabled = false\n"));
    std::string wide = Remote({strict_.get()}, auth + "consecutive_failures = 1\n");
    wide.replace(wide.find("shape = [4]"), 11, "shape = [262144]");
    WriteVersion(store, "wide", wide);
    gateway_->SetStore(store);
    // The operator's backends file, watched every 100 ms; at first it says what model.toml says.
    backends_ = gateway_->dir() / "backends.toml";
    WriteBackends("[backends.digits]\nendpoints = " + Endpoints({0, 1, 2}) + "\n");
    gateway_->AddConfig("[upstream]\nbackends_file = \"" + backends_.string() +
                        "\"\nbackends_reload_ms = 100\n");
    key_ = gateway_->CreateKey("client");
    ASSERT_TRUE(gateway_->Start()) << gateway_->Log();
  }

  void TearDown() override {
    EXPECT_EQ(gateway_->Stop(), 0) << gateway_->Log();
    for (auto& u : upstreams_) {
      if (u->running()) u->Stop();
    }
    if (strict_ && strict_->running()) strict_->Stop();
  }

  // A TOML array of the upstreams `which`, as URLs.
  std::string Endpoints(const std::vector<int>& which) const {
    std::string list;
    for (int i : which) {
      list += (list.empty() ? "\"" : ", \"") + std::string("http://127.0.0.1:") +
              std::to_string(upstreams_[i]->data_port()) + "\"";
    }
    return "[" + list + "]";
  }

  // Replaces the backends file whole (written aside, then renamed), as an operator's tool would.
  void WriteBackends(const std::string& text) {
    const std::filesystem::path aside = backends_.string() + ".new";
    std::ofstream(aside) << text;
    std::filesystem::permissions(
        aside, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    std::filesystem::rename(aside, backends_);
  }

  // How many times the gateway's log says `model` (version 1) took a new configuration.
  size_t Reloads(const std::string& model) const {
    const std::string log = gateway_->Log();
    const std::string line = "model " + model + " version 1 now has";
    size_t n = 0;
    for (size_t at = 0; (at = log.find(line, at)) != std::string::npos; ++at) ++n;
    return n;
  }

  // The backends file with digits on every upstream and `stalling` as given, then a wait (up to
  // 1 s) until stalling took it.
  void WriteStalling(const std::string& stalling) {
    const size_t before = Reloads("stalling");
    WriteBackends("[backends.digits]\nendpoints = " + Endpoints({0, 1, 2}) +
                  "\n[backends.stalling]\n" + stalling);
    for (int i = 0; i < 100 && Reloads("stalling") == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(Reloads("stalling"), before) << "the change was not read";
  }

  HttpReply Infer(const std::string& model, int timeout_ms, double* seconds) {
    const auto start = Clock::now();
    HttpReply r = Fetch(gateway_->data_port(), "POST", "/v2/models/" + model + "/infer", kTwoRows,
                        {Bearer(key_), "X-Pillar-Timeout-Ms: " + std::to_string(timeout_ms)});
    *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
  }

  // `clients` threads sending to `model` for `duration`; `during(t)` runs on this thread at the
  // times it asks for (its return value: seconds until the next call, or < 0 for none).
  std::vector<Sample> Load(const std::string& model, int clients, double duration, int timeout_ms,
                           const std::function<double(double)>& during) {
    std::vector<Sample> samples;
    std::mutex mu;
    const auto begin = Clock::now();
    auto since = [&] { return std::chrono::duration<double>(Clock::now() - begin).count(); };
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&] {
        while (since() < duration) {
          Sample s;
          s.at = since();
          s.status = Infer(model, timeout_ms, &s.seconds).status;
          std::lock_guard lock(mu);
          samples.push_back(s);
        }
      });
    }
    for (double next = 0; next >= 0 && since() < duration;) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, next - since())));
      next = during(since());
    }
    for (std::thread& t : threads) t.join();
    return samples;
  }

  std::array<std::unique_ptr<testing::ServerProcess>, 3> upstreams_;
  std::unique_ptr<testing::ServerProcess> gateway_;
  std::unique_ptr<testing::ServerProcess> strict_;
  std::string key_;
  std::string token_;  // the gateway's key at the upstreams
  std::filesystem::path backends_;
};

TEST_F(ChaosTest, AReplicaKilledMidLoadFailsNoRequest) {
  bool killed = false;
  std::vector<Sample> samples = Load("digits", 4, 3.0, 2000, [&](double now) {
    if (now < 1.0) return 1.0;
    ::kill(upstreams_[1]->pid(), SIGKILL);
    killed = true;
    return -1.0;
  });
  ASSERT_TRUE(killed);
  upstreams_[1]->WaitForExit();
  int failed = 0, after_kill = 0;
  for (const Sample& s : samples) {
    failed += s.status != 200;
    after_kill += s.at > 1.0;
  }
  EXPECT_EQ(failed, 0) << "of " << samples.size();
  EXPECT_GT(after_kill, 100);
}

TEST_F(ChaosTest, AStoppedReplicaStopsCausingFailuresAndRejoinsAfterContinuing) {
  const pid_t stopped = upstreams_[1]->pid();
  std::vector<Sample> samples = Load("digits", 4, 6.0, 1000, [&](double now) {
    if (now < 1.0) return 1.0;
    if (now < 4.0) {
      ::kill(stopped, SIGSTOP);
      return 4.0;
    }
    ::kill(stopped, SIGCONT);
    return -1.0;
  });
  ::kill(stopped, SIGCONT);  // whatever happened above
  double first_failure = -1, last_failure = -1, slowest = 0;
  int failed = 0;
  for (const Sample& s : samples) {
    slowest = std::max(slowest, s.seconds);
    if (s.status == 200) continue;
    ++failed;
    if (first_failure < 0 || s.at < first_failure) first_failure = s.at;
    last_failure = std::max(last_failure, s.at);
  }
  // Every request is answered within its 1 s deadline (with room for a loaded machine)...
  EXPECT_LT(slowest, 1.5);
  // ... and whatever failed did so within the first second of the stop.
  if (failed > 0) {
    std::printf("stopped replica: %d failed requests between %.2f s and %.2f s\n", failed,
                first_failure, last_failure);
    EXPECT_LT(last_failure, 2.0);
  }
  // It rejoins: healthy in the gateway's view, and taking requests again.
  std::string state;
  const std::string url = "http://127.0.0.1:" + std::to_string(upstreams_[1]->data_port());
  for (int i = 0; i < 40; ++i) {
    state = Fetch(gateway_->admin_port(), "GET", "/admin/v1/backends", "", {Bearer(key_)}).body;
    const size_t at = state.find("\"url\":\"" + url + "\"");
    if (at != std::string::npos &&
        state.substr(at, 200).find("\"health\":\"healthy\"") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const size_t at = state.find("\"url\":\"" + url + "\"");
  ASSERT_NE(at, std::string::npos) << state;
  EXPECT_NE(state.substr(at, 200).find("\"health\":\"healthy\""), std::string::npos) << state;
  double seconds = 0;
  for (int i = 0; i < 30; ++i) EXPECT_EQ(Infer("digits", 1000, &seconds).status, 200);
}

TEST_F(ChaosTest, AFloodedModelCannotSlowAnotherOne) {
  // 600 requests a phase, so that a p99 is the sixth slowest: of 200 it was the second, and one
  // stall of the machine (the suite runs another test beside this one on two cores) moved it
  // past 2x (8.26 ms loaded against 4.07).
  constexpr int kSamples = 600;
  std::vector<double> unloaded;
  double seconds = 0;
  for (int i = 0; i < kSamples; ++i) {
    EXPECT_EQ(Infer("steady", 2000, &seconds).status, 200);
    unloaded.push_back(seconds);
  }
  std::atomic<bool> flooding{true};
  std::atomic<int> flood_refused{0};
  std::vector<std::thread> flood;
  for (int c = 0; c < 12; ++c) {
    flood.emplace_back([&] {
      while (flooding) {
        double s = 0;
        if (Infer("flooded", 5000, &s).status == 503) {
          ++flood_refused;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<double> loaded;
  int failed = 0;
  for (int i = 0; i < kSamples; ++i) {
    failed += Infer("steady", 2000, &seconds).status != 200;
    loaded.push_back(seconds);
  }
  flooding = false;
  for (std::thread& t : flood) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_GT(flood_refused.load(), 0);  // the flood did go past its capacity
  // The unloaded baseline again, after the flood: one quiet phase of the neighbour during the
  // first baseline failed this check once (7.95 ms loaded against 3.21, at 200 requests a
  // phase); the larger of the two baselines is the machine's, not the flood's.
  std::vector<double> after;
  for (int i = 0; i < kSamples; ++i) {
    EXPECT_EQ(Infer("steady", 2000, &seconds).status, 200);
    after.push_back(seconds);
  }
  const double p99_unloaded = std::max(Percentile(unloaded, 0.99), Percentile(after, 0.99));
  const double p99_loaded = Percentile(loaded, 0.99);
  std::printf("steady p99: %.2f ms unloaded, %.2f ms while another model is flooded\n",
              p99_unloaded * 1e3, p99_loaded * 1e3);
  // Within 2x, on a floor of 2 ms: below it the machine's scheduling noise is what one measures.
  EXPECT_LT(p99_loaded, 2 * std::max(p99_unloaded, 0.002));
}

// Found by review helper-108: an attempt still running when the backends file changed a model's
// configuration (its endpoints are then replaced) recorded its failure in the endpoints
// replaced, which nobody reads any more: a file rewritten every few seconds kept a failing
// endpoint from ever being ejected.
TEST_F(ChaosTest, AnAttemptThatRanAcrossAReloadCountsForItsEndpoint) {
  double seconds = 0;
  EXPECT_NE(Infer("stalling", 5000, &seconds).status, 200);  // the first failure
  auto reloads = [&] {
    const std::string log = gateway_->Log();
    size_t n = 0;
    for (size_t at = 0;
         (at = log.find("model stalling version 1 now has", at)) != std::string::npos; ++at) {
      ++n;
    }
    return n;
  };
  const size_t before = reloads();
  std::thread second([&] {
    double s = 0;
    EXPECT_NE(Infer("stalling", 5000, &s).status, 200);  // the second, across the reload
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  WriteBackends("[backends.digits]\nendpoints = " + Endpoints({0, 1, 2}) +
                "\n[backends.stalling]\nmax_queue = 1000\n");  // a change of stalling's
  size_t during = before;
  for (int i = 0; i < 40 && during == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    during = reloads();
  }
  second.join();
  ASSERT_GT(during, before) << "no reload while the attempt ran";
  const std::string state =
      Fetch(gateway_->admin_port(), "GET", "/admin/v1/backends", "", {Bearer(key_)}).body;
  const size_t at = state.find("{\"model\":\"stalling\"");
  ASSERT_NE(at, std::string::npos) << state;
  EXPECT_NE(state.substr(at, 400).find("\"health\":\"ejected\""), std::string::npos)
      << state.substr(at, 400);
}

// A backends file read again that says what it said (rewritten as it was, or touched, as a
// discovery tool does every few seconds) changes nothing in service: no endpoint set is rebuilt,
// so no check restarts and no count of requests outstanding starts again from zero (review
// helper-108, helper-109). A change is still taken.
TEST_F(ChaosTest, AFileReadAgainThatSaysTheSameChangesNothing) {
  auto rebuilds = [&] {
    const std::string log = gateway_->Log();
    size_t n = 0;
    for (size_t at = 0; (at = log.find("model digits version 1 now has", at)) != std::string::npos;
         ++at) {
      ++n;
    }
    return n;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the first reading is in
  const size_t before = rebuilds();
  for (int i = 0; i < 3; ++i) {
    WriteBackends("[backends.digits]\nendpoints = " + Endpoints({0, 1, 2}) + "\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(rebuilds(), before);
  WriteBackends("[backends.digits]\nendpoints = " + Endpoints({0, 1}) + "\n");
  size_t after = before;
  for (int i = 0; i < 50 && after == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = rebuilds();
  }
  EXPECT_EQ(after, before + 1);
  double seconds = 0;
  EXPECT_EQ(Infer("digits", 2000, &seconds).status, 200);
}

// The attempts in flight when the backends file changes a version stay counted by the endpoint
// set that replaces its set, until each ends: the picker weighs them and the pool counts them
// against `connections` (review helper-109: the count started again from zero at each change).
// So do they when their endpoint is removed and listed again, or spelled another way, while they
// run (review helper-111); the count never goes below zero.
TEST_F(ChaosTest, AttemptsInFlightStayCountedAcrossAReload) {
  auto write = [&](const std::string& stalling) { WriteStalling(stalling); };
  auto outstanding = [&] {
    const std::string state =
        Fetch(gateway_->admin_port(), "GET", "/admin/v1/backends", "", {Bearer(key_)}).body;
    const size_t at = state.find("{\"model\":\"stalling\"");
    const size_t field = state.find("\"outstanding\":", state.find("\"endpoints\"", at));
    if (at == std::string::npos || field == std::string::npos) return int64_t{-100};
    return int64_t{std::stoll(state.substr(field + 14))};
  };
  // Attempts of 2.5 s against an upstream that takes 3 s, never ejected meanwhile.
  const std::string settings = "attempt_timeout_ms = 2500\nconsecutive_failures = 1000\n";
  write(settings);
  auto send_three = [&] {
    std::vector<std::thread> calls;
    for (int i = 0; i < 3; ++i) {
      calls.emplace_back([&] {
        double s = 0;
        EXPECT_NE(Infer("stalling", 5000, &s).status, 200);
      });
    }
    return calls;
  };
  std::vector<std::thread> calls = send_three();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(outstanding(), 3);
  write(settings + "max_queue = 1000\n");  // a change: a new set for the same endpoint
  EXPECT_EQ(outstanding(), 3);
  for (std::thread& t : calls) t.join();
  EXPECT_EQ(outstanding(), 0);

  calls = send_three();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  write(settings + "endpoints = " + Endpoints({1}) + "\n");  // the endpoint leaves
  write(settings + "endpoints = " + Endpoints({2}) + "\n");  // and comes back
  EXPECT_EQ(outstanding(), 3);
  // The same endpoint spelled otherwise (its port with a leading zero) is the same endpoint,
  // with the same metric series (review helper-112: a series of the new spelling read 0).
  const std::string port = std::to_string(upstreams_[2]->data_port());
  write(settings + "endpoints = [\"http://127.0.0.1:0" + port + "/\"]\n");
  EXPECT_EQ(outstanding(), 3);
  const std::string metrics =
      Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  EXPECT_NE(metrics.find("pillar_upstream_outstanding{model=\"stalling\",version=\"1\","
                         "endpoint=\"http://127.0.0.1:" +
                         port + "\"} 3\n"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find(":0" + port), std::string::npos);
  for (std::thread& t : calls) t.join();
  EXPECT_EQ(outstanding(), 0);
}

// An endpoint's gauges say its state after a change of the backends file, not the state before
// it: a breaker that a new rule starts closed reads closed (review helper-113: the gauge stayed
// open while the breaker, closed, let requests through, until its next transition).
TEST_F(ChaosTest, AReloadLeavesNoGaugeStale) {
  auto write = [&](const std::string& breaker) {
    WriteStalling("consecutive_failures = 1000\n[backends.stalling.breaker]\n" + breaker);
  };
  const std::string gauge =
      "pillar_upstream_breaker_state{model=\"stalling\",version=\"1\","
      "endpoint=\"http://127.0.0.1:" +
      std::to_string(upstreams_[2]->data_port()) + "\"} ";
  auto breaker_gauge = [&] {
    const std::string metrics =
        Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
    const size_t at = metrics.find(gauge);
    return at == std::string::npos ? std::string("none") : metrics.substr(at + gauge.size(), 1);
  };
  write("failure_count = 1\ntrip_duration_ms = 60000\n");
  double seconds = 0;
  EXPECT_NE(Infer("stalling", 5000, &seconds).status, 200);  // cut at 600 ms: the breaker opens
  EXPECT_EQ(breaker_gauge(), "1");
  write("failure_count = 2\ntrip_duration_ms = 60000\n");  // a new rule: it starts closed
  EXPECT_EQ(breaker_gauge(), "0");
  // A transition like the others: said and audited (it went unsaid).
  const std::string closed =
      "circuit breaker of upstream http://127.0.0.1:" + std::to_string(upstreams_[2]->data_port()) +
      " of model 'stalling' closed: its rule changed";
  EXPECT_NE(gateway_->Log().find(closed), std::string::npos) << gateway_->Log();
  auto audit_log = [&] {
    std::ifstream in(gateway_->audit_log());
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string audit = audit_log();  // written by its writer a moment later
  for (int i = 0; i < 300 && audit.find(closed) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    audit = audit_log();
  }
  EXPECT_NE(audit.find(closed), std::string::npos);
  EXPECT_NE(audit.find("breaker_close"), std::string::npos);
  // A trip that ends by time alone, with no request after it: half-open within a second or so.
  write("failure_count = 1\ntrip_duration_ms = 1000\n");
  EXPECT_NE(Infer("stalling", 5000, &seconds).status, 200);
  EXPECT_EQ(breaker_gauge(), "1");
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  EXPECT_EQ(breaker_gauge(), "2");
}

// The version's own breaker too: a new rule that closes it is said (and audited, as above).
TEST_F(ChaosTest, ANewRuleThatClosesTheVersionsBreakerIsSaid) {
  auto write = [&](int failures) {
    WriteStalling(
        "consecutive_failures = 1000\n[backends.stalling.backend_breaker]\n"
        "failure_count = " +
        std::to_string(failures) + "\ntrip_duration_ms = 60000\n");
  };
  write(1);
  double seconds = 0;
  EXPECT_NE(Infer("stalling", 5000, &seconds).status, 200);
  EXPECT_EQ(Infer("stalling", 5000, &seconds).status, 503);  // open: refused at once
  write(2);
  EXPECT_NE(gateway_->Log().find(
                "circuit breaker of model 'stalling' version 1 closed: its rule changed"),
            std::string::npos)
      << gateway_->Log();
}

TEST_F(ChaosTest, AShortDeadlineEndsTheRequestAndTheUpstreamDropsIt) {
  // One request occupies the upstream's only instance for 300 ms.
  double seconds = 0;
  std::thread occupant([&] {
    double s = 0;
    EXPECT_EQ(Infer("slow", 5000, &s).status, 200);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  HttpReply r = Infer("slow", 100, &seconds);
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_GE(seconds, 0.09);
  EXPECT_LT(seconds, 0.25);
  occupant.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // The upstream ran one batch: the occupant's. The other was dropped from its queue unrun.
  const std::string metrics =
      Fetch(upstreams_[2]->admin_port(), "GET", "/metrics", "", {Bearer(token_)}).body;
  EXPECT_NE(metrics.find("pillar_batch_size_count{model=\"slow\",version=\"1\"} 1\n"),
            std::string::npos)
      << metrics.substr(0, 200);
}

TEST_F(ChaosTest, TwentyEditsOfTheBackendsFileUnderLoadFailNoRequest) {
  const std::vector<std::string> edits = {
      "endpoints = " + Endpoints({0, 1}),
      "endpoints = [{ url = \"http://127.0.0.1:" + std::to_string(upstreams_[1]->data_port()) +
          "\", weight = 5 }, { url = \"http://127.0.0.1:" +
          std::to_string(upstreams_[2]->data_port()) + "\", priority = 2 }]",
      "endpoints = " + Endpoints({2}) + "\n[backends.digits.breaker]\nfailure_count = 3",
      "endpoints = " + Endpoints({0, 1, 2}) + "\nattempt_timeout_ms = 300",
  };
  int edited = 0;
  std::vector<Sample> samples = Load("digits", 4, 4.0, 2000, [&](double now) {
    if (edited == 20) return -1.0;
    WriteBackends("[backends.digits]\n" + edits[size_t(edited) % edits.size()] + "\n");
    ++edited;
    return now + 0.15;
  });
  EXPECT_EQ(edited, 20);
  int failed = 0;
  for (const Sample& s : samples) failed += s.status != 200;
  EXPECT_EQ(failed, 0) << "of " << samples.size();
  EXPECT_GT(samples.size(), 200u);

  // An edit takes effect: only upstream 0 serves, as the admin view shows.
  // The admin view of "digits" alone (other models use the same upstreams).
  auto backends = [&] {
    const std::string all =
        Fetch(gateway_->admin_port(), "GET", "/admin/v1/backends", "", {Bearer(key_)}).body;
    const size_t at = all.find("{\"model\":\"digits\"");
    if (at == std::string::npos) return std::string();
    return all.substr(at, all.find("{\"model\":", at + 1) - at);
  };
  auto url = [&](int i) {
    return "\"url\":\"http://127.0.0.1:" + std::to_string(upstreams_[i]->data_port()) + "\"";
  };
  WriteBackends("[backends.digits]\nendpoints = " + Endpoints({0}) + "\n");
  std::string state;
  for (int i = 0; i < 30; ++i) {
    state = backends();
    if (state.find(url(2)) == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(state.find(url(0)), std::string::npos) << state;
  EXPECT_EQ(state.find(url(1)), std::string::npos) << state;
  EXPECT_EQ(state.find(url(2)), std::string::npos) << state;
  // The series of the endpoints that left leave /metrics once their last attempts ended (review
  // helper-113 F6: every endpoint ever listed kept its series, its gauges at their last values).
  auto series = [&](int i) {
    return "pillar_upstream_state{model=\"digits\",version=\"1\",endpoint=\"http://127.0.0.1:" +
           std::to_string(upstreams_[i]->data_port()) + "\"}";
  };
  std::string metrics;
  for (int i = 0; i < 30; ++i) {
    metrics = Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
    if (metrics.find(series(2)) == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(metrics.find(series(0)), std::string::npos);
  EXPECT_EQ(metrics.find(series(1)), std::string::npos);
  EXPECT_EQ(metrics.find(series(2)), std::string::npos);

  // A file that does not validate is refused with its file:line, and the last good one stays.
  WriteBackends("[backends.digits]\nendpoints = " + Endpoints({1}) + "\nretries = 3\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_NE(gateway_->Log().find(backends_.string() + ":3"), std::string::npos) << gateway_->Log();
  state = backends();
  EXPECT_NE(state.find(url(0)), std::string::npos) << state;
  EXPECT_EQ(state.find(url(1)), std::string::npos) << state;
  // A valid file that others may write is refused too (checked on the file read), and audited.
  {
    const std::filesystem::path aside = backends_.string() + ".new";
    std::ofstream(aside) << "[backends.digits]\nendpoints = " << Endpoints({1}) << "\n";
    std::filesystem::permissions(aside, std::filesystem::perms::owner_read |
                                            std::filesystem::perms::owner_write |
                                            std::filesystem::perms::group_write);
    std::filesystem::rename(aside, backends_);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_NE(gateway_->Log().find("group or others may write it"), std::string::npos)
      << gateway_->Log();
  state = backends();
  EXPECT_NE(state.find(url(0)), std::string::npos) << state;
  EXPECT_EQ(state.find(url(1)), std::string::npos) << state;
  double seconds = 0;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Infer("digits", 2000, &seconds).status, 200);
}

// An upstream that answers 413 to a body over its limit and closes before reading it: the
// gateway's write fails, but it reads the answer, and a refusal of the request is not a failure of
// the endpoint (one bad request must not eject it for everyone; here one failure would).
// Raising a model's connections in the backends file starts the calls waiting for one at once,
// not as the calls in flight end: three 300 ms calls through one connection end at 0.3, 0.6 and
// 0.9 s; given three connections 0.1 s in, the last ends at about 0.6 s (the upstream model
// batches the two that come together).
TEST_F(ChaosTest, RaisingConnectionsStartsTheWaitingCallsAtOnce) {
  const std::string table = "[backends.flooded]\nendpoints = " + Endpoints({0}) + "\n";
  WriteBackends(table + "connections = 1\nmax_queue = 8\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // read every 100 ms
  std::vector<double> seconds(3, 0);
  std::vector<int> statuses(3, 0);
  std::vector<std::thread> callers;
  for (size_t i = 0; i < 3; ++i) {
    callers.emplace_back([&, i] { statuses[i] = Infer("flooded", 5000, &seconds[i]).status; });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  WriteBackends(table + "connections = 3\nmax_queue = 8\n");
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(statuses, (std::vector<int>{200, 200, 200}));
  EXPECT_LT(*std::max_element(seconds.begin(), seconds.end()), 0.8)
      << seconds[0] << " " << seconds[1] << " " << seconds[2];
}

TEST_F(ChaosTest, AnUpstreamRefusingABodyItWillNotReadIsNotFailing) {
  std::string data;
  for (int i = 0; i < 262144; ++i) data += (i ? ",123456.789" : "123456.789");
  const std::string body =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,262144],"data":[)" + data + "]}]}";
  for (int i = 0; i < 5; ++i) {
    HttpReply r =
        Fetch(gateway_->data_port(), "POST", "/v2/models/wide/infer", body, {Bearer(key_)});
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_NE(r.body.find("answered 413"), std::string::npos) << r.body;
  }
  const std::string state =
      Fetch(gateway_->admin_port(), "GET", "/admin/v1/backends", "", {Bearer(key_)}).body;
  const size_t at = state.find("{\"model\":\"wide\"");
  ASSERT_NE(at, std::string::npos) << state;
  EXPECT_NE(state.substr(at, 400).find("\"health\":\"healthy\",\"breaker\":\"closed\""),
            std::string::npos)
      << state.substr(at, 400);
  EXPECT_NE(state.substr(at, 400).find("\"ejections\":0"), std::string::npos);
}

// Found by review helper-126: a version the backends file did not fit (a hedge, for a model that
// is not idempotent) was served by its signed [remote], which brought back the endpoints the
// operator had taken out of the file over one key unrelated to them. It is not served until the
// file fits it, and then it is, without a restart.
// A gateway whose backends file does not fit its one version (a hedge for a version that is not
// idempotent), then is fixed: the version comes up without a restart. `repository` is added to
// the gateway's [repository] table.
void ExpectAVersionTheFileDoesNotFitComesUpOnceItDoes(const std::string& repository) {
  testing::ServerProcess upstream;
  WriteVersion(upstream.dir() / "store", "digits", Simulated(0, 1));
  upstream.SetStore(upstream.dir() / "store");
  const std::string token = upstream.CreateKey("gateway");
  ASSERT_TRUE(upstream.Start()) << upstream.Log();
  testing::ServerProcess gateway;
  const std::filesystem::path credentials = gateway.dir() / "upstream.token";
  std::ofstream(credentials) << token << "\n";
  std::filesystem::permissions(
      credentials, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  // The signed endpoint list names one that is gone; the file names the live one.
  std::string signed_remote =
      Remote({&upstream}, "credentials_file = \"" + credentials.string() +
                              "\"\nmodel = \"digits\"\nidempotent = false\n");
  const std::string live = ":" + std::to_string(upstream.data_port());
  signed_remote.replace(signed_remote.find(live), live.size(),
                        ":" + std::to_string(testing::FreeLoopbackPort()));
  WriteVersion(gateway.dir() / "store", "once", signed_remote);
  gateway.SetStore(gateway.dir() / "store");
  gateway.AddRepositoryConfig(repository);
  const std::filesystem::path backends = gateway.dir() / "backends.toml";
  const std::string endpoint =
      "[backends.once]\nendpoints = [\"http://127.0.0.1:" + std::to_string(upstream.data_port()) +
      "\"]\n";
  std::ofstream(backends) << endpoint << "[backends.once.hedge]\nenabled = true\n";
  std::filesystem::permissions(
      backends, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  gateway.AddConfig("[upstream]\nbackends_file = \"" + backends.string() +
                    "\"\nbackends_reload_ms = 100\n");
  const std::string key = gateway.CreateKey("client");
  ASSERT_TRUE(gateway.Start()) << gateway.Log();
  auto infer = [&] {
    return Fetch(gateway.data_port(), "POST", "/v2/models/once/infer", kTwoRows, {Bearer(key)});
  };
  HttpReply r = infer();
  EXPECT_NE(r.status, 200) << r.body;
  EXPECT_NE(gateway.Log().find("the backends file does not fit this version"), std::string::npos)
      << gateway.Log();
  // The file fixed (written aside, then renamed): a later scan loads the version.
  const std::filesystem::path aside = backends.string() + ".new";
  std::ofstream(aside) << endpoint;
  std::filesystem::permissions(
      aside, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::filesystem::rename(aside, backends);
  for (int i = 0; i < 100 && (r = infer()).status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(r.status, 200) << r.body << gateway.Log();
  EXPECT_EQ(gateway.Stop(), 0) << gateway.Log();
}

TEST(BackendsFileFitTest, AVersionTheFileDoesNotFitIsNotServedUntilItDoes) {
  ExpectAVersionTheFileDoesNotFitComesUpOnceItDoes("");
}

TEST(BackendsFileFitTest, AServerThatDoesNotPollTheStoreStillRetriesIt) {
  // poll_ms = 0 reads the store at start-up only; the version it found there is still tried
  // again (it was never, and fixing the file needed a restart).
  ExpectAVersionTheFileDoesNotFitComesUpOnceItDoes("poll_ms = 0\n");
}

}  // namespace
}  // namespace pillar
