#include "jobs/fetch_budget.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace pillar::jobs {

std::shared_ptr<FetchBudget> FetchBudget::Create(int64_t max_fetches_per_owner, int64_t max_bytes) {
  return std::shared_ptr<FetchBudget>(new FetchBudget(max_fetches_per_owner, max_bytes));
}

FetchBudget::Ticket::~Ticket() { budget_->Leave(*this); }

void FetchBudget::Ticket::Undelivered(uint64_t bytes) {
  budget_->Shrink(*this, int64_t(std::min<uint64_t>(bytes, uint64_t(INT64_MAX))));
}

std::shared_ptr<FetchBudget::Ticket> FetchBudget::Enter(const std::string& owner) {
  {
    absl::MutexLock lock(&mu_);
    Owner& o = owners_[owner];
    if (o.fetches >= max_fetches_) return nullptr;
    ++o.fetches;
  }
  return std::shared_ptr<Ticket>(new Ticket(shared_from_this(), owner));
}

FetchBudget::Held FetchBudget::Hold(Ticket& ticket, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  Owner& o = owners_[ticket.owner_];
  if (bytes_ > 0) {  // with nothing being sent, anything goes
    if (o.bytes + bytes <= max_bytes_ / 4) {
      if (bytes_ + bytes > max_bytes_) return Held::kPastWhole;
    } else if (o.bytes > 0) {
      return Held::kPastShare;  // the principal's own results hold its quarter
    } else if (bytes_ + bytes > max_bytes_ / 2) {
      // A result larger than a quarter goes beside others within half of the whole (review
      // helper-135: it waited for a moment when nothing was sent, which may never come), so that
      // results within a quarter always have the other half.
      return Held::kPastWhole;
    }
  }
  bytes_ += bytes;
  o.bytes += bytes;
  ticket.bytes_ += bytes;
  return Held::kYes;
}

int64_t FetchBudget::bytes_held() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void FetchBudget::Shrink(Ticket& ticket, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes >= ticket.bytes_) return;
  const int64_t delivered = ticket.bytes_ - bytes;
  ticket.bytes_ = bytes;
  bytes_ -= delivered;
  if (auto it = owners_.find(ticket.owner_); it != owners_.end()) it->second.bytes -= delivered;
}

void FetchBudget::Leave(Ticket& ticket) {
  absl::MutexLock lock(&mu_);
  const int64_t bytes = std::exchange(ticket.bytes_, 0);
  bytes_ -= bytes;
  auto it = owners_.find(ticket.owner_);
  if (it == owners_.end()) return;
  it->second.bytes -= bytes;
  if (--it->second.fetches == 0) owners_.erase(it);  // the map holds only owners fetching now
}

}  // namespace pillar::jobs
