// The demo model served end to end through the real binary: the whole held-out set classified
// over HTTP with the accuracy the training script recorded, 64 concurrent clients, dynamic
// batching, metadata, metrics and the access log.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "testing/http_client.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Digit;
using testing::Fetch;
using testing::HttpConnection;
using testing::HttpReply;

// The argmax of each row of the "probabilities" output in a response body.
std::vector<int> Predictions(const std::string& body) {
  std::vector<int> predictions;
  size_t data = body.find("\"data\":[");
  if (data == std::string::npos) return predictions;
  std::istringstream values(body.substr(data + 8, body.find(']', data) - data - 8));
  std::vector<double> row;
  std::string value;
  while (std::getline(values, value, ',')) {
    row.push_back(std::stod(value));
    if (row.size() == 10) {
      predictions.push_back(int(std::max_element(row.begin(), row.end()) - row.begin()));
      row.clear();
    }
  }
  return predictions;
}

int RecordedCorrect(const std::string& model) {
  std::ifstream in(testing::SourceDir() / "models/demo/lineage.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch m;
  std::regex pattern("\"" + model + "\": \\{[^}]*\"heldout_correct\": ([0-9]+)");
  if (!std::regex_search(text, m, pattern)) return -1;
  return std::stoi(m[1]);
}

class ServingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess;
    server_->AddConfig("[server]\nthreads = 2\n");
    key_ = server_->CreateKey("serving");
    ASSERT_TRUE(server_->Start()) << server_->Log();
    heldout_ = new std::vector<Digit>(testing::LoadHeldOut());
    ASSERT_EQ(heldout_->size(), 450u);
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    delete server_;
    delete heldout_;
  }

  static testing::ServerProcess* server_;
  static std::string key_;
  static std::vector<Digit>* heldout_;
};

testing::ServerProcess* ServingTest::server_ = nullptr;
std::string ServingTest::key_;
std::vector<Digit>* ServingTest::heldout_ = nullptr;

TEST_F(ServingTest, ClassifiesTheHeldOutSetWithTheRecordedAccuracy) {
  for (const std::string model : {"digits", "digits-lite"}) {
    HttpConnection connection(server_->data_port());
    int correct = 0;
    for (const Digit& digit : *heldout_) {
      HttpReply r = connection.Request("POST", "/v2/models/" + model + "/infer",
                                       testing::InferBody({&digit}), {Bearer(key_)});
      ASSERT_EQ(r.status, 200) << r.body;
      std::vector<int> p = Predictions(r.body);
      ASSERT_EQ(p.size(), 1u);
      correct += p[0] == digit.label;
    }
    EXPECT_EQ(correct, RecordedCorrect(model)) << model;
  }
}

TEST_F(ServingTest, ABatchedRequestGivesTheSameAnswersAsSingleOnes) {
  std::vector<const Digit*> rows;
  for (size_t i = 0; i < 40; ++i) rows.push_back(&(*heldout_)[i]);
  HttpReply batch = Fetch(server_->data_port(), "POST", "/v2/models/digits/versions/1/infer",
                          testing::InferBody(rows), {Bearer(key_)});
  ASSERT_EQ(batch.status, 200) << batch.body;
  EXPECT_NE(batch.body.find("\"shape\":[40,10]"), std::string::npos);
  std::vector<int> together = Predictions(batch.body);
  ASSERT_EQ(together.size(), 40u);
  for (size_t i = 0; i < rows.size(); ++i) {
    HttpReply one = Fetch(server_->data_port(), "POST", "/v2/models/digits/infer",
                          testing::InferBody({rows[i]}), {Bearer(key_)});
    EXPECT_EQ(Predictions(one.body), std::vector<int>{together[i]}) << i;
  }
}

TEST_F(ServingTest, SixtyFourConcurrentClientsAllGetCorrectAnswers) {
  constexpr int kClients = 64;
  constexpr int kRequestsEach = 25;
  // The single-request answers, to compare against under load.
  std::vector<int> expected;
  {
    HttpConnection c(server_->data_port());
    for (int i = 0; i < kRequestsEach; ++i) {
      expected.push_back(
          Predictions(c.Request("POST", "/v2/models/digits/infer",
                                testing::InferBody({&(*heldout_)[i]}), {Bearer(key_)})
                          .body)[0]);
    }
  }
  std::atomic<int> ok{0}, wrong{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      HttpConnection connection(server_->data_port());
      for (int i = 0; i < kRequestsEach; ++i) {
        int row = (c + i) % kRequestsEach;
        HttpReply r =
            connection.Request("POST", "/v2/models/digits/infer",
                               testing::InferBody({&(*heldout_)[size_t(row)]}), {Bearer(key_)});
        std::vector<int> p = Predictions(r.body);
        if (r.status != 200 || p.size() != 1) {
          ++failed;
        } else if (p[0] != expected[size_t(row)]) {
          ++wrong;
        } else {
          ++ok;
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(ok.load(), kClients * kRequestsEach);
  // Under that load the dynamic batcher must have formed batches of more than one row.
  std::string metrics = Fetch(server_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      metrics, m,
      std::regex(R"re(pillar_batch_size_bucket\{model="digits",version="1",le="1"\} (\d+))re")));
  std::regex_search(
      metrics, m, std::regex(R"re(pillar_batch_size_count\{model="digits",version="1"\} (\d+))re"));
  std::smatch one;
  std::regex_search(
      metrics, one,
      std::regex(R"re(pillar_batch_size_bucket\{model="digits",version="1",le="1"\} (\d+))re"));
  EXPECT_LT(std::stoll(one[1]), std::stoll(m[1])) << "no batch held more than one row";
}

TEST_F(ServingTest, ExpectContinueAndChunkedBodiesAreServed) {
  std::string body = testing::InferBody({&(*heldout_)[0], &(*heldout_)[1]});
  HttpConnection c(server_->data_port());
  // curl sends Expect: 100-continue for bodies over 1 KiB and waits for the interim answer.
  c.SendRaw("POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n" + Bearer(key_) +
            "\r\nExpect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\n\r\n");
  EXPECT_EQ(c.ReadReply().status, 100);
  c.SendRaw(body);
  HttpReply r = c.ReadReply();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Predictions(r.body).size(), 2u);
  // The same body in two chunks.
  size_t half = body.size() / 2;
  auto hex = [](size_t n) {
    std::ostringstream out;
    out << std::hex << n;
    return out.str();
  };
  c.SendRaw("POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n" + Bearer(key_) +
            "\r\nTransfer-Encoding: chunked\r\n\r\n" + hex(half) + "\r\n" + body.substr(0, half) +
            "\r\n" + hex(body.size() - half) + "\r\n" + body.substr(half) + "\r\n0\r\n\r\n");
  r = c.ReadReply();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Predictions(r.body).size(), 2u);
  // The third review's finding: a key sent in the trailers, after the body, was authenticated
  // (a proxy that checks or strips the Authorization header never sees one there).
  HttpConnection trailer(server_->data_port());
  trailer.SendRaw(
      "POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      hex(body.size()) + "\r\n" + body + "\r\n0\r\n" + Bearer(key_) + "\r\n\r\n");
  r = trailer.ReadReply();
  EXPECT_EQ(r.status, 401) << r.body;
}

TEST_F(ServingTest, MetadataFollowsTheProtocol) {
  uint16_t port = server_->data_port();
  HttpReply server = Fetch(port, "GET", "/v2", "", {Bearer(key_)});
  EXPECT_EQ(server.status, 200);
  EXPECT_NE(server.body.find("\"name\":\"pillar\""), std::string::npos);
  HttpReply model = Fetch(port, "GET", "/v2/models/digits", "", {Bearer(key_)});
  EXPECT_EQ(
      model.body,
      R"({"name":"digits","versions":["1"],"platform":"torchscript","inputs":[{"name":"pixels","datatype":"FP32","shape":[-1,64]}],"outputs":[{"name":"probabilities","datatype":"FP32","shape":[-1,10]}]})");
  EXPECT_EQ(Fetch(port, "GET", "/v2/models/digits/versions/1", "", {Bearer(key_)}).status, 200);
  HttpReply ready = Fetch(port, "GET", "/v2/models/digits/ready", "", {Bearer(key_)});
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, R"({"name":"digits","version":"1","ready":true})");
  EXPECT_EQ(Fetch(port, "GET", "/v2/models/digits/versions/1/ready", "", {Bearer(key_)}).status,
            200);
  EXPECT_EQ(Fetch(port, "GET", "/v2/health/ready").body, R"({"ready":true})");
  EXPECT_EQ(Fetch(port, "GET", "/v2/health/live").body, R"({"live":true})");
}

TEST_F(ServingTest, ResponsesCarryTheRequestIdAndTheAccessLogHasIt) {
  std::string body = testing::InferBody({&(*heldout_)[0]});
  body.insert(1, "\"id\":\"abc\",");
  HttpReply r =
      Fetch(server_->data_port(), "POST", "/v2/models/digits/infer", body, {Bearer(key_)});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"id\":\"abc\""), std::string::npos);
  std::string id = r.Header("x-request-id");
  ASSERT_FALSE(id.empty());
  // The log is flushed at least every 500 ms; poll for the line.
  std::string log;
  for (int i = 0; i < 300 && log.find(id) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(server_->dir() / "access.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  size_t at = log.find("\"request_id\":\"" + id + "\"");
  ASSERT_NE(at, std::string::npos);
  std::string line =
      log.substr(log.rfind('\n', at) + 1, log.find('\n', at) - log.rfind('\n', at) - 1);
  EXPECT_NE(line.find("\"status\":200"), std::string::npos) << line;
  EXPECT_NE(line.find("\"model\":\"digits\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"compute_us\":"), std::string::npos) << line;
  EXPECT_EQ(line.find(key_), std::string::npos) << "the access log must not hold the key";
}

// Found by review helper-125: a request that succeeded had its target logged as it came, so a
// key passed in the query (`?api_key=`, a common mistake) or an address sat in the access log.
TEST_F(ServingTest, WhatTheGuardFindsInASucceedingRequestsQueryIsNotLogged) {
  const std::string target = "/v2/models/digits/infer?api_key=" + key_ + "&email=jo@example.org";
  HttpReply r = Fetch(server_->data_port(), "POST", target, testing::InferBody({&(*heldout_)[0]}),
                      {Bearer(key_)});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string id = r.Header("x-request-id");
  std::string log;
  for (int i = 0; i < 300 && log.find(id) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // flushed every 500 ms
    std::ifstream in(server_->dir() / "access.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = log.find("\"request_id\":\"" + id + "\"");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line =
      log.substr(log.rfind('\n', at) + 1, log.find('\n', at) - log.rfind('\n', at) - 1);
  EXPECT_NE(line.find("\"status\":200"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("path":"/v2/models/digits/infer?api_key=<SECRET>&email=<EMAIL_ADDRESS>")"),
            std::string::npos)
      << line;
  EXPECT_EQ(log.find(key_), std::string::npos) << "the access log must not hold the key";
  EXPECT_EQ(log.find("jo@example.org"), std::string::npos) << line;
}

// An answer that does not reach the client whole gets a second access log line under its
// request's id (review helper-113 F4: the line written as the answer was handed over said
// success, and nothing else did). A simulated model whose answer (8,000,000 floats, 16 MB of
// JSON) is more than the kernel takes for a client that reads nothing; the client resets.
TEST(CutAnswerTest, AnAnswerTheClientDidNotTakeGetsASecondAccessLogLine) {
  testing::ServerProcess server;
  testing::WriteSimulatedVersion(server.dir() / "store", "wide", "latency_ms = 0\n", 1);
  {  // its output widened from 2 floats a row
    const std::filesystem::path toml = server.dir() / "store" / "wide" / "1" / "model.toml";
    std::ifstream in(toml);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("shape = [2]");
    ASSERT_NE(at, std::string::npos) << text;
    std::ofstream(toml) << text.replace(at, 11, "shape = [8000000]");
  }
  server.SetStore(server.dir() / "store");
  const std::string key = server.CreateKey("cut");
  ASSERT_TRUE(server.Start()) << server.Log();
  {
    const std::string body =
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})";
    HttpConnection c(server.data_port(), 10000, /*receive_buffer_bytes=*/4096);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(
        c.SendRaw("POST /v2/models/wide/infer HTTP/1.1\r\nHost: x\r\nAuthorization: "
                  "Bearer " +
                  key + "\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body));
    pollfd readable{c.fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 10000), 1);  // the answer is on its way
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::linger reset{1, 0};
    ::setsockopt(c.fd(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    c.Close();
  }
  std::string log;
  for (int i = 0; i < 300 && log.find("\"outcome\":\"cut\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(server.dir() / "access.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto line_at = [&](size_t at) {
    const size_t from = log.rfind('\n', at) + 1;
    return log.substr(from, log.find('\n', at) - from);
  };
  const size_t cut_at = log.find("\"outcome\":\"cut\"");
  ASSERT_NE(cut_at, std::string::npos) << log;
  const std::string cut = line_at(cut_at);
  EXPECT_NE(cut.find("\"status\":200"), std::string::npos) << cut;
  EXPECT_NE(cut.find("\"reason\":\"client_gone\""), std::string::npos) << cut;
  EXPECT_NE(cut.find("bytes undelivered"), std::string::npos) << cut;
  // The same request's first line, written as its answer was handed over.
  const size_t id_at = cut.find("\"request_id\":\"");
  ASSERT_NE(id_at, std::string::npos) << cut;
  const std::string id = cut.substr(id_at, cut.find('"', id_at + 14) + 1 - id_at);
  const size_t first_at = log.find(id);
  ASSERT_LT(first_at, cut_at);
  const std::string first = line_at(first_at);
  EXPECT_NE(first.find("\"outcome\":\"success\""), std::string::npos) << first;
  EXPECT_NE(first.find("\"model\":\"wide\""), std::string::npos) << first;
  EXPECT_EQ(server.Stop(), 0) << server.Log();
}

TEST_F(ServingTest, MetricsCoverRequestsStagesQueueComputeAndProcess) {
  Fetch(server_->data_port(), "POST", "/v2/models/digits/infer",
        testing::InferBody({&(*heldout_)[0]}), {Bearer(key_)});
  HttpReply r = Fetch(server_->admin_port(), "GET", "/metrics", "", {Bearer(key_)});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  for (const char* needle : {
           "pillar_requests_total{operation=\"infer\",model=\"digits\",version=\"1\",outcome="
           "\"success\"}",
           "pillar_request_duration_seconds_bucket{operation=\"infer\",le=\"+Inf\"}",
           "pillar_stage_duration_seconds_count{stage=\"authenticate\"}",
           "pillar_stage_duration_seconds_count{stage=\"decode\"}",
           "pillar_stage_duration_seconds_count{stage=\"execute\"}",
           "pillar_queue_duration_seconds_count{model=\"digits\",version=\"1\"}",
           "pillar_compute_duration_seconds_count{model=\"digits\",version=\"1\"}",
           "pillar_request_overhead_seconds_count",
           "pillar_batch_size_count{model=\"digits\",version=\"1\"}",
           "pillar_inflight_requests",
           "process_cpu_seconds_total",
           "process_resident_memory_bytes",
       }) {
    EXPECT_NE(r.body.find(needle), std::string::npos) << needle;
  }
  HttpReply models = Fetch(server_->admin_port(), "GET", "/admin/v1/models", "", {Bearer(key_)});
  EXPECT_NE(models.body.find(R"({"name":"digits","version":"1","state":"READY"})"),
            std::string::npos)
      << models.body;
}

}  // namespace
}  // namespace pillar
