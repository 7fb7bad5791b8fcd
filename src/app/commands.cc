#include "app/commands.h"

#include <cstdio>
#include <string>

namespace pillar::app {

int Fail(std::string_view command, const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "pillar %s: %s\n", std::string(command).c_str(),
               std::string(status.message()).c_str());
  return exit_code;
}

}  // namespace pillar::app
