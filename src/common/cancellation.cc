#include "common/cancellation.h"

#include <utility>

namespace pillar {

bool Cancellation::OnCancel(absl::AnyInvocable<void() &&> stop) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  stop_ = std::move(stop);
  return true;
}

void Cancellation::Cancel() {
  absl::AnyInvocable<void() &&> stop;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    stop = std::move(stop_);
  }
  if (stop) std::move(stop)();
}

bool Cancellation::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

}  // namespace pillar
