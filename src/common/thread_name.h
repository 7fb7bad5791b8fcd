// Names the calling thread as `top -H`, `ps -L`, perf, gdb and /proc/PID/task/*/comm show it
// ("loop-1", "audit-writer", "model:digits"), so an operator can tell which of pillar's threads
// takes the CPU. Linux keeps 15 bytes of a name: a longer one is cut there.
//
//   std::thread([this] { NameThisThread("audit-writer"); Run(); });
#pragma once

#include <string_view>

namespace pillar {

void NameThisThread(std::string_view name);

}  // namespace pillar
