// Where each fragment of a streamed choice's delta goes, for the content guard (guarded_events.cc):
// the place a client puts it, so that the guard holds and screens together what a client joins.
// Each member on a fragment's path keeps the form it first came in for its choice: a list's
// element, an object with an "index" sent without its list (TGI 2.x streams a tool call as
// "tool_calls":{"index":0,...}), or a plain object. Such an object sent later without its
// "index" is the same element (a client reading it as a dict merges the two, and so does one
// placing it by the index it first saw); any other change of form, or a second index for an
// element sent without its list, is refused: a client reading it as a dict would merge what one
// reading it by index keeps apart (review helper-127: an object with an index and then without
// one was held as two texts, and released in the wrong order). A list's elements must first
// come in order of their index: openai-python places an element at its position in the list it
// has, so one sent before its elder would be joined to whatever is there.
//
//   DeltaPlaces places(max_places);
//   absl::StatusOr<protocol::DeltaField> placed = places.Place(choice, field);
//   if (!placed.ok()) ... end the call with placed.status() (a 502)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "protocol/openai_texts.h"

namespace pillar::stages {

class DeltaPlaces {
 public:
  // At most `max_places` members are remembered; an upstream that names more is refused.
  explicit DeltaPlaces(size_t max_places) : max_places_(max_places) {}

  // `field` of choice `choice` as placed; a BadGateway status when it has no place.
  [[nodiscard]] absl::StatusOr<protocol::DeltaField> Place(int64_t choice,
                                                           const protocol::DeltaField& field);

 private:
  enum class Form { kPlain, kBare, kList };
  struct FormSeen {
    Form form;
    int64_t highest;  // a list's highest element, or a bare object's element
  };
  size_t max_places_;
  // Per choice and member (its path, each enclosing element as placed).
  std::map<std::pair<int64_t, protocol::DeltaField>, FormSeen> forms_;
};

// Where a member of a delta is, for messages ("delta.tool_calls[1].function.name"): the upstream
// chose the names, so a long one is not quoted (and messages pass it through RedactAll).
std::string DeltaWhere(const protocol::DeltaField& field);

}  // namespace pillar::stages
