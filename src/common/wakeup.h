// A background thread's sleep between rounds of work: up to an interval, ended early by Notify()
// (work is waiting) or for good by Stop().
//
//   while (wakeup_.Wait(absl::Seconds(1))) Refresh();   // the thread
//   wakeup_.Stop();  thread_.join();                    // the owner, when it ends
//
// It has a mutex of its own on purpose. absl::Mutex sends every unlock of a mutex that a thread
// waits on with a Condition through its slow path, which evaluates the waiter's condition: a
// thread that slept on the mutex of data the request path locks (the key table, the access
// log's buffer) made every request's unlock of it cost 54-79 ns instead of 24.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pillar {

class Wakeup {
 public:
  // Ends the current wait, or the next one if nobody waits now.
  void Notify();
  // Ends every wait, now and later.
  void Stop();
  // Waits until Notify(), Stop() or `timeout`; false once stopped. Takes the notification.
  [[nodiscard]] bool Wait(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pillar
