#include "limits/resp_command.h"

#include <charconv>

#include "common/strings.h"

namespace pillar::limits {

RespCommand& RespCommand::Add(std::string_view argument) {
  StrAppend(&arguments_, "$", argument.size(), "\r\n", argument, "\r\n");
  ++count_;
  return *this;
}

RespCommand& RespCommand::Add(int64_t argument) {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, argument);
  return Add(std::string_view(digits, size_t(end - digits)));
}

RespCommand& RespCommand::AddEncoded(std::string_view arguments, int64_t count) {
  arguments_.append(arguments);
  count_ += count;
  return *this;
}

std::string RespCommand::Take() {
  std::string command = StrCat("*", count_, "\r\n");
  command += arguments_;
  arguments_.clear();
  count_ = 0;
  return command;
}

}  // namespace pillar::limits
