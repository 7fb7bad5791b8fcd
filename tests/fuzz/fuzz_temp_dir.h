// A directory of the fuzzer process's own under the temp directory, removed at exit: for
// fuzzers whose target reads files (a model directory, an audit log, aliases.json).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace pillar::fuzz {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& what) {
    path = std::filesystem::temp_directory_path() /
           ("pillar-" + what + "-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace pillar::fuzz
