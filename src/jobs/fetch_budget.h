// What fetches of finished jobs' results may hold while their answers are sent (review
// helper-133: a principal's small GETs of its own 8 MB result each made the server hold a copy
// until the client read it, outside the in-flight budget of request bytes, and a queue of such
// reads held up every other principal's jobs on the queue's thread). Each principal may have
// max_fetches_per_owner fetches at once, from the lookup to the answer's last byte; the results
// being sent, all principals together, hold at most max_bytes, and one principal at most a
// quarter of it (its first fetch too: review helper-134 had two principals hold the whole of it
// and starve a third); a principal's one result larger than its quarter goes while the results
// being sent, it included, hold at most half of the whole. A result is always let through when
// nothing at all is being sent, so that any result can be fetched however large.
//
//   std::shared_ptr<FetchBudget::Ticket> ticket = budget->Enter(owner);  // null: too many
//   if (budget->Hold(*ticket, result.size()) != FetchBudget::Held::kYes) ...  // 429 or 503
//   response.held = std::move(ticket);  // given back when the answer is written or dropped
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/held_bytes.h"

namespace pillar::jobs {

class FetchBudget : public std::enable_shared_from_this<FetchBudget> {
 public:
  // One fetch in progress; gives back its place and bytes when destroyed (from any thread). Told
  // what its answer's socket has yet to deliver, it gives back what was delivered.
  class Ticket final : public HeldBytes {
   public:
    ~Ticket() override;
    void Undelivered(uint64_t bytes) override;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    friend class FetchBudget;
    Ticket(std::shared_ptr<FetchBudget> budget, std::string owner)
        : budget_(std::move(budget)), owner_(std::move(owner)) {}
    const std::shared_ptr<FetchBudget> budget_;  // outlives the queue, as answers may
    const std::string owner_;
    int64_t bytes_ = 0;  // guarded by budget_->mu_
  };

  static std::shared_ptr<FetchBudget> Create(int64_t max_fetches_per_owner, int64_t max_bytes);

  // A place for one more fetch of `owner`'s; null when it has max_fetches_per_owner already.
  std::shared_ptr<Ticket> Enter(const std::string& owner);
  // Holds `bytes` of a result for `ticket` (added to what it holds), or says why not, holding
  // nothing more: past its principal's quarter, or past the whole.
  enum class Held { kYes, kPastShare, kPastWhole };
  Held Hold(Ticket& ticket, int64_t bytes);

  int64_t bytes_held() const;

 private:
  FetchBudget(int64_t max_fetches_per_owner, int64_t max_bytes)
      : max_fetches_(max_fetches_per_owner), max_bytes_(max_bytes) {}
  void Leave(Ticket& ticket);
  void Shrink(Ticket& ticket, int64_t bytes);

  struct Owner {
    int64_t fetches = 0;
    int64_t bytes = 0;
  };
  const int64_t max_fetches_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pillar::jobs
