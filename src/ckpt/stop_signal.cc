#include "ckpt/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace pillar::ckpt {
namespace {

std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free flag");

void OnSignal(int signal_number) { requested.store(signal_number, std::memory_order_relaxed); }

}  // namespace

void InstallStopSignals() {
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

bool StopRequested() { return requested.load(std::memory_order_relaxed) != 0; }

int StopSignal() { return requested.load(std::memory_order_relaxed); }

}  // namespace pillar::ckpt
