// Finding and loading one of pillar's own modules: shared objects that hold what needs a heavy
// library (LibTorch, Open MPI and Gloo), so that the binary does not pay for that library's
// loading and static initialisation at every start. A module is looked for at its environment
// variable when set, else beside the running binary, else in ../lib/pillar/ beside it; it
// exports one C function, its entry point.
//
// The entry point returns the module's interface, a class the binary and the module share by
// layout; the loader calls its abi_version() and pillar_version() and refuses a module of
// another build.
//
//   constexpr ModuleSpec kSpec{.file_name = "libpillar_torch.so", ...};
//   PILLAR_ASSIGN_OR_RETURN(TorchModule* torch, LoadModuleOnce<TorchModule>(kSpec));
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pillar {

struct ModuleSpec {
  std::string_view file_name;
  std::string_view env_var;
  std::string_view entry_point;
  std::string_view needed_for;    // "this command", "the MPI and Gloo backends" (for messages)
  std::string_view build_option;  // what builds the module: "-DPILLAR_WITH_TORCH=ON"
  // RTLD_GLOBAL instead of RTLD_LOCAL: for a module whose libraries load plugins of their own
  // that expect to find those libraries' symbols (Open MPI's components).
  bool global = false;
  // What the module must report: the interface's number and the binary's version.
  int abi_version = 0;
  std::string_view pillar_version;
};

// The entry point's address, or FailedPrecondition naming the module and every place it was
// looked for (or the loader's own error when it is there but does not load).
[[nodiscard]] absl::StatusOr<void*> LoadModuleEntry(const ModuleSpec& spec);

// The dynamic loader's `error` for a module that did not load, with a symbol it could not bind
// demangled and the likely cause (a module of another build) named.
std::string ExplainLoadError(std::string_view error);

// The same for the module at `path`, looked for nowhere else.
[[nodiscard]] absl::StatusOr<void*> LoadModuleEntryFrom(const std::string& path,
                                                        const ModuleSpec& spec);

// OK when a module at `where` reporting `abi_version` and `pillar_version` is of this build.
[[nodiscard]] absl::Status CheckModuleBuild(const ModuleSpec& spec, std::string_view where,
                                            int abi_version, std::string_view pillar_version);

// Calls the entry point and checks the interface it returns (`Interface` has abi_version()
// and pillar_version()).
template <typename Interface>
[[nodiscard]] absl::StatusOr<Interface*> OpenModule(absl::StatusOr<void*> entry,
                                                    const ModuleSpec& spec,
                                                    std::string_view where) {
  if (!entry.ok()) return entry.status();
  Interface* module = reinterpret_cast<Interface* (*)()>(*entry)();
  if (module == nullptr) return CheckModuleBuild(spec, where, 0, "none");
  if (absl::Status s =
          CheckModuleBuild(spec, where, module->abi_version(), module->pillar_version());
      !s.ok()) {
    return s;
  }
  return module;
}

// Finds, loads and checks the module once per process: later calls return the same module or
// the same error.
template <typename Interface>
[[nodiscard]] absl::StatusOr<Interface*> LoadModuleOnce(const ModuleSpec& spec) {
  static const absl::StatusOr<Interface*> loaded =
      OpenModule<Interface>(LoadModuleEntry(spec), spec, spec.file_name);
  return loaded;
}

}  // namespace pillar
