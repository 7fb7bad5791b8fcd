// The hash chain of the audit log: link(n) = SHA-256(link(n-1) || payload(n)), link(-1) being
// 32 zero bytes. One hasher per thread; it keeps its OpenSSL context between records, because
// verification speed is bounded by this call (about 1 million records a second is the goal).
//
//   ChainHasher hasher;
//   Chain next = hasher.Link(previous, payload);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "audit/audit_log_format.h"
#include "common/sha256.h"

namespace pillar::audit {

using Chain = std::array<uint8_t, format::kChainBytes>;

class ChainHasher {
 public:
  Chain Link(const Chain& previous, std::string_view payload);

 private:
  Sha256Hasher hasher_;
};

// 64 lowercase hex digits.
std::string ChainHex(const Chain& chain);
// The same digits appended to `out`: the writer spells one per record into its batch, where a
// string of their own would be one more allocation a record.
void AppendChainHex(std::string& out, const Chain& chain);
// False unless `hex` is exactly 64 lowercase hex digits.
bool ParseChainHex(std::string_view hex, Chain* chain);

}  // namespace pillar::audit
