// The `pillar` command line: one binary, one subcommand per job.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "app/commands.h"

#ifndef PILLAR_VERSION
#define PILLAR_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  // Lock-order cycle detection costs a graph lookup per lock; the hot path takes a few locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App cli{"pillar: serve AI models with every control in the request path"};
  cli.set_version_flag("--version", "pillar " PILLAR_VERSION);
  cli.require_subcommand(1);

  pillar::app::ServeOptions serve;
  CLI::App* serve_cmd =
      cli.add_subcommand("serve", "Run the inference server (data and admin planes)");
  serve_cmd->add_option("-c,--config", serve.config_path, "Configuration file (TOML)");
  serve_cmd->add_option("--ports-file", serve.ports_file,
                        "Write the bound ports here once listening");

  pillar::app::KeyOptions key;
  CLI::App* key_cmd = cli.add_subcommand("key", "Manage API keys");
  key_cmd->require_subcommand(1);
  key_cmd->fallthrough();  // "key create -c FILE" as well as "key -c FILE create"
  key_cmd->add_option("-c,--config", key.config_path, "Configuration file (TOML)");
  key_cmd->add_option("--state", key.state_path, "State database (overrides the config)");
  key_cmd->add_flag("--json", key.json, "Print JSON");
  CLI::App* create = key_cmd->add_subcommand("create", "Create a key; its text is printed once");
  create->add_option("--name", key.name, "What the key is for")->required();
  CLI::App* list = key_cmd->add_subcommand("list", "List keys (never their secrets)");
  CLI::App* revoke = key_cmd->add_subcommand("revoke", "Revoke a key by id");
  revoke->add_option("id", key.id, "Key id (the 12 hex characters after pk_)")->required();

  CLI11_PARSE(cli, argc, argv);

  if (serve_cmd->parsed()) return pillar::app::RunServe(serve);
  if (create->parsed()) return pillar::app::RunKeyCreate(key);
  if (list->parsed()) return pillar::app::RunKeyList(key);
  if (revoke->parsed()) return pillar::app::RunKeyRevoke(key);
  return 2;
}
