// pillar's command groups. Each group registers its subcommands and their flags, and runs from
// its own file (serve_command.cc, key_command.cc, ...); main() only lists the groups.
//
//   CLI::App cli{"pillar"};
//   Commands commands;
//   AddKeyCommands(cli, commands);
//   CLI11_PARSE(cli, argc, argv);
//   return commands.RunParsed();
//
// A command returns the process's exit code and prints its own errors.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace pillar::app {

// The subcommands registered, each with what runs it.
class Commands {
 public:
  // `run` runs when `command` is the subcommand parsed; what it returns is the exit code.
  void On(CLI::App* command, std::function<int()> run) {
    commands_.emplace_back(command, std::move(run));
  }
  // The exit code of the subcommand parsed; 2 when none was.
  int RunParsed() const {
    for (const auto& [command, run] : commands_) {
      if (command->parsed()) return run();
    }
    return 2;
  }

 private:
  std::vector<std::pair<CLI::App*, std::function<int()>>> commands_;
};

// How a command reports the error that ends it: prints "pillar <command>: <message>" on stderr
// and returns `exit_code`.
int Fail(std::string_view command, const absl::Status& status, int exit_code = 1);

void AddServeCommand(CLI::App& cli, Commands& commands);
void AddKeyCommands(CLI::App& cli, Commands& commands);
void AddPolicyCommands(CLI::App& cli, Commands& commands);
// keygen, and `model` with sign, verify and show, and the store's subcommands.
void AddModelCommands(CLI::App& cli, Commands& commands);
// model push, list, promote, rollback and history, under `model`.
void AddModelStoreCommands(CLI::App& model, Commands& commands);
void AddTrainCommand(CLI::App& cli, Commands& commands);
void AddCkptCommands(CLI::App& cli, Commands& commands);
void AddAuditCommands(CLI::App& cli, Commands& commands);
void AddBenchCommands(CLI::App& cli, Commands& commands);
void AddHealthCommand(CLI::App& cli, Commands& commands);
void AddBackendsCommand(CLI::App& cli, Commands& commands);
// guard scan.
void AddGuardCommands(CLI::App& cli, Commands& commands);
// usage: tokens from the access log, for chargeback.
void AddUsageCommand(CLI::App& cli, Commands& commands);

}  // namespace pillar::app
