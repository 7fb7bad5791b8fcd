#include "app/commands.h"

#include <cstdio>
#include <string>

#include "common/strings.h"

namespace pillar::app {

int Fail(std::string_view command, const absl::Status& status, int exit_code) {
  // A message may quote what a file or a peer said: printed for a terminal (ForTerminal).
  std::fprintf(stderr, "pillar %s: %s\n", std::string(command).c_str(),
               ForTerminal(std::string(status.message())).c_str());
  return exit_code;
}

}  // namespace pillar::app
