#include "monitor/access_log.h"

#include <gtest/gtest.h>

#include <fstream>

#include "testing/temp_dir.h"

namespace pillar::monitor {
namespace {

TEST(AccessLogTest, WritesOneJsonObjectPerLineLeavingOutEmptyFields) {
  testing::TempDir dir;
  std::string path = (dir.path() / "access.log").string();
  {
    AccessLog log;
    ASSERT_TRUE(log.Open(path).ok());
    AccessRecord r;
    r.request_id = "id-1";
    r.method = "GET";
    r.path = "/v2";
    r.status = 200;
    r.outcome = "success";
    r.duration_ns = 12500;
    log.Write(r);
    r.request_id = "id-2";
    r.error = "bad \"input\"\n";
    log.Write(r);
  }  // the destructor flushes
  std::ifstream in(path);
  std::string first, second, third;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_FALSE(std::getline(in, third));
  EXPECT_NE(
      first.find(
          R"("request_id":"id-1","method":"GET","path":"/v2","status":200,"outcome":"success","duration_us":12.5)"),
      std::string::npos)
      << first;
  EXPECT_EQ(first.find("error"), std::string::npos);
  EXPECT_EQ(first.find("batch_size"), std::string::npos);
  EXPECT_NE(second.find(R"("error":"bad \"input\"\n")"), std::string::npos) << second;
}

TEST(AccessLogTest, AFullDiskLosesLinesAndSaysSoButNeverStopsTheCaller) {
  AccessLog log;
  ASSERT_TRUE(log.Open("/dev/full").ok());
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    AccessRecord r;
    r.request_id = "x";
    log.Write(r);
    log.Flush();
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("the access log cannot be written"), std::string::npos) << err;
  // Said once per episode, not once per line.
  EXPECT_EQ(err.find("cannot be written"), err.rfind("cannot be written"));
}

TEST(AccessLogTest, UnwritableDestinationIsAnErrorAtOpen) {
  AccessLog log;
  EXPECT_EQ(log.Open("/nonexistent-dir/access.log").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(log.enabled());
}

}  // namespace
}  // namespace pillar::monitor
