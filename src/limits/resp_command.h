// One Redis command in RESP, the protocol's request form (an array of bulk strings), built
// argument by argument into one string that can be appended to a connection's output as is.
//
//   RespCommand command;
//   command.Add("EVALSHA").Add(sha).Add(int64_t{1}).Add(key);
//   link.Send(command.Take(), ...);
// Binary-safe: an argument may hold any bytes, CR and LF included.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pillar::limits {

class RespCommand {
 public:
  RespCommand() = default;
  RespCommand& Add(std::string_view argument);
  RespCommand& Add(int64_t argument);
  // `count` arguments already in RESP's bulk-string form (what another builder's Add wrote).
  RespCommand& AddEncoded(std::string_view arguments, int64_t count);
  // What Add wrote so far, without the argument count: parts to join into one command later.
  std::string_view encoded() const { return arguments_; }
  int64_t count() const { return count_; }
  // The command: its argument count, then the arguments. Leaves the builder empty.
  [[nodiscard]] std::string Take();

 private:
  std::string arguments_;
  int64_t count_ = 0;
};

}  // namespace pillar::limits
