#include "monitor/access_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/strings.h"
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

TEST(AccessLogTest, LinesFromManyThreadsAllReachTheFileEachThreadsInOrder) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "access.log").string();
  {
    AccessLog log;
    ASSERT_TRUE(log.Open(path).ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&log, t] {
        for (int i = 0; i < 20000; ++i) log.Write(StrCat("{\"t\":", t, ",\"i\":", i, "}"));
      });
    }
    for (std::thread& thread : threads) thread.join();
  }  // written out when destroyed
  std::ifstream in(path);
  std::vector<int> next(4, 0);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "{\"t\":%d,\"i\":%d}", &t, &i), 2) << line;
    ASSERT_TRUE(t >= 0 && t < 4);
    EXPECT_EQ(i, next[size_t(t)]);  // each thread's lines in the order it wrote them
    next[size_t(t)] = i + 1;
    ++lines;
  }
  EXPECT_EQ(lines, 80000);
}

TEST(AccessLogTest, AStalledDestinationNeverBlocksTheCallerAndLinesPastTheBoundAreCounted) {
  // A pipe nobody reads: the log's thread blocks in its write once the pipe is full.
  testing::TempDir dir;
  const std::string path = (dir.path() / "stalled").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  ::testing::internal::CaptureStderr();
  std::thread drain;
  {
    AccessLog log;
    ASSERT_TRUE(log.Open(path).ok());
    const std::string line(1000, 'x');
    const absl::Time start = absl::Now();
    // 24 MB: past what the log can hold (a buffer being written and one filling, at most 8 MiB
    // each, and the pipe's 64 KiB).
    for (int i = 0; i < 24000; ++i) log.Write(line);
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // appended or dropped, never waited on
    // Drained, the log writes what it kept and says what it lost.
    drain = std::thread([reader] {
      ::fcntl(reader, F_SETFL, 0);
      char buffer[65536];
      while (::read(reader, buffer, sizeof buffer) > 0) {
      }
    });
    log.Write(line);
    log.Flush();
  }  // closes its end of the pipe: the drain reads to the end
  drain.join();
  ::close(reader);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("not written fast enough; lines are lost"), std::string::npos) << err;
  EXPECT_NE(err.find("lines were lost"), std::string::npos) << err;
}

TEST(AccessLogTest, UnwritableDestinationIsAnErrorAtOpen) {
  AccessLog log;
  EXPECT_EQ(log.Open("/nonexistent-dir/access.log").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(log.enabled());
}

}  // namespace
}  // namespace pillar::monitor
