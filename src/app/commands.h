// pillar's subcommands. Each returns the process exit code and prints its own errors.
#pragma once

#include <string>

namespace pillar::app {

struct ServeOptions {
  std::string config_path;  // empty: defaults
  std::string ports_file;   // where to write the bound ports once listening (tests use port 0)
};
int RunServe(const ServeOptions& options);

struct KeyOptions {
  std::string config_path;
  std::string state_path;  // overrides the config's [state] path
  std::string name;
  std::string id;
  bool json = false;
};
int RunKeyCreate(const KeyOptions& options);
int RunKeyList(const KeyOptions& options);
int RunKeyRevoke(const KeyOptions& options);

}  // namespace pillar::app
