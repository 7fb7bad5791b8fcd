#include "app/serve_allocator.h"

#include <dlfcn.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
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
// --help and --version, which end before any subcommand runs). Asked for help or the version
// anywhere, the command only prints: not served, so not executed again.
bool IsServe(int argc, char** argv) {
  bool serve = false, subcommand_seen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--version") return false;
    if (arg.starts_with('-') || subcommand_seen) continue;  // an empty argument has no [0]
    subcommand_seen = true;
    serve = arg == "serve";
  }
  return serve;
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
  // And only with the LD_PRELOAD it set beside it, which starts with the library: a server
  // started with the variable its caller copied from another's environment (where it shows)
  // would otherwise run without tcmalloc and take the caller's LD_PRELOAD for the old one
  // (review helper-130).
  const bool secure = getauxval(AT_SECURE) != 0;
  const char* preload_now = std::getenv("LD_PRELOAD");
  const bool ours = preload_now != nullptr &&
                    std::string_view(preload_now).substr(0, std::strlen(PILLAR_TCMALLOC_LIBRARY)) ==
                        PILLAR_TCMALLOC_LIBRARY;
  const char* before = std::getenv(kHandOver);
  if (before != nullptr && serve && !secure && ours) {
    // The process this one replaced asked for the library: whatever came of it, once only.
    RestorePreload(before);
    // The kernel named the process after the path executed, "exe": named again as the binary,
    // for ps, top and pkill (review helper-130).
    const std::string_view program = argv[0];
    const size_t slash = program.rfind('/');
    const std::string name(
        program.substr(slash == std::string_view::npos ? 0 : slash + 1).substr(0, 15));
    prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
    if (!TcmallocLoaded()) {
      std::fprintf(stderr,
                   "pillar: serving on glibc's allocator: the dynamic loader did not load %s\n",
                   PILLAR_TCMALLOC_LIBRARY);
    }
    return;
  }
  if (before != nullptr) unsetenv(kHandOver);  // not set by this function: dropped
  if (!serve || secure || TcmallocLoaded()) return;
  // Run through the dynamic loader (`ld.so pillar serve`), /proc/self/exe is the loader, which
  // would take "serve" for the program to load (review helper-129): no interpreter was mapped
  // for this process, and it serves as it is.
  if (getauxval(AT_BASE) == 0) return;
  if (const char* choice = std::getenv("PILLAR_ALLOCATOR");
      choice != nullptr && std::string_view(choice) == "system") {
    return;
  }
  const std::string handed =
      preload_now != nullptr ? std::string("set:") + preload_now : std::string("unset");
  std::string with = PILLAR_TCMALLOC_LIBRARY;
  if (preload_now != nullptr && *preload_now != '\0') with = with + ":" + preload_now;
  if (setenv(kHandOver, handed.c_str(), 1) != 0 || setenv("LD_PRELOAD", with.c_str(), 1) != 0) {
    RestorePreload(handed);
    return;
  }
  execv("/proc/self/exe", argv);
  // Still here: the exec was refused (no /proc, no permission). Serve as this process is.
  const int error = errno;
  RestorePreload(handed);
  std::fprintf(stderr, "pillar: serving on glibc's allocator: could not re-execute with %s: %s\n",
               PILLAR_TCMALLOC_LIBRARY, std::strerror(error));
#else
  (void)argc;
  (void)argv;
#endif
}

}  // namespace pillar::app
