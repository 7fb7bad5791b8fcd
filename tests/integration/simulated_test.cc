// platform = "simulated" served end to end through the real binary: signed versions whose
// [simulated] table sets the latency and the outcomes, answered through the whole request chain
// (authentication, policy, limits, audit) like any model.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "testing/http_client.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;
using testing::HttpReply;

constexpr char kTwoRows[] =
    R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8]}]})";

class SimulatedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess;
    const std::filesystem::path store = server_->dir() / "store";
    using testing::WriteSimulatedVersion;
    WriteSimulatedVersion(store, "sim", "latency = \"fixed\"\nlatency_ms = 40\n");
    WriteSimulatedVersion(store, "throttled", "throttle_rate = 1.0\nretry_after_s = 2\n");
    WriteSimulatedVersion(store, "failing", "error_rate = 1.0\n");
    WriteSimulatedVersion(store, "empirical", "latency = \"empirical\"\n", 2,
                          "# upper_ms count\n40 0\n60 1\n");
    WriteSimulatedVersion(store, "badhistogram", "latency = \"empirical\"\n", 2, "10 1\n5 1\n");
    server_->SetStore(store);
    key_ = server_->CreateKey("simulated");
    ASSERT_TRUE(server_->Start()) << server_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    delete server_;
  }

  static HttpReply Infer(const std::string& model, double* seconds = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    HttpReply r = Fetch(server_->data_port(), "POST", "/v2/models/" + model + "/infer", kTwoRows,
                        {Bearer(key_)});
    if (seconds != nullptr) {
      *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return r;
  }

  static testing::ServerProcess* server_;
  static std::string key_;
};

testing::ServerProcess* SimulatedTest::server_ = nullptr;
std::string SimulatedTest::key_;

TEST_F(SimulatedTest, AnswersTheDeclaredShapesAfterTheLatency) {
  double seconds = 0;
  HttpReply r = Infer("sim", &seconds);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("name":"y")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("shape":[2,2])"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("data":[0,0,0,0])"), std::string::npos) << r.body;
  EXPECT_GE(seconds, 0.040);
  HttpReply metadata = Fetch(server_->data_port(), "GET", "/v2/models/sim", "", {Bearer(key_)});
  EXPECT_NE(metadata.body.find(R"("platform":"simulated")"), std::string::npos) << metadata.body;
}

TEST_F(SimulatedTest, AThrottledAnswerIs429WithRetryAfter) {
  HttpReply r = Infer("throttled");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.Header("retry-after"), "2");
  EXPECT_NE(r.body.find("simulated: throttled"), std::string::npos) << r.body;
}

TEST_F(SimulatedTest, AFailureIs500) {
  HttpReply r = Infer("failing");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("simulated: the model failed"), std::string::npos) << r.body;
}

TEST_F(SimulatedTest, AnEmpiricalLatencyIsDrawnFromTheSignedHistogram) {
  for (int i = 0; i < 5; ++i) {
    double seconds = 0;
    ASSERT_EQ(Infer("empirical", &seconds).status, 200);
    EXPECT_GE(seconds, 0.040);  // the bucket below 40 ms is empty
  }
}

TEST_F(SimulatedTest, ABadHistogramKeepsItsVersionOfflineAndIsNamed) {
  HttpReply r = Infer("badhistogram");
  EXPECT_NE(r.status, 200) << r.body;
  EXPECT_NE(server_->Log().find("latency_histogram.txt:2: bucket bounds must strictly increase"),
            std::string::npos)
      << server_->Log();
}

}  // namespace
}  // namespace pillar
