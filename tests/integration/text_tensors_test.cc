// BYTES tensors (text) on the inference routes through real processes on loopback: decoded,
// served by a simulated model that echoes them and by a remote one in front of it, batched, and
// screened by the guard in both directions like a language model's prompts and answers.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/http_client.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;
using testing::HttpReply;

// A simulated model of text: its BYTES output says its BYTES input back.
std::string EchoToml(const std::string& top = "") {
  return top + R"(max_batch_size = 8
[[input]]
name = "text"
datatype = "BYTES"
shape = [-1]
[[output]]
name = "said"
datatype = "BYTES"
shape = [-1]
[access]
tenant = "demo"
)";
}

void WriteVersion(const std::filesystem::path& store, const std::string& model,
                  const std::string& toml) {
  std::filesystem::create_directories(store / model / "1");
  std::ofstream(store / model / "1" / "model.toml") << toml;
}

// An infer body of one row of `texts` (already JSON-escaped).
std::string Texts(const std::vector<std::string>& texts) {
  std::string data;
  for (const std::string& t : texts) data += (data.empty() ? "\"" : ",\"") + t + "\"";
  return R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1,)" +
         std::to_string(texts.size()) + R"(],"data":[)" + data + "]}]}";
}

class TextTensorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    upstream_ = new testing::ServerProcess;
    const std::filesystem::path up_store = upstream_->dir() / "store";
    WriteVersion(up_store, "echo",
                 EchoToml("platform = \"simulated\"\n") +
                     "[batching]\nmax_queue_delay_us = 20000\n[simulated]\nlatency_ms = 1\n");
    upstream_->SetStore(up_store);
    const std::string token = upstream_->CreateKey("gateway");
    upstream_key_ = token;
    ASSERT_TRUE(upstream_->Start()) << upstream_->Log();

    gateway_ = new testing::ServerProcess;
    const std::filesystem::path credentials = gateway_->dir() / "upstream.token";
    std::ofstream(credentials) << token << "\n";
    std::filesystem::permissions(
        credentials, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    const std::filesystem::path store = gateway_->dir() / "store";
    const std::string simulated = EchoToml("platform = \"simulated\"\n") + "[simulated]\n";
    WriteVersion(store, "echo", simulated);
    WriteVersion(store, "echo-open", simulated);
    WriteVersion(
        store, "remote-open",
        EchoToml("platform = \"remote\"\n") +
            "[remote]\nendpoints = [\"http://127.0.0.1:" + std::to_string(upstream_->data_port()) +
            "\"]\ncredentials_file = \"" + credentials.string() + "\"\nmodel = \"echo\"\n");
    // Cards blocked, the rest the defaults (personal data redacted with its tag, secrets
    // blocked); the -open models let inputs through unscreened, so that answers carry values.
    gateway_->AddConfig(
        "[guard]\n[guard.entities.CREDIT_CARD]\naction = \"block\"\n"
        "[guard.models.echo-open]\nprompts = false\n[guard.models.remote-open]\nprompts = false\n");
    gateway_->SetStore(store);
    key_ = gateway_->CreateKey("client");
    ASSERT_TRUE(gateway_->Start()) << gateway_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(gateway_->Stop(), 0) << gateway_->Log();
    EXPECT_EQ(upstream_->Stop(), 0) << upstream_->Log();
    delete gateway_;
    delete upstream_;
  }

  static HttpReply Infer(const std::string& model, const std::string& body,
                         testing::ServerProcess* server = gateway_) {
    return Fetch(
        server->data_port(), "POST", "/v2/models/" + model + "/infer", body,
        {"Content-Type: application/json", Bearer(server == gateway_ ? key_ : upstream_key_)});
  }

  static testing::ServerProcess* upstream_;
  static testing::ServerProcess* gateway_;
  static std::string key_;
  static std::string upstream_key_;
};

testing::ServerProcess* TextTensorsTest::upstream_ = nullptr;
testing::ServerProcess* TextTensorsTest::gateway_ = nullptr;
std::string TextTensorsTest::key_;
std::string TextTensorsTest::upstream_key_;

TEST_F(TextTensorsTest, InputsAreRedactedBeforeTheModelSeesThem) {
  HttpReply r = Infer("echo", Texts({"hello", "mail zq.bytes@example.org now", "ol\\u00e1"}));
  ASSERT_EQ(r.status, 200) << r.body;
  // The echo says what the model was sent.
  EXPECT_NE(r.body.find(R"("name":"said","datatype":"BYTES","shape":[1,3],)"
                        R"("data":["hello","mail <EMAIL_ADDRESS> now","olá"])"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(r.body.find("zq.bytes"), std::string::npos) << r.body;
}

TEST_F(TextTensorsTest, ABlockedInputIs400NamingTheTypeAndTheElementNeverTheValue) {
  HttpReply r = Infer("echo", Texts({"fine", "card 4111 1111 1111 1111 please"}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("CREDIT_CARD at bytes 5-24 of element 1 of input 'text'"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(r.body.find("4111"), std::string::npos) << r.body;
}

TEST_F(TextTensorsTest, AnswersAreScreenedWhereverTheModelRuns) {
  for (const char* model : {"echo-open", "remote-open"}) {
    HttpReply r = Infer(model, Texts({"call +1 415 555 2671 today"}));
    ASSERT_EQ(r.status, 200) << model << ": " << r.body;
    EXPECT_NE(r.body.find(R"("data":["call <PHONE_NUMBER> today"])"), std::string::npos)
        << model << ": " << r.body;
    r = Infer(model, Texts({"ok", "the key AKIAIOSFODNN7EXAMPLE"}));
    EXPECT_EQ(r.status, 403) << model << ": " << r.body;
    EXPECT_NE(r.body.find("answer was blocked by the content guard: SECRET at bytes 8-28 of "
                          "element 1 of output 'said'"),
              std::string::npos)
        << model << ": " << r.body;
    EXPECT_EQ(r.body.find("AKIA"), std::string::npos) << model << ": " << r.body;
  }
}

TEST_F(TextTensorsTest, DecisionsAreCountedAndAuditedWithoutTheText) {
  ASSERT_EQ(Infer("echo", Texts({"write to zq.audit@example.org"})).status, 200);
  HttpReply metrics = Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)});
  EXPECT_NE(
      metrics.body.find(
          R"(pillar_guard_findings_total{direction="prompt",type="EMAIL_ADDRESS",action="redact"})"),
      std::string::npos);
  std::ifstream in(gateway_->audit_log());
  const std::string audit((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(audit.find("prompt EMAIL_ADDRESS redact"), std::string::npos);
  EXPECT_EQ(audit.find("zq.audit"), std::string::npos);
}

TEST_F(TextTensorsTest, BatchedRequestsEachGetTheirOwnTextsBack) {
  // The upstream batches for 20 ms: concurrent requests of one or two rows, of texts of different
  // lengths, share batches, and each must get its own rows back (split by elements, not bytes).
  constexpr int kCalls = 8;
  auto batches = [] {
    HttpReply metrics =
        Fetch(upstream_->admin_port(), "GET", "/metrics", "", {Bearer(upstream_key_)});
    const size_t at = metrics.body.find("pillar_batch_size_count");
    return at == std::string::npos ? -1
                                   : std::stoi(metrics.body.substr(metrics.body.find(' ', at)));
  };
  const int batches_before = batches();
  auto rows = [](int i) {
    std::vector<std::string> texts;
    for (int j = 0; j <= i % 2; ++j) texts.push_back(std::string(size_t(i * 7 + j), 'a' + char(i)));
    return texts;
  };
  std::vector<HttpReply> replies(kCalls);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([i, &replies, &rows] {
      std::string data;
      for (const std::string& t : rows(i)) data += (data.empty() ? "\"" : ",\"") + t + "\"";
      replies[size_t(i)] = Infer("echo",
                                 R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[)" +
                                     std::to_string(i % 2 + 1) + R"(,1],"data":[)" + data + "]}]}",
                                 upstream_);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kCalls; ++i) {
    std::string data;
    for (const std::string& t : rows(i)) data += (data.empty() ? "\"" : ",\"") + t + "\"";
    ASSERT_EQ(replies[size_t(i)].status, 200) << replies[size_t(i)].body;
    EXPECT_NE(replies[size_t(i)].body.find("\"data\":[" + data + "]"), std::string::npos)
        << replies[size_t(i)].body;
  }
  // Some batch held more than one request (8 requests, 12 rows, in fewer batches than 8).
  ASSERT_GE(batches_before, 0);
  EXPECT_LT(batches() - batches_before, kCalls);
}

TEST_F(TextTensorsTest, TextWhereNumbersAreDeclaredIsRefusedAndTheOtherWayRound) {
  HttpReply r = Infer("echo", R"({"inputs":[{"name":"text","datatype":"FP32","shape":[1,1],)"
                              R"("data":[1]}]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("datatype FP32 does not match the model's BYTES"), std::string::npos)
      << r.body;
  r = Infer("echo", R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1,1],"data":[1]}]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("is not a string for datatype BYTES"), std::string::npos) << r.body;
}

// Seeded values that exist nowhere else, sent in BYTES tensors every way a client can (screened,
// blocked, answered back, as a job, refused before the guard), then looked for in every file
// the gateway wrote, its log and its metrics, and in the replies: none may hold one.
TEST_F(TextTensorsTest, NothingSensitiveIsWrittenAnywhere) {
  const std::vector<std::string> seeded = {"zq.tensor.51c@example.org", "4539148803436467",
                                           "AKIAZQTENSORS7C2XYZQ", "+1 415 555 2671"};
  const std::vector<std::string> texts = {"mail zq.tensor.51c@example.org",
                                          "key AKIAZQTENSORS7C2XYZQ", "card 4539148803436467",
                                          "call +1 415 555 2671"};
  std::vector<HttpReply> replies;
  for (const char* model : {"echo", "echo-open", "remote-open"}) {
    for (const std::string& text : texts) replies.push_back(Infer(model, Texts({"x", text})));
  }
  // As a job: its request and result are kept, sealed.
  HttpReply job = Fetch(gateway_->data_port(), "POST", "/v2/models/echo-open/infer",
                        Texts({"mail zq.tensor.51c@example.org"}),
                        {"Content-Type: application/json", "Prefer: respond-async", Bearer(key_)});
  EXPECT_EQ(job.status, 202) << job.body;
  // Refused before the guard: a value where a number belongs, in a tensor's name, and in data
  // that does not fill the shape.
  replies.push_back(Infer("echo", R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1,2],)"
                                  R"("data":["zq.tensor.51c@example.org"]}]})"));
  replies.push_back(Infer("echo", R"({"inputs":[{"name":"AKIAZQTENSORS7C2XYZQ","datatype":"BYTES",)"
                                  R"("shape":[1,1],"data":["x"]}]})"));
  replies.push_back(Infer("echo", R"({"inputs":[{"name":"text","datatype":"FP32","shape":[1,1],)"
                                  R"("data":["4539148803436467"]}]})"));
  for (const HttpReply& r : replies) {
    for (const std::string& value : seeded) {
      EXPECT_EQ(r.body.find(value), std::string::npos) << r.status << " " << r.body;
    }
  }
  if (const std::string location = job.headers["location"]; !location.empty()) {
    for (int i = 0; i < 100; ++i) {
      HttpReply done = Fetch(gateway_->data_port(), "GET", location, "", {Bearer(key_)});
      if (done.status != 202) {
        EXPECT_EQ(done.status, 200) << done.body;
        EXPECT_NE(done.body.find("mail <EMAIL_ADDRESS>"), std::string::npos) << done.body;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // The access log and audit log are written in batches: give them time to land.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  HttpReply metrics = Fetch(gateway_->admin_port(), "GET", "/metrics", "", {Bearer(key_)});
  std::vector<std::pair<std::string, std::string>> written = testing::FilesUnder(gateway_->dir());
  written.emplace_back("gateway log", gateway_->Log());
  written.emplace_back("gateway metrics", metrics.body);
  for (const std::string& found : testing::SeededValuesWritten(written, seeded)) {
    ADD_FAILURE() << found;
  }
}

}  // namespace
}  // namespace pillar
