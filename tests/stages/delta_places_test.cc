// Where the content guard puts each fragment of a streamed delta (delta_places.h).
#include "stages/delta_places.h"

#include <gtest/gtest.h>

#include "runtime/runner.h"

namespace pillar::stages {
namespace {

using Segment = protocol::DeltaField::Segment;

protocol::DeltaField Arguments(Segment call) {
  return {.path = {std::move(call), {"function", -1}, {"arguments", -1}}};
}

TEST(DeltaPlacesTest, AnElementSentWithoutItsListKeepsItsIndexWhenALaterDeltaDropsIt) {
  DeltaPlaces places(64);
  auto first = places.Place(0, Arguments({"tool_calls", 0, true}));
  ASSERT_TRUE(first.ok()) << first.status();
  // TGI 2.x may leave the index out of later deltas: the same call (review helper-127).
  auto later = places.Place(0, Arguments({"tool_calls", -1}));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(*later, *first);
  // Another choice has its own places.
  EXPECT_TRUE(places.Place(1, Arguments({"tool_calls", -1})).ok());
}

TEST(DeltaPlacesTest, AMemberThatChangesItsFormOrItsIndexHasNoPlace) {
  const Segment bare0{"tool_calls", 0, true}, bare1{"tool_calls", 1, true}, list0{"tool_calls", 0},
      plain{"tool_calls", -1};
  const std::pair<Segment, Segment> refused[] = {
      {bare0, bare1},                  // a second index for an element sent without its list
      {bare0, list0},                  // then in a list
      {list0, bare0}, {plain, bare0},  // a plain object, then one with an index
      {list0, plain},
  };
  for (const auto& [first, then] : refused) {
    DeltaPlaces places(64);
    ASSERT_TRUE(places.Place(0, Arguments(first)).ok());
    const absl::Status status = places.Place(0, Arguments(then)).status();
    EXPECT_TRUE(runtime::IsBadGateway(status)) << status;
    EXPECT_NE(status.message().find("as more than one element, or in two forms"), std::string::npos)
        << status;
  }
}

TEST(DeltaPlacesTest, AListsElementsComeInOrderAndTheMembersRememberedAreBounded) {
  DeltaPlaces places(64);
  EXPECT_TRUE(places.Place(0, Arguments({"tool_calls", 0})).ok());
  EXPECT_TRUE(places.Place(0, Arguments({"tool_calls", 1})).ok());
  const absl::Status skipped = places.Place(0, Arguments({"tool_calls", 3})).status();
  EXPECT_NE(skipped.message().find("sends element 3 of a list of choice 0 before element 2"),
            std::string::npos)
      << skipped;
  DeltaPlaces small(4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(small.Place(0, {.path = {{"m" + std::to_string(i), -1}}}).ok()) << i;
  }
  const absl::Status status = small.Place(0, {.path = {{"m4", -1}}}).status();
  EXPECT_NE(status.message().find("names more members than the guard checks"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace pillar::stages
