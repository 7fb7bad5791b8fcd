#include "app/serve_allocator.h"

#include <dlfcn.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace pillar::app {
namespace {

// In the re-executed process's environment only: "unset", or "set:" and what LD_PRELOAD was.
constexpr char kHandOver[] = "PILLAR_SERVE_PRELOAD_BEFORE";

bool TcmallocLoaded() { return dlsym(RTLD_DEFAULT, "tc_version") != nullptr; }

// The subcommand: the first argument that is not a flag (the binary has no global flags but
// --help and --version, which end before any subcommand runs).
bool IsServe(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    return std::string_view(argv[i]) == "serve";
  }
  return false;
}

void RestorePreload(std::string_view before) {
  if (before.substr(0, 4) == "set:") {
    setenv("LD_PRELOAD", std::string(before.substr(4)).c_str(), 1);
  } else {
    unsetenv("LD_PRELOAD");
  }
  unsetenv(kHandOver);
}

}  // namespace

void ServeOnTcmalloc(int argc, char** argv) {
#ifdef PILLAR_TCMALLOC_LIBRARY
  const bool serve = IsServe(argc, argv);
  // The hand-over is believed only where this function set it: a server executed again, by its
  // own user. Anywhere else (another command, a binary run with raised privileges, whose loader
  // ignores LD_PRELOAD but not this variable) it would hand its value to the children as
  // LD_PRELOAD (review helper-129: `pillar health` ran its check command with it).
  const bool secure = getauxval(AT_SECURE) != 0;
  if (const char* before = std::getenv(kHandOver); before != nullptr) {
    if (!serve || secure) {
      unsetenv(kHandOver);
      return;
    }
    // The process this one replaced asked for the library: whatever came of it, once only.
    RestorePreload(before);
    if (!TcmallocLoaded()) {
      std::fprintf(stderr,
                   "pillar: serving on glibc's allocator: the dynamic loader did not load %s\n",
                   PILLAR_TCMALLOC_LIBRARY);
    }
    return;
  }
  if (!serve || secure || TcmallocLoaded()) return;
  // Run through the dynamic loader (`ld.so pillar serve`), /proc/self/exe is the loader, which
  // would take "serve" for the program to load (review helper-129): no interpreter was mapped
  // for this process, and it serves as it is.
  if (getauxval(AT_BASE) == 0) return;
  if (const char* choice = std::getenv("PILLAR_ALLOCATOR");
      choice != nullptr && std::string_view(choice) == "system") {
    return;
  }
  const char* preload = std::getenv("LD_PRELOAD");
  const std::string before = preload != nullptr ? std::string("set:") + preload : "unset";
  std::string with = PILLAR_TCMALLOC_LIBRARY;
  if (preload != nullptr && *preload != '\0') with = with + ":" + preload;
  if (setenv(kHandOver, before.c_str(), 1) != 0 || setenv("LD_PRELOAD", with.c_str(), 1) != 0) {
    RestorePreload(before);
    return;
  }
  execv("/proc/self/exe", argv);
  // Still here: the exec was refused (no /proc, no permission). Serve as this process is.
  const int error = errno;
  RestorePreload(before);
  std::fprintf(stderr, "pillar: serving on glibc's allocator: could not re-execute with %s: %s\n",
               PILLAR_TCMALLOC_LIBRARY, std::strerror(error));
#else
  (void)argc;
  (void)argv;
#endif
}

}  // namespace pillar::app
