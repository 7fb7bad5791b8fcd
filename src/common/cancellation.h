// Lets whoever waits for a piece of work tell whoever does it to stop: the HTTP layer when a
// client goes away before its answer (http::ResponseSink::OnClientGone), a runner by ending the
// call it runs for that client.
//
//   auto cancellation = std::make_shared<Cancellation>();
//   if (!cancellation->OnCancel([weak] { ... stop the call ... })) { /* already cancelled */ }
//   cancellation->Cancel();   // from any thread: runs the stop once
// Thread-safe. The stop runs outside the object's lock, on the thread that calls Cancel(), so it
// may take the worker's own lock; OnCancel never runs it, so a worker may call OnCancel under
// that lock.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace pillar {

class Cancellation {
 public:
  // Keeps `stop` for Cancel() (in place of an earlier one); false, and `stop` dropped, when
  // Cancel() came first.
  [[nodiscard]] bool OnCancel(absl::AnyInvocable<void() &&> stop);
  // Runs the stop kept, once; later calls, and OnCancel after it, find the work cancelled.
  void Cancel();
  bool cancelled() const;

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::AnyInvocable<void() &&> stop_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pillar
