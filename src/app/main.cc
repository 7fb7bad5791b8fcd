// The `pillar` command line: one binary, one subcommand per job. Each command group registers
// its own subcommands and flags (app/commands.h).
#include <CLI/CLI.hpp>

#include "absl/synchronization/mutex.h"
#include "app/commands.h"
#include "app/serve_allocator.h"

#ifndef PILLAR_VERSION
#define PILLAR_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  pillar::app::ServeOnTcmalloc(argc, argv);  // before any thread: it may replace the process
  // Lock-order cycle detection costs a graph lookup per lock; the hot path takes a few locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App cli{"pillar: serve AI models with every control in the request path"};
  cli.set_version_flag("--version", "pillar " PILLAR_VERSION);
  cli.require_subcommand(1);

  pillar::app::Commands commands;
  pillar::app::AddServeCommand(cli, commands);
  pillar::app::AddKeyCommands(cli, commands);
  pillar::app::AddPolicyCommands(cli, commands);
  pillar::app::AddModelCommands(cli, commands);
  pillar::app::AddTrainCommand(cli, commands);
  pillar::app::AddCkptCommands(cli, commands);
  pillar::app::AddAuditCommands(cli, commands);
  pillar::app::AddBenchCommands(cli, commands);
  pillar::app::AddHealthCommand(cli, commands);
  pillar::app::AddBackendsCommand(cli, commands);
  pillar::app::AddGuardCommands(cli, commands);
  pillar::app::AddUsageCommand(cli, commands);

  CLI11_PARSE(cli, argc, argv);
  return commands.RunParsed();
}
