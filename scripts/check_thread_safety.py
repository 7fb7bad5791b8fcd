#!/usr/bin/env python3
"""clang's thread-safety analysis over every C++ file of src/ (issue 13, part 6).

The build uses GCC, which has no such analysis; this runs clang -fsyntax-only with
-Wthread-safety -Werror on each file of src/ with the flags compile_commands.json gives it,
so that a member marked ABSL_GUARDED_BY(mu_) read without mu_ held, or a function marked
ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) called without it, fails. Part of the suite (CTest:
thread_safety_check).

src/torch_module/ is left out: LibTorch 1.13's headers do not compile with clang 14 over
libstdc++ 12 (c10::IValue is used before it is complete), so that module's one mutex is
checked by review and the sanitizers only.

Usage: scripts/check_thread_safety.py BUILD_DIR [JOBS]
"""
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# GCC-only flags clang would warn about.
GCC_ONLY = {"-Wno-maybe-uninitialized", "-fno-semantic-interposition"}


def clang_command(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    args = [a for a in args if a != "/usr/bin/ccache"]
    out = ["clang++", "-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta",
           "-Werror=thread-safety", "-Werror=thread-safety-beta", "-Wno-unknown-warning-option"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD") or a in GCC_ONLY or a.startswith("-W"):
            continue
        out.append(a)
    return out


# A planted read of a guarded member without its lock: the analysis must refuse it, or the
# check below proves nothing (a flag lost, an absl without annotations).
PLANTED = """
#include "absl/synchronization/mutex.h"
class Counter {
 public:
  int Read() { return value_; }
 private:
  absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};
int main() { Counter c; return c.Read(); }
"""


def planted_is_refused():
    command = clang_command({"command": "c++ -std=c++20 -c planted.cc"})
    result = subprocess.run(command[:-1] + ["-x", "c++", "-"], input=PLANTED,
                            capture_output=True, text=True)
    return result.returncode != 0 and "requires holding mutex 'mu_'" in result.stderr


def main():
    build = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else os.cpu_count() or 1
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(root, "src") + os.sep
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f)
                   if os.path.abspath(e["file"]).startswith(src)
                   and not os.path.abspath(e["file"]).startswith(src + "torch_module" + os.sep)]
    if not entries:
        print(f"no file of {src} in {build}/compile_commands.json", file=sys.stderr)
        return 2

    if not planted_is_refused():
        print("the planted unguarded read was not refused: the analysis is not running",
              file=sys.stderr)
        return 2

    def run(entry):
        result = subprocess.run(clang_command(entry), cwd=entry["directory"],
                                capture_output=True, text=True)
        return entry["file"], result.returncode, result.stderr

    failed = 0
    with ThreadPoolExecutor(jobs) as pool:
        for file, code, stderr in pool.map(run, entries):
            if code != 0:
                failed += 1
                sys.stderr.write(stderr)
    print(f"{len(entries)} files, {failed} with thread-safety errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
