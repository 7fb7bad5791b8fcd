#include "http/router.h"

#include <gtest/gtest.h>

#include "http/message.h"
#include "http/server.h"

namespace pillar::http {
namespace {

Router Make() {
  Router r;
  r.Add({"GET", "/v2/models/{model}", 1, "meta", false});
  r.Add({"POST", "/v2/models/{model}/versions/{version}/infer", 2, "infer", false});
  r.Add({"GET", "/v2/health/live", 3, "live", true});
  return r;
}

TEST(RouterTest, MatchesAndCaptures) {
  Router r = Make();
  RouteResult m = r.Match("POST", "/v2/models/digits/versions/3/infer?x=1");
  ASSERT_EQ(m.kind, RouteResult::Kind::kFound);
  EXPECT_EQ(m.route->id, 2);
  ASSERT_EQ(m.params.size(), 2u);
  EXPECT_EQ(m.params[0], (std::pair<std::string_view, std::string>{"model", "digits"}));
  EXPECT_EQ(m.params[1].second, "3");
}

TEST(RouterTest, DistinguishesNotFoundFromWrongMethod) {
  Router r = Make();
  EXPECT_EQ(r.Match("GET", "/v2/models").kind, RouteResult::Kind::kNotFound);
  EXPECT_EQ(r.Match("GET", "/v2/models/a/b").kind, RouteResult::Kind::kNotFound);
  EXPECT_EQ(r.Match("GET", "/v2/models//").kind, RouteResult::Kind::kNotFound);
  RouteResult m = r.Match("DELETE", "/v2/health/live");
  EXPECT_EQ(m.kind, RouteResult::Kind::kMethodNotAllowed);
  EXPECT_EQ(m.allowed, "GET");
}

TEST(RouterTest, PercentDecodesCapturesButNeverIntoASlash) {
  Router r = Make();
  RouteResult m = r.Match("GET", "/v2/models/my%2Dmodel");
  ASSERT_EQ(m.kind, RouteResult::Kind::kFound);
  EXPECT_EQ(m.params[0].second, "my-model");
  EXPECT_EQ(r.Match("GET", "/v2/models/a%2Fb").kind, RouteResult::Kind::kNotFound);
  EXPECT_EQ(r.Match("GET", "/v2/models/a%2").kind, RouteResult::Kind::kNotFound);
  EXPECT_EQ(r.Match("GET", "/v2/models/a%zz").kind, RouteResult::Kind::kNotFound);
  EXPECT_EQ(r.Match("GET", "/v2/models/a%00").kind, RouteResult::Kind::kNotFound);
}

// Routes are skipped by their number of segments before any is compared: a longer or shorter
// route sharing the prefix never matches, and a 405 lists every method of the path's own routes.
TEST(RouterTest, OnlyRoutesOfThePathsLengthAnswerIt) {
  Router r;
  r.Add({"GET", "/v2/models/{model}/ready", 1, "ready", false});
  r.Add({"GET", "/v2/models/{model}", 2, "meta", false});
  r.Add({"PUT", "/v2/models/{model}", 3, "put", false});
  r.Add({"POST", "/v2/models/{model}/versions/{version}/infer", 4, "infer", false});
  RouteResult m = r.Match("GET", "/v2/models/a");
  ASSERT_EQ(m.kind, RouteResult::Kind::kFound);
  EXPECT_EQ(m.route->id, 2);
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].second, "a");
  m = r.Match("DELETE", "/v2/models/a");
  EXPECT_EQ(m.kind, RouteResult::Kind::kMethodNotAllowed);
  EXPECT_EQ(m.allowed, "GET, PUT");
  m = r.Match("GET", "/v2/models/a/ready");
  ASSERT_EQ(m.kind, RouteResult::Kind::kFound);
  EXPECT_EQ(m.route->id, 1);
  EXPECT_EQ(r.Match("POST", "/v2/models/a/versions/1/infer/x").kind, RouteResult::Kind::kNotFound);
}

TEST(RouterTest, CapturesAsManySegmentsAsThePatternNames) {
  Router r;
  r.Add({"GET", "/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}", 1, "many", false});
  RouteResult m = r.Match("GET", "/1/2/3/4/5/6/7/8/9/10");
  ASSERT_EQ(m.kind, RouteResult::Kind::kFound);
  ASSERT_EQ(m.params.size(), 10u);
  EXPECT_EQ(m.params[9], (std::pair<std::string_view, std::string>{"j", "10"}));
}

TEST(LoopbackTest, RecognisesLoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.8.9.10"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackAddress("::"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("not an address"));
}

TEST(PreferTest, FindsRespondAsyncAmongPreferences) {
  EXPECT_TRUE(PrefersRespondAsync("respond-async"));
  EXPECT_TRUE(PrefersRespondAsync("Respond-Async"));
  EXPECT_TRUE(PrefersRespondAsync("wait=10, respond-async"));
  EXPECT_TRUE(PrefersRespondAsync(" respond-async ; foo=bar"));
  EXPECT_TRUE(PrefersRespondAsync("return=minimal,respond-async=1"));
  EXPECT_FALSE(PrefersRespondAsync(""));
  EXPECT_FALSE(PrefersRespondAsync("return=minimal"));
  EXPECT_FALSE(PrefersRespondAsync("respond-asynchronously"));
  EXPECT_FALSE(PrefersRespondAsync("wait=respond-async"));
}

}  // namespace
}  // namespace pillar::http
