#include "limits/lease_keeper.h"

#include "absl/strings/string_view.h"

namespace pillar::limits {

void LeaseKeeper::Hold(std::string lease, std::vector<std::string> keys, TimePoint now) {
  absl::MutexLock lock(&mu_);
  held_.insert_or_assign(std::move(lease), Held{std::move(keys), now});
}

void LeaseKeeper::Drop(std::string_view lease) {
  absl::MutexLock lock(&mu_);
  held_.erase(absl::string_view(lease.data(), lease.size()));
}

std::vector<std::pair<std::string, std::vector<std::string>>> LeaseKeeper::Due(
    TimePoint now, std::chrono::steady_clock::duration age) {
  absl::flat_hash_map<std::string, std::vector<std::string>> by_key;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [lease, held] : held_) {
      if (now - held.renewed < age) continue;
      held.renewed = now;
      for (const std::string& key : held.keys) by_key[key].push_back(lease);
    }
  }
  return {std::make_move_iterator(by_key.begin()), std::make_move_iterator(by_key.end())};
}

size_t LeaseKeeper::held() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

}  // namespace pillar::limits
