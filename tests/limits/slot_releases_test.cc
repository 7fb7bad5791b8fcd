#include "limits/slot_releases.h"

#include <gtest/gtest.h>

namespace pillar::limits {
namespace {

TEST(SlotReleasesTest, LeasesOfOneKeyAreOneZremInOrder) {
  SlotReleases slots;
  EXPECT_TRUE(slots.empty());
  slots.Add("pillar:c:m:a", "lease-1");
  slots.Add("pillar:c:m:b", "lease-1");
  slots.Add("pillar:c:m:a", "lease-2");
  EXPECT_FALSE(slots.empty());
  EXPECT_EQ(slots.leases(), 3u);
  const std::vector<std::string> commands = slots.TakeCommands();
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0],
            "*4\r\n$4\r\nZREM\r\n$12\r\npillar:c:m:a\r\n$7\r\nlease-1\r\n$7\r\nlease-2\r\n");
  EXPECT_EQ(commands[1], "*3\r\n$4\r\nZREM\r\n$12\r\npillar:c:m:b\r\n$7\r\nlease-1\r\n");
  EXPECT_TRUE(slots.empty());
  EXPECT_EQ(slots.leases(), 0u);
  EXPECT_TRUE(slots.TakeCommands().empty());
}

TEST(SlotReleasesTest, KeysAndLeasesAreBinarySafe) {
  SlotReleases slots;
  slots.Add(std::string("k\r\n\0", 4), std::string_view("l\r\n", 3));
  const std::vector<std::string> commands = slots.TakeCommands();
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0], std::string("*3\r\n$4\r\nZREM\r\n$4\r\nk\r\n\0\r\n$3\r\nl\r\n\r\n", 33));
}

}  // namespace
}  // namespace pillar::limits
