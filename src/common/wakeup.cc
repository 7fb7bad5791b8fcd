#include "common/wakeup.h"

namespace pillar {

void Wakeup::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

void Wakeup::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

bool Wakeup::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_ || stopped_; };
  mu_.AwaitWithTimeout(absl::Condition(&woken), timeout);
  notified_ = false;
  return !stopped_;
}

}  // namespace pillar
