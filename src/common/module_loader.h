// Finding and loading one of pillar's own modules: shared objects that hold what needs a heavy
// library (LibTorch, Open MPI and Gloo), so that the binary does not pay for that library's
// loading and static initialisation at every start. A module is looked for at its environment
// variable when set, else beside the running binary, else in ../lib/pillar/ beside it; it
// exports one C function, its entry point.
//
//   ModuleSpec spec{.file_name = "libpillar_torch.so", .env_var = "PILLAR_TORCH_MODULE",
//                   .entry_point = "pillar_torch_module_v1", .needed_for = "this command",
//                   .build_option = "PILLAR_WITH_TORCH"};
//   PILLAR_ASSIGN_OR_RETURN(void* entry, LoadModuleEntry(spec));
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pillar {

struct ModuleSpec {
  std::string_view file_name;
  std::string_view env_var;
  std::string_view entry_point;
  std::string_view needed_for;    // "this command", "the MPI and Gloo backends" (for messages)
  std::string_view build_option;  // the CMake option that builds the module
  // RTLD_GLOBAL instead of RTLD_LOCAL: for a module whose libraries load plugins of their own
  // that expect to find those libraries' symbols (Open MPI's components).
  bool global = false;
};

// The entry point's address, or FailedPrecondition naming the module and every place it was
// looked for (or the loader's own error when it is there but does not load).
absl::StatusOr<void*> LoadModuleEntry(const ModuleSpec& spec);

// The same for the module at `path`, looked for nowhere else.
absl::StatusOr<void*> LoadModuleEntryFrom(const std::string& path, const ModuleSpec& spec);

}  // namespace pillar
