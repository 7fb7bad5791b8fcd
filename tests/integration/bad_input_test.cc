// R-SEC-13: hostile and broken input. Each case gets a precise 4xx with a JSON error, is counted
// in the metrics, and the server keeps serving everything else.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <regex>
#include <thread>
#include <vector>

#include "testing/http_client.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;
using testing::HttpConnection;
using testing::HttpReply;

class BadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess;
    server_->AddConfig(
        "[limits]\nbody_limit_bytes = 65536\nheader_limit_bytes = 4096\nrequest_timeout_ms = 800\n"
        "idle_timeout_ms = 5000\nheader_fields_limit = 50\ninflight_bytes_limit = 200000\n");
    key_ = server_->CreateKey("bad-input");
    ASSERT_TRUE(server_->Start()) << server_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(), 0);
    delete server_;
  }
  void TearDown() override {
    // Whatever the case did, the server still answers a good request.
    std::string pixels = "0";
    for (int i = 1; i < 64; ++i) pixels += ",0";
    HttpReply r = Infer(R"({"inputs":[{"name":"pixels","datatype":"FP32","shape":[1,64],"data":[)" +
                        pixels + "]}]}");
    EXPECT_EQ(r.status, 200) << r.body;
  }

  static HttpReply Infer(const std::string& body,
                         const std::string& path = "/v2/models/digits/infer") {
    return Fetch(server_->data_port(), "POST", path, body,
                 {Bearer(key_), "Content-Type: application/json"});
  }
  static void ExpectError(const HttpReply& r, int status, const std::string& message_part) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.Header("content-type"), "application/json");
    EXPECT_EQ(r.body.rfind("{\"error\":\"", 0), 0u) << r.body;
    EXPECT_NE(r.body.find(message_part), std::string::npos) << r.body;
  }
  static int64_t Metric(const std::string& pattern) {
    std::string text = Fetch(server_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
    std::smatch m;
    if (!std::regex_search(text, m, std::regex(pattern + R"( (\d+))"))) return 0;
    return std::stoll(m[1]);
  }

  static testing::ServerProcess* server_;
  static std::string key_;
};

testing::ServerProcess* BadInputTest::server_ = nullptr;
std::string BadInputTest::key_;

TEST_F(BadInputTest, MalformedJson) {
  ExpectError(Infer("{\"inputs\": [}"), 400, "malformed JSON");
}

TEST_F(BadInputTest, BodyIsNotAnObject) {
  ExpectError(Infer("[1,2,3]"), 400, "must be a JSON object");
}

TEST_F(BadInputTest, MissingInputs) { ExpectError(Infer("{}"), 400, "missing 'inputs'"); }

TEST_F(BadInputTest, MissingInputTensor) {
  ExpectError(Infer(R"({"inputs":[{"name":"other","datatype":"FP32","shape":[1],"data":[1]}]})"),
              400, "unknown input 'other'");
}

TEST_F(BadInputTest, WrongDatatype) {
  std::string data = "1";
  for (int i = 1; i < 64; ++i) data += ",1";
  ExpectError(Infer(R"({"inputs":[{"name":"pixels","datatype":"INT32","shape":[1,64],"data":[)" +
                    data + "]}]}"),
              400, "datatype INT32 does not match the model's FP32");
}

TEST_F(BadInputTest, UnknownDatatype) {
  ExpectError(Infer(R"({"inputs":[{"name":"pixels","datatype":"FP33","shape":[1],"data":[1]}]})"),
              400, "unknown datatype 'FP33'");
}

TEST_F(BadInputTest, WrongShape) {
  ExpectError(
      Infer(R"({"inputs":[{"name":"pixels","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]})"),
      400, "shape [1,3] does not match the model's [-1,64]");
}

TEST_F(BadInputTest, DataDisagreesWithShape) {
  ExpectError(
      Infer(R"({"inputs":[{"name":"pixels","datatype":"FP32","shape":[1,64],"data":[1,2]}]})"), 400,
      "'data' has 2 elements but 'shape' needs 64");
}

TEST_F(BadInputTest, ValueOutOfRange) {
  ExpectError(
      Infer(R"({"inputs":[{"name":"pixels","datatype":"FP32","shape":[1],"data":[1e300]}]})"), 400,
      "out of range for FP32");
}

TEST_F(BadInputTest, BatchLargerThanTheModelAllows) {
  std::string data = "0";
  for (int i = 1; i < 65 * 64; ++i) data += ",0";
  ExpectError(Infer(R"({"inputs":[{"name":"pixels","datatype":"FP32","shape":[65,64],"data":[)" +
                    data + "]}]}"),
              400, "batch of 65 rows is outside [1, 64]");
}

TEST_F(BadInputTest, UnknownModel) {
  ExpectError(Infer("{}", "/v2/models/nope/infer"), 404, "unknown model 'nope'");
}

TEST_F(BadInputTest, UnknownModelNamesDoNotBecomeMetricLabels) {
  Infer("{}", "/v2/models/attacker-chosen-name-1/infer");
  std::string text = Fetch(server_->admin_port(), "GET", "/metrics", "", {Bearer(key_)}).body;
  EXPECT_EQ(text.find("attacker-chosen-name"), std::string::npos);
  EXPECT_NE(
      text.find(
          R"(pillar_requests_total{operation="infer",model="",version="",outcome="not_found"})"),
      std::string::npos);
}

TEST_F(BadInputTest, UnknownVersion) {
  ExpectError(Infer("{}", "/v2/models/digits/versions/7/infer"), 404,
              "unknown version '7' of model 'digits'");
}

TEST_F(BadInputTest, UnknownRouteAndWrongMethod) {
  ExpectError(Fetch(server_->data_port(), "GET", "/v3/anything"), 404, "no route");
  HttpReply r = Fetch(server_->data_port(), "GET", "/v2/models/digits/infer", "", {Bearer(key_)});
  ExpectError(r, 405, "the request's method is not allowed here");
  EXPECT_EQ(r.Header("allow"), "POST");
}

TEST_F(BadInputTest, InvalidUtf8InJson) {
  ExpectError(Infer("{\"id\":\"\xff\xfe\",\"inputs\":[]}"), 400, "malformed JSON");
}

TEST_F(BadInputTest, OversizedBody) {
  const int64_t before =
      Metric(R"(pillar_http_rejected_total\{listener="data",reason="body_too_large"\})");
  ExpectError(Infer(std::string(70000, ' ')), 413, "exceeds 65536 bytes");
  EXPECT_EQ(Metric(R"(pillar_http_rejected_total\{listener="data",reason="body_too_large"\})"),
            before + 1);
}

TEST_F(BadInputTest, OversizedHeader) {
  ExpectError(
      Fetch(server_->data_port(), "GET", "/v2", "", {"X-Filler: " + std::string(5000, 'a')}), 431,
      "header exceeds");
}

TEST_F(BadInputTest, HeaderSplitOneByteIntoEachFieldNameGets431) {
  // Each write completes a field and starts the next: every byte still counts.
  HttpConnection c(server_->data_port());
  c.SendRaw("GET /v2 HTTP/1.1\r\nHost: x\r\nX");
  for (int i = 0; i < 40 && !c.Readable(2); ++i) {
    if (!c.SendRaw("-" + std::string(200, 'a') + ": b\r\nX")) break;
  }
  HttpReply r = c.ReadReply();
  ExpectError(r, 431, "header exceeds 4096 bytes");
  EXPECT_EQ(r.Header("connection"), "close");
}

TEST_F(BadInputTest, TooManyHeaderFields) {
  const int64_t before =
      Metric(R"(pillar_http_rejected_total\{listener="data",reason="too_many_headers"\})");
  std::vector<std::string> fields(60, "a: b");
  ExpectError(Fetch(server_->data_port(), "GET", "/v2", "", fields), 431, "more than 50 fields");
  EXPECT_EQ(Metric(R"(pillar_http_rejected_total\{listener="data",reason="too_many_headers"\})"),
            before + 1);
}

TEST_F(BadInputTest, DeclaredBodiesPastTheInflightBudgetGet503) {
  // Callers the server knows: their bodies are charged as soon as their headers are read.
  const std::string header = "POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n" + Bearer(key_) +
                             "\r\nContent-Length: 60000\r\n\r\n";
  {
    std::vector<std::unique_ptr<HttpConnection>> held;
    for (int i = 0; i < 3; ++i) {
      held.push_back(std::make_unique<HttpConnection>(server_->data_port()));
      held.back()->SendRaw(header);
    }
    for (int i = 0; i < 200 && Metric("pillar_http_inflight_bytes") < 180000; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(Metric("pillar_http_inflight_bytes"), 3 * int64_t(header.size() + 60000));
    HttpConnection refused(server_->data_port());
    refused.SendRaw(header);
    HttpReply r = refused.ReadReply();
    ExpectError(r, 503, "too many request bytes");
    EXPECT_EQ(r.Header("retry-after"), "1");
    EXPECT_EQ(r.Header("connection"), "close");
  }  // the held connections close: their reservations return
  int64_t held = -1;
  for (int i = 0; i < 200 && held != 0; ++i) {
    held = Metric("pillar_http_inflight_bytes");
    if (held != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(held, 0);
}

// A body is held only for a caller the server knows: one without a credential, or with one that
// does not authenticate, is answered 401 as soon as its header is read, nothing of its body
// charged or read, and its connection closed. Before, such callers declaring bodies they never
// sent could keep the in-flight budget full, and every caller's inference got 503.
TEST_F(BadInputTest, AnUnknownCallersBodyIsRefusedUnreadWith401) {
  const int64_t refused_before =
      Metric(R"(pillar_requests_total\{[^}]*outcome="unauthenticated"[^}]*\})");
  const std::string forms[] = {
      "",                                               // no credential
      "Authorization: Bearer pk_nosuchkey.secret\r\n",  // one that authenticates nobody
  };
  std::vector<std::unique_ptr<HttpConnection>> held;
  for (int round = 0; round < 3; ++round) {
    for (const std::string& credential : forms) {
      // More declared bytes than the budget has (200,000), the body never sent.
      auto c = std::make_unique<HttpConnection>(server_->data_port());
      const auto sent = std::chrono::steady_clock::now();
      c->SendRaw("POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n" + credential +
                 "Content-Length: 60000\r\n\r\n");
      HttpReply r = c->ReadReply();
      const auto waited = std::chrono::steady_clock::now() - sent;
      EXPECT_EQ(r.status, 401) << r.body;
      EXPECT_FALSE(r.Header("www-authenticate").empty());
      EXPECT_EQ(r.Header("connection"), "close");
      // At once, not at the request timeout (800 ms) that a body never sent would reach.
      EXPECT_LT(waited, std::chrono::milliseconds(500));
      held.push_back(std::move(c));  // still open on this side while the next ones come
    }
  }
  EXPECT_EQ(Metric("pillar_http_inflight_bytes"), 0);
  EXPECT_EQ(Metric(R"(pillar_requests_total\{[^}]*outcome="unauthenticated"[^}]*\})"),
            refused_before + 6);
  // A client that asks before sending (Expect: 100-continue) is not invited to send it.
  HttpConnection asking(server_->data_port());
  asking.SendRaw(
      "POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
      "Content-Length: 60000\r\n\r\n");
  EXPECT_EQ(asking.ReadReply().status, 401);
  // One that sends its body anyway loses only its connection: the next request is a new one.
  HttpConnection pushing(server_->data_port());
  pushing.SendRaw(
      "POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{}{}{}");
  HttpReply r = pushing.ReadReply();
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(pushing.ReadReply().status, 0);  // closed: nothing of the body read as a request
  // TearDown: a caller with a key is still served.
}

TEST_F(BadInputTest, DuplicateAuthorizationHeader) {
  ExpectError(Fetch(server_->data_port(), "GET", "/v2", "", {Bearer(key_), Bearer(key_)}), 400,
              "duplicate header 'Authorization'");
}

TEST_F(BadInputTest, AnHttp11RequestWithoutHostIsRefusedAndTheConnectionClosed) {
  HttpConnection c(server_->data_port());
  c.SendRaw("GET /v2/health/live HTTP/1.1\r\n\r\n");
  HttpReply r = c.ReadReply();
  ExpectError(r, 400, "an HTTP/1.1 request without a Host header");
  EXPECT_EQ(r.Header("connection"), "close");
}

TEST_F(BadInputTest, DuplicateContentLength) {
  HttpConnection c(server_->data_port());
  c.SendRaw(
      "POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: "
      "2\r\n\r\n{}");
  HttpReply r = c.ReadReply();
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(BadInputTest, GarbageRequestLine) {
  HttpConnection c(server_->data_port());
  c.SendRaw("\x01\x02 not http at all\r\n\r\n");
  ExpectError(c.ReadReply(), 400, "malformed HTTP request");
}

TEST_F(BadInputTest, TruncatedBodyIsCountedAndDropped) {
  const int64_t before =
      Metric(R"(pillar_http_rejected_total\{listener="data",reason="truncated"\})");
  {
    HttpConnection c(server_->data_port());
    c.SendRaw("POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n" + Bearer(key_) +
              "\r\nContent-Length: 100\r\n\r\n{\"inputs\":");
  }  // closes mid-body
  int64_t after = before;
  for (int i = 0; i < 200 && after == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = Metric(R"(pillar_http_rejected_total\{listener="data",reason="truncated"\})");
  }
  EXPECT_EQ(after, before + 1);
}

TEST_F(BadInputTest, SlowLorisGets408WithinTheRequestTimeout) {
  HttpConnection c(server_->data_port());
  auto start = std::chrono::steady_clock::now();
  c.SendRaw("POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n");
  // Trickle header bytes; the server must cut us off after request_timeout_ms (800 ms).
  HttpReply r;
  for (int i = 0; i < 40; ++i) {
    if (!c.SendRaw("X-Slow: a\r\n")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (c.Readable(0)) break;
  }
  r = c.ReadReply();
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 408) << r.body;
  EXPECT_LT(elapsed, std::chrono::seconds(3));
}

TEST_F(BadInputTest, KeepAliveServesManyRequestsOnOneConnection) {
  HttpConnection c(server_->data_port());
  EXPECT_EQ(c.Request("GET", "/v2", "", {Bearer(key_)}).status, 200);
  EXPECT_EQ(c.Request("GET", "/v2", "", {Bearer(key_)}).status, 200);  // keep-alive works
}

TEST_F(BadInputTest, Http10ClosesUnlessAskedToKeepAlive) {
  HttpConnection plain(server_->data_port());
  plain.SendRaw("GET /v2/health/live HTTP/1.0\r\n\r\n");
  HttpReply r = plain.ReadReply();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("connection"), "close");
  HttpConnection kept(server_->data_port());
  kept.SendRaw("GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(kept.ReadReply().Header("connection"), "keep-alive");
  kept.SendRaw("GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(kept.ReadReply().status, 200);
}

TEST_F(BadInputTest, HttpLayerRejectionsAreInTheAccessLog) {
  Fetch(server_->data_port(), "GET", "/no/such/route/for-the-log");
  std::string log;
  for (int i = 0; i < 300 && log.find("for-the-log") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // flushed every 500 ms
    std::ifstream in(server_->dir() / "access.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  size_t at = log.find("\"path\":\"/no/such/route/for-the-log\"");
  ASSERT_NE(at, std::string::npos) << log;
  std::string line =
      log.substr(log.rfind('\n', at) + 1, log.find('\n', at) - log.rfind('\n', at) - 1);
  EXPECT_NE(line.find("\"status\":404"), std::string::npos) << line;
  EXPECT_NE(line.find("\"outcome\":\"rejected\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"reason\":\"no_route\""), std::string::npos) << line;
}

TEST_F(BadInputTest, ARejectedTargetIsRedactedBeforeItIsCut) {
  // Found by review helper-135: the HTTP layer cut a refused request's target (1,024 bytes, and
  // 256 in its error) before it was redacted, and an email cut inside its domain was no longer
  // one: its local part reached the log. Both cuts fall inside the address here.
  const std::string email = "alice.secret.person@example.com";
  for (size_t pad : {size_t(1024 - 30), size_t(256 - 13 - 30)}) {
    const std::string target = "/nope/" + std::string(pad - 6, 'a') + "/" + email;
    Fetch(server_->data_port(), "GET", target);
  }
  // Percent-encoded, which only the path's redaction decodes: the 404's message quoted the
  // target, and its redaction, which decodes nothing, kept the address (found with this test).
  Fetch(server_->data_port(), "GET", "/nope/alice.secret.person%40example.com");
  Fetch(server_->data_port(), "GET", "/no/such/route/redacted-marker");
  std::string log;
  for (int i = 0; i < 300 && log.find("redacted-marker") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // flushed every 500 ms
    std::ifstream in(server_->dir() / "access.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_NE(log.find("redacted-marker"), std::string::npos) << log.substr(0, 500);
  EXPECT_EQ(log.find("alice.secret"), std::string::npos) << log;
  EXPECT_EQ(log.find("secret.person"), std::string::npos) << log;
}

// An email in any part of a routed path (percent-encoded, as a client's library writes it) is
// kept out of the access log, whichever of its fields quotes it: the path, or an error that
// names the model, version or job the path named.
TEST_F(BadInputTest, AnEncodedEmailInARoutedPathIsKeptOutOfTheLog) {
  const std::string email = "bob.private.person%40example.com";
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"POST", "/v2/models/" + email + "/infer"},
      {"GET", "/v2/models/" + email},
      {"GET", "/v2/models/" + email + "/ready"},
      {"POST", "/v2/models/digits/versions/" + email + "/infer"},
      {"GET", "/v2/models/digits/versions/" + email},
      {"GET", "/v2/jobs/" + email},
  };
  for (const auto& [method, path] : requests) {
    Fetch(server_->data_port(), method, path, method == "POST" ? "{}" : "", {Bearer(key_)});
  }
  Fetch(server_->data_port(), "GET", "/no/such/route/email-marker");
  std::string log;
  for (int i = 0; i < 300 && log.find("email-marker") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // flushed every 500 ms
    std::ifstream in(server_->dir() / "access.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_NE(log.find("email-marker"), std::string::npos) << log.substr(0, 500);
  EXPECT_EQ(log.find("private.person"), std::string::npos) << log;
}

// Found by review helper-136: a key sent as the method was logged whole (and a long method
// too); an email escaped twice in a job id, a model or a version was logged once decoded;
// a job id's error cut a spaced card number before its redaction, leaving 12 digits; a long
// model name was logged whole in the error.
TEST_F(BadInputTest, WhatAClientWroteInItsRequestLineIsRedactedThenCutInEveryField) {
  const std::string key_like = "pk_0123456789ab_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq";
  Fetch(server_->data_port(), key_like, "/v2/models/digits/infer", "{}", {Bearer(key_)});
  Fetch(server_->data_port(), std::string(3000, 'M'), "/v2/models/digits/infer", "{}",
        {Bearer(key_)});
  // Escaped (review helper-137: logged as sent).
  Fetch(server_->data_port(), "bob.method.person%40example.com", "/v2/models/digits/infer", "{}",
        {Bearer(key_)});
  Fetch(server_->data_port(), "GET", "/v2/jobs/jo%2540example.org", "", {Bearer(key_)});
  Fetch(server_->data_port(), "POST", "/v2/models/jo%2540example.org/infer", "{}", {Bearer(key_)});
  Fetch(server_->data_port(), "POST", "/v2/models/digits/versions/jo%2540example.org/infer", "{}",
        {Bearer(key_)});
  Fetch(server_->data_port(), "GET",
        "/v2/jobs/" + std::string(47, 'z') + "%204111%201111%201111%201111", "", {Bearer(key_)});
  Fetch(server_->data_port(), "POST", "/v2/models/" + std::string(3800, 'm') + "/infer", "{}",
        {Bearer(key_)});
  Fetch(server_->data_port(), "GET", "/no/such/route/line-marker");
  std::string log;
  for (int i = 0; i < 300 && log.find("line-marker") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // flushed every 500 ms
    std::ifstream in(server_->dir() / "access.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_NE(log.find("line-marker"), std::string::npos) << log.substr(0, 500);
  EXPECT_EQ(log.find("ABCDEFGHIJ"), std::string::npos) << log;
  EXPECT_EQ(log.find("MMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMM"), std::string::npos);  // cut at 32
  EXPECT_EQ(log.find("jo%40"), std::string::npos) << log;
  EXPECT_EQ(log.find("example.org"), std::string::npos) << log;
  EXPECT_EQ(log.find("1111 1111"), std::string::npos) << log;  // not "1111": a time may hold it
  EXPECT_EQ(log.find("method.person"), std::string::npos) << log;
  // Each line within what its cut fields allow: the path 2,048, the model 256, the error 2,048.
  for (size_t start = 0, end; (end = log.find('\n', start)) != std::string::npos; start = end + 1) {
    EXPECT_LT(end - start, size_t(5000)) << log.substr(start, 300);
  }
}

TEST_F(BadInputTest, RejectedRequestsAreCountedByOutcome) {
  const std::string pattern =
      R"(pillar_requests_total\{operation="infer",model="digits",version="1",outcome="invalid"\})";
  const int64_t before = Metric(pattern);
  Infer("{}");
  EXPECT_EQ(Metric(pattern), before + 1);
}

}  // namespace
}  // namespace pillar
