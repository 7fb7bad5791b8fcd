#include "limits/slot_releases.h"

#include <algorithm>
#include <utility>

namespace pillar::limits {

void SlotReleases::Add(std::string key, std::string_view lease) {
  auto slot =
      std::find_if(slots_.begin(), slots_.end(), [&key](const Slot& s) { return s.key == key; });
  if (slot == slots_.end()) slot = slots_.insert(slots_.end(), Slot{std::move(key), {}});
  slot->leases.Add(lease);
  ++leases_;
}

std::vector<std::string> SlotReleases::TakeCommands() {
  std::vector<std::string> commands;
  commands.reserve(slots_.size());
  for (Slot& slot : slots_) {
    RespCommand command;
    command.Add("ZREM").Add(slot.key).AddEncoded(slot.leases.encoded(), slot.leases.count());
    commands.push_back(command.Take());
  }
  slots_.clear();
  leases_ = 0;
  return commands;
}

}  // namespace pillar::limits
