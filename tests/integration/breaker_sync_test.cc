// Circuit-breaker trips shared through Redis: pillar gateways in front of the same failing
// upstream, sharing a real redis-server as their limits do. A trip seen by one is seen by the
// others within a second, by one started during the trip too, and each says so in its audit log.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/redis_server.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;
using testing::HttpReply;

constexpr char kOneRow[] =
    R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})";

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A remote model whose only endpoint refuses connections; its breaker trips after two failures
// and stays open for 30 s.
void WriteStore(const std::filesystem::path& store, int dead_port) {
  std::filesystem::create_directories(store / "down" / "1");
  std::ofstream(store / "down" / "1" / "model.toml")
      << "platform = \"remote\"\nmax_batch_size = 8\n"
         "[[input]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [4]\n"
         "[[output]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [2]\n"
         "[remote]\nendpoints = [\"http://127.0.0.1:"
      << dead_port
      << "\"]\n[remote.health_check]\nenabled = false\n"
         "[remote.backend_breaker]\nfailure_count = 2\ntrip_duration_ms = 30000\n";
}

class BreakerSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.Start());
    dead_port_ = testing::FreeLoopbackPort();
  }

  // A gateway sharing the Redis; its key goes to `key`.
  std::unique_ptr<testing::ServerProcess> Gateway(std::string& key) {
    auto server = std::make_unique<testing::ServerProcess>();
    WriteStore(server->dir() / "store", dead_port_);
    server->SetStore(server->dir() / "store");
    server->AddConfig("[limiter]\nbackend = \"redis\"\nredis_port = " +
                      std::to_string(redis_.port()) + "\nredis_timeout_ms = 200\n");
    key = server->CreateKey("client");
    EXPECT_TRUE(server->Start()) << server->Log();
    return server;
  }

  static HttpReply Infer(testing::ServerProcess& server, const std::string& key) {
    return Fetch(server.data_port(), "POST", "/v2/models/down/infer", kOneRow, {Bearer(key)});
  }

  testing::RedisServer redis_;
  int dead_port_ = 0;
};

// Whether the version's breaker is open in `server`'s admin view. Watched there, not by sending
// requests: a request that reached the dead upstream would count toward the instance's own trip.
bool OpenIn(testing::ServerProcess& server, const std::string& key) {
  return Fetch(server.admin_port(), "GET", "/admin/v1/backends", "", {Bearer(key)})
             .body.find("\"model\":\"down\",\"version\":\"1\",\"breaker\":\"open\"") !=
         std::string::npos;
}

TEST_F(BreakerSyncTest, ATripSeenByOneInstanceIsSeenByTheOthersWithinASecond) {
  std::string key_a, key_b;
  std::unique_ptr<testing::ServerProcess> a = Gateway(key_a);
  std::unique_ptr<testing::ServerProcess> b = Gateway(key_b);
  EXPECT_FALSE(OpenIn(*b, key_b));
  EXPECT_EQ(Infer(*a, key_a).status, 502);
  EXPECT_EQ(Infer(*a, key_a).status, 502);  // a's breaker trips here
  const auto tripped = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - tripped < std::chrono::seconds(2) &&
         !OpenIn(*b, key_b)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - tripped).count();
  ASSERT_TRUE(OpenIn(*b, key_b));
  EXPECT_LT(seconds, 1.0);
  // b never failed a request itself, and answers at once with a's trip.
  HttpReply seen = Infer(*b, key_b);
  EXPECT_EQ(seen.status, 503) << seen.body;
  EXPECT_NE(seen.body.find("circuit breaker of model 'down' version 1 is open"), std::string::npos)
      << seen.body;
  EXPECT_GE(std::stoi(seen.headers["retry-after"]), 28);  // a's 30 s trip, not a fresh one

  // An instance that starts during the trip reads it at once.
  std::string key_c;
  std::unique_ptr<testing::ServerProcess> c = Gateway(key_c);
  for (int i = 0; i < 100 && !OpenIn(*c, key_c); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(OpenIn(*c, key_c));
  EXPECT_EQ(Infer(*c, key_c).status, 503);
  EXPECT_EQ(a->Stop(), 0) << a->Log();
  EXPECT_EQ(b->Stop(), 0) << b->Log();
  EXPECT_EQ(c->Stop(), 0) << c->Log();
  // Each says so in its audit log (written by the time it stopped).
  EXPECT_NE(ReadFile(b->audit_log()).find("tripped by another instance"), std::string::npos);
  EXPECT_NE(ReadFile(c->audit_log()).find("tripped by another instance"), std::string::npos);
  EXPECT_EQ(ReadFile(a->audit_log()).find("tripped by another instance"), std::string::npos);
}

TEST_F(BreakerSyncTest, WithoutRedisTripsStayLocalAndServingGoesOn) {
  std::string key_a;
  std::unique_ptr<testing::ServerProcess> a = Gateway(key_a);
  redis_.Kill();
  EXPECT_EQ(Infer(*a, key_a).status, 502);
  EXPECT_EQ(Infer(*a, key_a).status, 502);
  HttpReply open = Infer(*a, key_a);  // its own trip holds
  EXPECT_EQ(open.status, 503) << open.body;
  EXPECT_EQ(a->Stop(), 0) << a->Log();
  EXPECT_NE(a->Log().find("breaker trips are not shared while redis"), std::string::npos)
      << a->Log();
}

}  // namespace
}  // namespace pillar
