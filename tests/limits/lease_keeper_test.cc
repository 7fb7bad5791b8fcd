#include "limits/lease_keeper.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace pillar::limits {
namespace {

using std::chrono::seconds;

TEST(LeaseKeeperTest, LeasesHeldLongEnoughAreDueByKeyAndCountAsRenewed) {
  LeaseKeeper keeper;
  const LeaseKeeper::TimePoint t0{};
  keeper.Hold("old", {"pillar:c:a:m", "pillar:c:b:m"}, t0);
  keeper.Hold("new", {"pillar:c:a:m"}, t0 + seconds(15));
  EXPECT_EQ(keeper.held(), 2u);
  auto due = keeper.Due(t0 + seconds(20), seconds(20));
  std::sort(due.begin(), due.end());
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].first, "pillar:c:a:m");
  EXPECT_EQ(due[0].second, std::vector<std::string>{"old"});
  EXPECT_EQ(due[1].first, "pillar:c:b:m");
  EXPECT_EQ(due[1].second, std::vector<std::string>{"old"});
  // Renewed at 20 s: not due again until 40 s; "new" is due at 35 s.
  due = keeper.Due(t0 + seconds(35), seconds(20));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].second, std::vector<std::string>{"new"});
  EXPECT_EQ(keeper.Due(t0 + seconds(39), seconds(20)).size(), 0u);
}

TEST(LeaseKeeperTest, ADroppedLeaseIsNeverDue) {
  LeaseKeeper keeper;
  const LeaseKeeper::TimePoint t0{};
  keeper.Hold("gone", {"pillar:c:a:m"}, t0);
  keeper.Drop("gone");
  keeper.Drop("never-held");
  EXPECT_EQ(keeper.held(), 0u);
  EXPECT_TRUE(keeper.Due(t0 + seconds(3600), seconds(1)).empty());
}

}  // namespace
}  // namespace pillar::limits
