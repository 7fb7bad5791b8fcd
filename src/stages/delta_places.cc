#include "stages/delta_places.h"

#include <algorithm>

#include "common/strings.h"
#include "guard/screen.h"
#include "runtime/runner.h"

namespace pillar::stages {

absl::StatusOr<protocol::DeltaField> DeltaPlaces::Place(int64_t choice,
                                                        const protocol::DeltaField& field) {
  protocol::DeltaField placed = field;
  protocol::DeltaField path;  // the members so far, each as placed
  for (protocol::DeltaField::Segment& segment : placed.path) {
    path.path.push_back({segment.key, -1});
    const Form form = segment.element < 0 ? Form::kPlain : segment.bare ? Form::kBare : Form::kList;
    auto [seen, inserted] = forms_.try_emplace({choice, path}, FormSeen{form, -1});
    if (inserted && forms_.size() > max_places_) {
      return runtime::BadGateway("the upstream's stream names more members than the guard checks");
    }
    FormSeen& first = seen->second;
    if (!inserted && first.form == Form::kBare && form == Form::kPlain) {
      segment.element = first.highest;
      segment.bare = true;
    } else if (!inserted &&
               (form != first.form || (form == Form::kBare && segment.element != first.highest))) {
      return runtime::BadGateway(StrCat("the upstream's stream sends the member ",
                                        guard::RedactAll(DeltaWhere(path)), " of choice ", choice,
                                        " as more than one element, or in two forms"));
    } else if (form == Form::kBare) {
      first.highest = segment.element;
    } else if (form == Form::kList) {
      if (segment.element > first.highest + 1) {
        return runtime::BadGateway(StrCat("the upstream's stream sends element ", segment.element,
                                          " of a list of choice ", choice, " before element ",
                                          first.highest + 1));
      }
      first.highest = std::max(first.highest, segment.element);
    }
    path.path.back().element = segment.element;
    path.path.back().bare = segment.bare;
  }
  return placed;
}

std::string DeltaWhere(const protocol::DeltaField& field) {
  std::string where = "delta";
  for (const protocol::DeltaField::Segment& segment : field.path) {
    StrAppend(&where, ".", segment.key.size() <= 64 ? segment.key : Quoted(segment.key, 64));
    if (segment.element >= 0) StrAppend(&where, "[", segment.element, "]");
  }
  return where;
}

}  // namespace pillar::stages
