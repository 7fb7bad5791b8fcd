#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace pillar {
namespace {

std::string NameOfThisThread() {
  char name[64] = {};
  EXPECT_EQ(pthread_getname_np(pthread_self(), name, sizeof name), 0);
  return name;
}

TEST(ThreadNameTest, NamesTheCallingThreadAndCutsALongNameAt15Bytes) {
  std::string short_name, long_name;
  std::thread([&] {
    NameThisThread("audit-writer");
    short_name = NameOfThisThread();
    NameThisThread("remote:a-model-with-a-long-name");
    long_name = NameOfThisThread();
  }).join();
  EXPECT_EQ(short_name, "audit-writer");
  EXPECT_EQ(long_name, "remote:a-model-");
}

}  // namespace
}  // namespace pillar
