// The concurrency slots to give back in Redis: leases gathered by slot key, sent as one ZREM a
// key (ZREM takes any number of members), so that a loop's turn of releases costs Redis one
// command a key rather than one a request.
//
//   SlotReleases slots;
//   slots.Add("pillar:c:models:digits", "lease-1");
//   slots.Add("pillar:c:models:digits", "lease-2");
//   for (std::string& command : slots.TakeCommands()) link.Send(command, ...);  // one ZREM
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "limits/resp_command.h"

namespace pillar::limits {

class SlotReleases {
 public:
  void Add(std::string key, std::string_view lease);
  bool empty() const { return leases_ == 0; }
  size_t leases() const { return leases_; }
  // One ZREM per key, keys in the order they first came, each with its leases in order. Leaves
  // this empty.
  [[nodiscard]] std::vector<std::string> TakeCommands();

 private:
  struct Slot {
    std::string key;
    RespCommand leases;
  };
  std::vector<Slot> slots_;  // few: a request holds one slot per concurrency limit
  size_t leases_ = 0;
};

}  // namespace pillar::limits
