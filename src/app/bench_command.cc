// `pillar bench collective`: nccl-tests' sweep and output on the backend the run asks for.
// Rank 0 prints; every rank returns the same exit code.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "app/commands.h"
#include "bench/collective_module.h"
#include "bench/collective_options.h"
#include "bench/collective_runner.h"
#include "bench/nccl_tests_report.h"
#include "common/env.h"
#include "common/files.h"
#include "common/strings.h"

namespace pillar::app {
namespace {

int RunBenchCollective(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::fputs(bench::CollectiveUsage().c_str(), stdout);
      return 0;
    }
  }
  absl::StatusOr<bench::CollectiveOptions> options =
      bench::ParseCollectiveArgs(args, std::getenv("NCCL_TESTS_MIN_BW"));
  if (!options.ok()) {
    std::fprintf(stderr, "pillar bench collective: %s\n%s",
                 std::string(options.status().message()).c_str(), bench::CollectiveUsage().c_str());
    return 2;
  }
  if (absl::Status s = bench::CheckFitsInMemory(*options); !s.ok()) {
    std::fprintf(stderr, "pillar bench collective: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<bench::CollectiveModule*> module = bench::LoadCollectiveModule();
  absl::StatusOr<std::unique_ptr<bench::Communicator>> comm =
      module.ok() ? (*module)->Open(*options) : module.status();
  if (!comm.ok()) {
    std::fprintf(stderr, "pillar bench collective: %s\n",
                 std::string(comm.status().message()).c_str());
    return 2;
  }
  bench::Communicator& c = **comm;
  const bool printer = c.rank() == 0;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  absl::StatusOr<std::vector<std::string>> gathered =
      c.Gather(StrCat(c.rank(), " ", getpid(), " ", host));
  if (!gathered.ok()) {
    std::fprintf(stderr, "pillar bench collective: %s\n",
                 std::string(gathered.status().message()).c_str());
    return 2;
  }
  std::vector<bench::RankInfo> ranks;
  for (const std::string& line : *gathered) {
    bench::RankInfo info;
    char name[256] = {};
    if (std::sscanf(line.c_str(), "%d %d %255s", &info.rank, &info.pid, name) == 3) {
      info.host = name;
      info.device = c.Describe();
      ranks.push_back(info);
    }
  }
  if (printer) {
    std::fputs(bench::FormatPreamble(*options, ranks).c_str(), stdout);
    std::fputs(bench::FormatHeader().c_str(), stdout);
    std::fflush(stdout);
  }
  bench::CollectiveRunner runner(c, *options);
  absl::StatusOr<bench::CollectiveSummary> summary =
      runner.Run([&](const bench::CollectiveRow& row) {
        if (!printer) return;
        std::fputs(bench::FormatRow(row).c_str(), stdout);
        std::fflush(stdout);
      });
  if (!summary.ok()) {
    std::fprintf(stderr, "pillar bench collective (rank %d): %s\n", c.rank(),
                 std::string(summary.status().message()).c_str());
    return 2;
  }
  if (printer) {
    std::fputs(bench::FormatFooter(*summary, *options).c_str(), stdout);
    std::fflush(stdout);
    if (!options->json_path.empty()) {
      const std::string json =
          bench::CollectiveJson(*summary, *options, c.Describe(), c.size()) + "\n";
      if (absl::Status s = PublishAtomically(*Env::Default(), options->json_path, json, 0644);
          !s.ok()) {
        std::fprintf(stderr, "pillar bench collective: %s\n", std::string(s.message()).c_str());
        return 2;
      }
    }
  }
  return bench::Passed(*summary, *options) ? 0 : 1;
}

}  // namespace

void AddBenchCommands(CLI::App& cli, Commands& commands) {
  CLI::App* group = cli.add_subcommand("bench", "Cluster benchmarks");
  group->require_subcommand(1);
  CLI::App* collective =
      group->add_subcommand("collective",
                            "nccl-tests compatible collective bandwidth (OP and flags as "
                            "all_reduce_perf; -h lists them)");
  // nccl-tests' flags (-b8, -e 128M, --minbytes=8, ...) are parsed by the benchmark itself.
  collective->prefix_command();
  collective->allow_extras();
  collective->set_help_flag();
  commands.On(collective, [collective] { return RunBenchCollective(collective->remaining()); });
}

}  // namespace pillar::app
