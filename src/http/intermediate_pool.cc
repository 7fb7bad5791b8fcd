#include "http/intermediate_pool.h"

#include <algorithm>
#include <iterator>

namespace pillar::http::internal {

void X509StackFree::operator()(STACK_OF(X509) * stack) const { sk_X509_pop_free(stack, X509_free); }

void IntermediatePool::Release::operator()(X509* cert) const { X509_free(cert); }

IntermediatePool::IntermediatePool(size_t capacity) : capacity_(capacity) {}

IntermediatePool::~IntermediatePool() = default;

void IntermediatePool::Remember(STACK_OF(X509) * verified) {
  const int count = verified == nullptr ? 0 : sk_X509_num(verified);
  if (count < 3 || capacity_ == 0) return;
  absl::MutexLock lock(&mu_);
  for (int i = 1; i + 1 < count; ++i) {
    X509* cert = sk_X509_value(verified, i);
    // X509_cmp compares the certificates' cached digests: equal means the same certificate.
    auto same = std::find_if(certs_.begin(), certs_.end(),
                             [cert](const Cert& kept) { return X509_cmp(kept.get(), cert) == 0; });
    if (same != certs_.end()) {
      // Seen again: it moves to the most recent end, so the pool keeps what clients still send.
      std::rotate(same, std::next(same), certs_.end());
      continue;
    }
    if (X509_up_ref(cert) != 1) continue;
    if (certs_.size() == capacity_) certs_.erase(certs_.begin());
    certs_.emplace_back(cert);
  }
}

X509Stack IntermediatePool::With(STACK_OF(X509) * sent) const {
  X509Stack out(sk_X509_new_null());
  if (out == nullptr) return out;
  auto push = [&out](X509* cert) {
    if (X509_up_ref(cert) != 1) return false;
    if (sk_X509_push(out.get(), cert) <= 0) {
      X509_free(cert);
      return false;
    }
    return true;
  };
  for (int i = 0; sent != nullptr && i < sk_X509_num(sent); ++i) {
    if (!push(sk_X509_value(sent, i))) return nullptr;
  }
  absl::MutexLock lock(&mu_);
  for (const Cert& cert : certs_) {
    if (!push(cert.get())) return nullptr;
  }
  return out;
}

size_t IntermediatePool::size() const {
  absl::MutexLock lock(&mu_);
  return certs_.size();
}

}  // namespace pillar::http::internal
