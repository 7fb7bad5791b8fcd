// `pillar ckpt list|show|verify|restore|prune|export|import|interval`: checkpoints of a run
// directory (docs/checkpoints.md), for people (tables) and scripts (--json).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "app/cli_values.h"
#include "app/commands.h"
#include "ckpt/checkpoint_format.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/interval.h"
#include "ckpt/run_directory.h"
#include "ckpt/torch_save_reader.h"
#include "common/clock.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "torch_module/torch_module.h"

namespace pillar::app {
namespace {

struct CkptOptions {
  std::string run;    // a run directory, or one checkpoint directory
  int64_t step = -1;  // -1: the newest (or the one `run` names)
  bool json = false;
  std::string to;     // restore: the run directory to copy into
  std::string file;   // export / import: the state_dict file
  int keep_last = 3;  // prune
  int64_t keep_every = 0;
  int keep_set_aside = 2;  // prune
  std::string mtbf;        // interval: "24h"
  double cost_s = 0;       // interval: seconds per checkpoint; 0: measured from `run`
};

namespace fs = std::filesystem;

bool IsCheckpointDir(const std::string& path) {
  std::error_code ec;  // not the throwing overload: unreadable is not a checkpoint
  return fs::exists(fs::path(path) / ckpt::format::kManifestFile, ec);
}

// The checkpoint directory `options` names: `run` itself, or a step of the run (the newest when
// none is given).
[[nodiscard]] absl::StatusOr<std::string> CheckpointDir(const CkptOptions& options) {
  if (IsCheckpointDir(options.run)) return options.run;
  ckpt::RunDirectory run(Env::Default(), options.run);
  if (options.step >= 0) return run.StepPath(options.step);
  absl::StatusOr<std::vector<int64_t>> steps = run.Steps();
  if (!steps.ok()) return steps.status();
  if (steps->empty()) return absl::NotFoundError(StrCat("no checkpoints in ", options.run));
  return run.StepPath(steps->back());
}

std::string Bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(n) / double(1ull << 30));
  } else if (n >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(n) / double(1ull << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

// One line of `ckpt list --json`: what a checkpoint is, without its entries (`show --json` prints
// the whole manifest).
void WriteSummaryJson(JsonWriter& w, const ckpt::Manifest& m) {
  w.BeginObject();
  w.Key("step");
  w.Int(m.step);
  w.Key("created");
  w.String(FormatUtcMicros(m.created_us));
  w.Key("bytes");
  w.Uint(m.TotalBytes());
  w.Key("shards");
  w.Uint(m.shards.size());
  w.Key("save_seconds");
  w.Double(m.save_seconds);
  w.Key("snapshot_seconds");
  w.Double(m.snapshot_seconds);
  w.Key("metadata");
  w.BeginObject();
  for (const auto& [k, v] : m.metadata) {
    w.Key(k);
    w.String(v);
  }
  w.EndObject();
  w.EndObject();
}

// Prints what a command did: `text` for people, or {"<key>": value, ...} with --json.
void Report(const CkptOptions& options, const std::string& text,
            const std::vector<std::pair<std::string, std::string>>& fields) {
  if (!options.json) {
    std::printf("%s\n", text.c_str());
    return;
  }
  JsonWriter w;
  w.BeginObject();
  for (const auto& [key, value] : fields) {
    w.Key(key);
    w.String(value);
  }
  w.EndObject();
  std::printf("%s\n", w.str().c_str());
}

int RunCkptList(const CkptOptions& options) {
  ckpt::RunDirectory run(Env::Default(), options.run);
  absl::StatusOr<std::vector<int64_t>> steps = run.Steps();
  if (!steps.ok()) return Fail("ckpt list", steps.status());
  absl::StatusOr<std::optional<int64_t>> latest = run.Latest();
  JsonWriter w;
  if (options.json) w.BeginArray();
  if (!options.json) {
    std::printf("%-16s %-27s %12s %6s %10s %10s  %s\n", "STEP", "CREATED", "SIZE", "SHARDS", "SAVE",
                "STALL", "");
  }
  for (int64_t step : *steps) {
    absl::StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(*Env::Default(), run.StepPath(step));
    const bool is_latest = latest.ok() && latest->has_value() && **latest == step;
    if (options.json) {
      if (m.ok()) {
        WriteSummaryJson(w, *m);
      } else {
        w.BeginObject();
        w.Key("step");
        w.Int(step);
        w.Key("error");
        w.String(ToStd(m.status().message()));
        w.EndObject();
      }
      continue;
    }
    if (!m.ok()) {
      std::printf("%-16s BROKEN: %s\n", ckpt::StepDirName(step).c_str(),
                  std::string(m.status().message()).c_str());
      continue;
    }
    std::printf("%-16s %-27s %12s %6zu %9.3fs %8.3fms  %s\n", ckpt::StepDirName(step).c_str(),
                FormatUtcMicros(m->created_us).c_str(), Bytes(m->TotalBytes()).c_str(),
                m->shards.size(), m->save_seconds, m->snapshot_seconds * 1000,
                is_latest ? "latest" : "");
  }
  if (options.json) {
    w.EndArray();
    std::printf("%s\n", w.str().c_str());
  }
  return 0;
}

int RunCkptShow(const CkptOptions& options) {
  absl::StatusOr<std::string> dir = CheckpointDir(options);
  if (!dir.ok()) return Fail("ckpt show", dir.status());
  absl::StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(*Env::Default(), *dir);
  if (!m.ok()) return Fail("ckpt show", m.status());
  if (absl::Status s = ckpt::CheckStepName(*dir, *m); !s.ok()) {
    std::fprintf(stderr, "pillar ckpt show: warning: %s\n",
                 ForTerminal(std::string(s.message())).c_str());
  }
  if (options.json) {
    // The manifest's own JSON line: every entry with its dtype, shape, shard, offset, checksum.
    const std::string text = m->Encode();
    std::printf("%s\n", text.substr(0, text.find('\n')).c_str());
    return 0;
  }
  std::printf(
      "checkpoint  %s\nstep        %lld\ncreated     %s\nsize        %s in %zu shards\n"
      "save        %.3f s (training stalled %.3f ms)\n",
      dir->c_str(), static_cast<long long>(m->step), FormatUtcMicros(m->created_us).c_str(),
      Bytes(m->TotalBytes()).c_str(), m->shards.size(), m->save_seconds,
      m->snapshot_seconds * 1000);
  // Names, keys and values are the file's: printed for a terminal (review helper-121: escape
  // sequences in an entry's name reached the operator's terminal).
  for (const auto& [k, v] : m->metadata) {
    std::printf("metadata    %s = %s\n", ForTerminal(k).c_str(), ForTerminal(v).c_str());
  }
  std::printf("entries\n");
  for (const ckpt::EntryInfo& e : m->entries) {
    std::string shape;
    for (int64_t d : e.shape) StrAppend(&shape, shape.empty() ? "" : "x", d);
    std::printf("  %-40s %-9s %-16s %12s  shard %u\n", ForTerminal(e.name).c_str(),
                std::string(ckpt::DTypeName(e.dtype)).c_str(), shape.empty() ? "-" : shape.c_str(),
                Bytes(e.bytes).c_str(), e.shard);
  }
  return 0;
}

int RunCkptVerify(const CkptOptions& options) {
  std::vector<std::string> dirs;
  if (IsCheckpointDir(options.run) || options.step >= 0) {
    absl::StatusOr<std::string> dir = CheckpointDir(options);
    if (!dir.ok()) return Fail("ckpt verify", dir.status());
    dirs.push_back(*dir);
  } else {
    ckpt::RunDirectory run(Env::Default(), options.run);
    absl::StatusOr<std::vector<int64_t>> steps = run.Steps();
    if (!steps.ok()) return Fail("ckpt verify", steps.status());
    for (int64_t step : *steps) dirs.push_back(run.StepPath(step));
  }
  int bad = 0;
  JsonWriter w;
  w.BeginArray();
  for (const std::string& dir : dirs) {
    absl::StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(*Env::Default(), dir);
    absl::Status s = m.ok() ? ckpt::CheckStepName(dir, *m) : m.status();
    if (s.ok()) s = ckpt::VerifyCheckpoint(*Env::Default(), dir, *m);
    if (!s.ok()) ++bad;
    if (options.json) {
      w.BeginObject();
      w.Key("checkpoint");
      w.String(dir);
      w.Key("ok");
      w.Bool(s.ok());
      if (!s.ok()) {
        w.Key("error");
        w.String(ToStd(s.message()));
      }
      w.EndObject();
    } else if (s.ok()) {
      std::printf("%s: OK (%s, %zu entries)\n", dir.c_str(), Bytes(m->TotalBytes()).c_str(),
                  m->entries.size());
    } else {
      std::printf("%s: DAMAGED: %s\n", dir.c_str(), ForTerminal(std::string(s.message())).c_str());
    }
  }
  w.EndArray();
  if (options.json) std::printf("%s\n", w.str().c_str());
  return bad == 0 ? 0 : 1;
}

int RunCkptRestore(const CkptOptions& options) {
  if (options.to.empty())
    return Fail("ckpt restore", absl::InvalidArgumentError("--to is required"));
  ckpt::RunDirectory from(Env::Default(), options.run);
  int64_t step = options.step;
  if (step < 0) {
    std::vector<std::string> skipped;
    absl::StatusOr<ckpt::LoadedCheckpoint> latest = from.LoadLatest(&skipped);
    for (const std::string& s : skipped)
      std::fprintf(stderr, "pillar ckpt restore: skipped %s\n", s.c_str());
    if (!latest.ok()) return Fail("ckpt restore", latest.status());
    step = latest->manifest().step;
  }
  // The source's manifest must say the step its directory names (review helper-121: a copy of
  // step 100 at step 300's name was restored as step 300).
  absl::StatusOr<ckpt::Manifest> source = ckpt::ReadManifest(*Env::Default(), from.StepPath(step));
  if (!source.ok()) return Fail("ckpt restore", source.status());
  if (source->step != step) {
    return Fail("ckpt restore",
                absl::DataLossError(StrCat(from.StepPath(step), "/MANIFEST: says step ",
                                           source->step, ", not its directory's")));
  }
  ckpt::RunDirectory to(Env::Default(), options.to);
  if (absl::Status s = to.Prepare(); !s.ok()) return Fail("ckpt restore", s);
  if (Env::Default()->IsLink(to.StepPath(step))) {
    // A link is no copy: the checkpoint would go when what it names goes (review helper-122).
    return Fail("ckpt restore", absl::FailedPreconditionError(StrCat(
                                    to.StepPath(step), " is a symbolic link: move it away first")));
  }
  if (Env::Default()->Exists(to.StepPath(step))) {
    // Taken as restored only when it verifies (review helper-121: an empty directory there was
    // published as restored); anything else there is the user's to move, not ours to replace.
    if (absl::Status s = to.Verify(step); !s.ok()) {
      return Fail("ckpt restore", absl::FailedPreconditionError(
                                      StrCat(to.StepPath(step), " exists and does not verify (",
                                             s.message(), "): move it away first")));
    }
  } else if (absl::Status s =
                 ckpt::CopyCheckpoint(*Env::Default(), from.StepPath(step), to.StepPath(step));
             !s.ok()) {
    return Fail("ckpt restore", s);
  }
  if (absl::Status s = to.PublishLatest(step); !s.ok()) return Fail("ckpt restore", s);
  Report(options, StrCat("restored ", ckpt::StepDirName(step), " to ", options.to, " (verified)"),
         {{"restored", ckpt::StepDirName(step)}, {"to", options.to}});
  return 0;
}

int RunCkptPrune(const CkptOptions& options) {
  ckpt::RunDirectory run(Env::Default(), options.run);
  absl::StatusOr<ckpt::Pruned> removed = run.Prune({.keep_last = options.keep_last,
                                                    .keep_every = options.keep_every,
                                                    .keep_set_aside = options.keep_set_aside});
  if (!removed.ok()) return Fail("ckpt prune", removed.status());
  if (options.json) {
    JsonWriter w;
    w.BeginObject();
    w.Key("removed");
    w.BeginArray();
    for (int64_t step : removed->steps) w.Int(step);
    w.EndArray();
    w.Key("removed_set_aside");
    w.BeginArray();
    for (const std::string& name : removed->set_aside) w.String(name);
    w.EndArray();
    w.Key("not_removed");
    w.BeginArray();
    for (const std::string& why : removed->not_removed) w.String(why);
    w.EndArray();
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
    return removed->not_removed.empty() ? 0 : 1;
  }
  for (int64_t step : removed->steps) {
    std::printf("removed %s\n", ckpt::StepDirName(step).c_str());
  }
  for (const std::string& name : removed->set_aside) {
    std::printf("removed %s\n", name.c_str());  // a name ParseSetAsideName accepted
  }
  for (const std::string& why : removed->not_removed) {
    std::fprintf(stderr, "pillar ckpt prune: %s\n", ForTerminal(why).c_str());
  }
  return removed->not_removed.empty() ? 0 : 1;
}

int RunCkptExport(const CkptOptions& options) {
  absl::StatusOr<torch_module::TorchModule*> torch = torch_module::LoadTorchModule();
  if (!torch.ok()) return Fail("ckpt export", torch.status());
  absl::StatusOr<std::string> dir = CheckpointDir(options);
  if (!dir.ok()) return Fail("ckpt export", dir.status());
  absl::StatusOr<ckpt::LoadedCheckpoint> loaded = ckpt::LoadCheckpoint(*Env::Default(), *dir);
  if (!loaded.ok()) return Fail("ckpt export", loaded.status());
  if (absl::Status s = ckpt::CheckStepName(*dir, loaded->manifest()); !s.ok()) {
    return Fail("ckpt export", s);
  }
  if (absl::Status s = (*torch)->ExportStateDict(*loaded, options.file); !s.ok()) {
    return Fail("ckpt export", s);
  }
  Report(options,
         StrCat("wrote ", options.file, " (", loaded->manifest().entries.size(), " tensors from ",
                *dir, ")"),
         {{"wrote", options.file}, {"from", *dir}});
  return 0;
}

int RunCkptImport(const CkptOptions& options) {
  if (options.step < 0)
    return Fail("ckpt import", absl::InvalidArgumentError("--step is required"));
  absl::StatusOr<ckpt::TorchSaveFile> file = ckpt::ReadTorchSave(options.file);
  if (!file.ok()) return Fail("ckpt import", file.status());
  std::vector<ckpt::EntryView> entries;
  uint64_t total = 0;
  for (const ckpt::TorchSaveTensor& t : file->tensors) {
    entries.push_back({t.name, t.dtype, t.shape, t.data});
    total += t.data.size();
  }
  // The reader holds a storage named by many tensors once, but a checkpoint writes each tensor:
  // without a bound, a 4 MB file naming one 4 MiB tensor 4,000 times would write 16 GB. Tied
  // weights (an embedding shared with the output layer) stay far below this.
  // The size of the bytes that were parsed, not of whatever the path names by now.
  const uint64_t file_bytes = file->file_bytes;
  constexpr uint64_t kMaxWrittenPerFileByte = 4;
  if (total > kMaxWrittenPerFileByte * file_bytes + (1 << 20)) {
    return Fail("ckpt import",
                absl::InvalidArgumentError(
                    StrCat(options.file, ": its tensors would take ", total, " bytes, more than ",
                           kMaxWrittenPerFileByte, " times the file's ", file_bytes,
                           " (many tensors naming the same storage?); refused")));
  }
  ckpt::RunDirectory run(Env::Default(), options.run);
  if (absl::Status s = run.Prepare(); !s.ok()) return Fail("ckpt import", s);
  absl::StatusOr<ckpt::Manifest> m =
      ckpt::WriteCheckpoint(*Env::Default(), run.StepPath(options.step), options.step, entries,
                            {{"imported_from", options.file}}, {});
  if (!m.ok()) return Fail("ckpt import", m.status());
  if (absl::Status s = run.PublishLatest(options.step); !s.ok()) return Fail("ckpt import", s);
  Report(options, StrCat("imported ", entries.size(), " tensors as ", run.StepPath(options.step)),
         {{"imported", options.file}, {"checkpoint", run.StepPath(options.step)}});
  return 0;
}

int RunCkptInterval(const CkptOptions& options) {
  absl::StatusOr<int64_t> mtbf = ParseDurationSeconds(options.mtbf);
  if (!mtbf.ok()) return Fail("ckpt interval", mtbf.status());
  double cost = options.cost_s;
  std::string source = "given";
  if (cost <= 0) {
    // Measured: the mean write time of the run's checkpoints (what a failure-free interval
    // costs when writes block; an upper bound on the stall with asynchronous saves).
    ckpt::RunDirectory run(Env::Default(), options.run);
    absl::StatusOr<std::vector<int64_t>> steps = run.Steps();
    if (!steps.ok()) return Fail("ckpt interval", steps.status());
    double total = 0;
    int count = 0;
    for (int64_t step : *steps) {
      absl::StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(*Env::Default(), run.StepPath(step));
      if (m.ok()) {
        total += m->save_seconds;
        ++count;
      }
    }
    if (count == 0) {
      return Fail("ckpt interval", absl::NotFoundError("no checkpoints to measure; give --cost"));
    }
    cost = total / count;
    source = StrCat("measured over ", count, " checkpoints of ", options.run);
  }
  const double young = ckpt::YoungInterval(cost, double(*mtbf));
  const double daly = ckpt::DalyInterval(cost, double(*mtbf));
  const double overhead = ckpt::ExpectedOverhead(daly, cost, double(*mtbf));
  // A measured cost comes from the manifests, which anyone may have written: a figure that is
  // not finite is refused rather than printed as `inf`, which no JSON reader takes.
  if (!std::isfinite(cost) || !std::isfinite(young) || !std::isfinite(daly) ||
      !std::isfinite(overhead)) {
    return Fail("ckpt interval", absl::InvalidArgumentError(StrCat("the checkpoint cost (", source,
                                                                   ") gives no finite interval")));
  }
  if (options.json) {
    std::printf(
        "{\"cost_seconds\":%.6f,\"mtbf_seconds\":%lld,\"young_seconds\":%.3f,"
        "\"daly_seconds\":%.3f,\"overhead\":%.6f}\n",
        cost, static_cast<long long>(*mtbf), young, daly, overhead);
    return 0;
  }
  std::printf("checkpoint cost  %.3f s (%s)\nMTBF             %lld s\n", cost, source.c_str(),
              static_cast<long long>(*mtbf));
  std::printf("checkpoint every %.0f s (Daly; Young: %.0f s); expected overhead %.2f %%\n", daly,
              young, 100 * overhead);
  return 0;
}

}  // namespace

void AddCkptCommands(CLI::App& cli, Commands& commands) {
  auto ckpt = std::make_shared<CkptOptions>();
  CLI::App* group = cli.add_subcommand("ckpt", "Inspect, verify and move training checkpoints");
  group->require_subcommand(1);
  // Each subcommand names a run (or one checkpoint), takes --step and --json, and runs `run`.
  auto add = [&](const char* name, const char* what, int (*run)(const CkptOptions&)) {
    CLI::App* cmd = group->add_subcommand(name, what);
    cmd->add_option("run", ckpt->run, "A run directory, or one checkpoint directory")->required();
    cmd->add_option("--step", ckpt->step, "A step of the run (default: the newest)");
    cmd->add_flag("--json", ckpt->json, "Machine-readable output");
    commands.On(cmd, [ckpt, run] { return run(*ckpt); });
    return cmd;
  };
  add("list", "The run's checkpoints", RunCkptList);
  add("show", "One checkpoint's manifest", RunCkptShow);
  add("verify", "Check every shard and entry checksum (all checkpoints of a run, or one)",
      RunCkptVerify);
  add("restore", "Copy the newest good (or --step) checkpoint to another run directory",
      RunCkptRestore)
      ->add_option("--to", ckpt->to, "The run directory to restore into")
      ->required();
  CLI::App* prune = add("prune", "Apply a retention policy", RunCkptPrune);
  prune->add_option("--keep-last", ckpt->keep_last, "Keep the newest N")
      ->check(CLI::NonNegativeNumber);
  prune->add_option("--keep-every", ckpt->keep_every, "Also keep steps that are multiples of K")
      ->check(CLI::NonNegativeNumber);
  prune
      ->add_option("--keep-set-aside", ckpt->keep_set_aside,
                   "Keep the newest N checkpoints a trainer set aside as damaged (.broken-*)")
      ->check(CLI::NonNegativeNumber);
  add("export", "Write a checkpoint as a PyTorch state_dict file (torch.load reads it)",
      RunCkptExport)
      ->add_option("--out", ckpt->file, "The .pt file")
      ->required();
  add("import", "Make a checkpoint of a torch.save'd state_dict", RunCkptImport)
      ->add_option("--file", ckpt->file, "The .pt file")
      ->required();
  CLI::App* interval = group->add_subcommand(
      "interval", "Recommend a checkpoint interval (Young/Daly) from the cost and the MTBF");
  interval->add_option("run", ckpt->run, "A run whose checkpoints give the measured cost");
  interval->add_option("--mtbf", ckpt->mtbf, "Mean time between failures, e.g. 24h")->required();
  interval->add_option("--cost", ckpt->cost_s, "Seconds per checkpoint (default: measured)");
  interval->add_flag("--json", ckpt->json, "Machine-readable output");
  commands.On(interval, [ckpt] { return RunCkptInterval(*ckpt); });
}

}  // namespace pillar::app
