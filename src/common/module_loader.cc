#include "common/module_loader.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "common/strings.h"

namespace pillar {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Candidates(const ModuleSpec& spec) {
  if (const char* path = std::getenv(std::string(spec.env_var).c_str());
      path != nullptr && *path != '\0') {
    return {path};
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return {(exe.parent_path() / spec.file_name).string(),
          (exe.parent_path().parent_path() / "lib" / "pillar" / spec.file_name).string()};
}

}  // namespace

std::string ExplainLoadError(std::string_view error) {
  // A module binds its Abseil (and whatever else the binary exports to it) to the binary that
  // loads it, so a module of another build fails here, before its version can be asked.
  constexpr std::string_view kUndefined = "undefined symbol: ";
  const size_t at = error.find(kUndefined);
  if (at == std::string_view::npos) return std::string(error);
  std::string_view symbol = error.substr(at + kUndefined.size());
  symbol = symbol.substr(0, symbol.find_first_of(" \t,("));
  std::string readable(symbol);
  int status = 0;
  char* demangled = abi::__cxa_demangle(readable.c_str(), nullptr, nullptr, &status);
  if (status == 0 && demangled != nullptr) readable = demangled;
  std::free(demangled);
  return StrCat(error, " (", readable,
                "): the module was built with another build of pillar or of its libraries; use "
                "the module built with this binary");
}

[[nodiscard]] absl::StatusOr<void*> LoadModuleEntryFrom(const std::string& path,
                                                        const ModuleSpec& spec) {
  // RTLD_NOW: a module that cannot resolve a symbol fails here, with the loader's message, not
  // in the middle of a request. RTLD_LOCAL (unless asked otherwise): the module's copies of
  // pillar's libraries stay its own.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | (spec.global ? RTLD_GLOBAL : RTLD_LOCAL));
  if (handle == nullptr) {
    const char* error = ::dlerror();
    return absl::FailedPreconditionError(
        StrCat("cannot load ", path, ": ", error ? ExplainLoadError(error) : "unknown error"));
  }
  void* entry = ::dlsym(handle, std::string(spec.entry_point).c_str());
  if (entry == nullptr) {
    return absl::FailedPreconditionError(
        StrCat(path, " is not pillar's ", spec.file_name, " (it has no ", spec.entry_point, ")"));
  }
  return entry;  // never closed: what the module made lives until the process ends
}

[[nodiscard]] absl::Status CheckModuleBuild(const ModuleSpec& spec, std::string_view where,
                                            int abi_version, std::string_view pillar_version) {
  if (abi_version == spec.abi_version && pillar_version == spec.pillar_version) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(StrCat(
      where, " is a module of another pillar build (", pillar_version, ", interface ", abi_version,
      "; this pillar is ", spec.pillar_version, ", interface ", spec.abi_version, ")"));
}

[[nodiscard]] absl::StatusOr<void*> LoadModuleEntry(const ModuleSpec& spec) {
  std::string tried;
  for (const std::string& path : Candidates(spec)) {
    if (::access(path.c_str(), F_OK) == 0) return LoadModuleEntryFrom(path, spec);
    tried += (tried.empty() ? "" : " or ") + path;
  }
  return absl::FailedPreconditionError(
      StrCat(spec.needed_for, " needs the module ", spec.file_name, ", and there is none at ",
             tried.empty() ? std::string("any known place") : tried, ": build pillar with ",
             spec.build_option, ", install the module beside the binary, or set ", spec.env_var));
}

}  // namespace pillar
