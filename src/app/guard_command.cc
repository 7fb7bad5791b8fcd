// `pillar guard scan [FILE|-]`: the guard's recognizers and actions over any text, so users can
// check their own data and logs with the configuration pillar serves with, and a labelled corpus
// can be scored (bench/run_guard.sh). Findings are JSON lines with the type, byte offsets,
// score and action, never the value.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "common/files.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "guard/display_controls.h"
#include "guard/guard_config.h"
#include "guard/screen.h"

namespace pillar::app {
namespace {

// Far beyond any prompt; a file larger than this is scanned in pieces by the caller.
constexpr uintmax_t kMaxInputBytes = uintmax_t(1) << 30;

struct GuardScanOptions {
  std::string input = "-";
  std::string config_path;  // a TOML file with a [guard] table; the defaults when empty
  bool redact = false;
};

[[nodiscard]] absl::StatusOr<std::string> ReadInput(const std::string& input) {
  if (input != "-") return ReadSmallFile(input, kMaxInputBytes);
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) {
    if (text.size() + n > kMaxInputBytes) {
      return absl::InvalidArgumentError("standard input is larger than 1 GiB");
    }
    text.append(buffer, n);
  }
  if (std::ferror(stdin)) return absl::DataLossError("cannot read standard input");
  return text;
}

std::string FindingJson(const guard::ScreenedFinding& s) {
  JsonWriter w(160);
  w.BeginObject();
  w.Key("type");
  w.String(guard::EntityName(s.finding.type));
  w.Key("start");
  w.Int(int64_t(s.finding.begin));
  w.Key("end");
  w.Int(int64_t(s.finding.end));
  w.Key("score");
  w.Double(double(int(s.finding.score * 100 + 0.5)) / 100);
  w.Key("action");
  w.String(guard::ActionName(s.action));
  if (!s.finding.kind.empty()) {
    w.Key("kind");
    w.String(s.finding.kind);
  }
  w.EndObject();
  return std::move(w).Take();
}

int RunGuardScan(const GuardScanOptions& options) {
  absl::StatusOr<guard::GuardConfig> config = options.config_path.empty()
                                                  ? guard::GuardConfig()
                                                  : guard::LoadGuardConfig(options.config_path);
  if (!config.ok()) return Fail("guard scan", config.status(), 2);
  absl::StatusOr<std::string> text = ReadInput(options.input);
  if (!text.ok()) return Fail("guard scan", text.status(), 2);
  if (options.redact && config->strip_answer_controls) {
    // What is printed is shown: without its display controls, as an answer goes out (the
    // findings without --redact are the text's as given, with their offsets).
    *text = guard::WithoutDisplayControls(*text);
  }
  const guard::ScreenResult result = guard::Screen(*text, *config);
  if (options.redact) {
    if (result.blocked) {
      std::fprintf(stderr, "pillar guard scan: blocked: %s\n", result.block_reason.c_str());
      return 1;
    }
    std::fwrite(result.text.data(), 1, result.text.size(), stdout);
    return 0;
  }
  for (const guard::ScreenedFinding& finding : result.findings) {
    std::printf("%s\n", FindingJson(finding).c_str());
  }
  for (const guard::DenyMatch& m : result.denied) {
    std::printf("{\"type\":\"DENY\",\"rule\":\"%s\",\"start\":%zu,\"end\":%zu,\"action\":\"%s\"}\n",
                m.rule->name.c_str(), m.begin, m.end,
                std::string(guard::DenyActionName(m.rule->action)).c_str());
  }
  // The whole text as one message a user wrote (the guard scores each message on its own).
  bool injection = false;
  if (config->injection.enabled) {
    const guard::InjectionScore score = guard::ScoreInjection(*text);
    if (score.score >= config->injection.threshold) {
      injection = true;
      JsonWriter w(160);
      w.BeginObject();
      w.Key("type");
      w.String("PROMPT_INJECTION");
      w.Key("score");
      w.Double(double(int(score.score * 100 + 0.5)) / 100);
      w.Key("action");
      w.String(guard::DenyActionName(config->injection.action));
      w.Key("signals");
      w.BeginArray();
      for (std::string_view signal : score.signals) w.String(signal);
      w.EndArray();
      w.EndObject();
      std::printf("%s\n", std::move(w).Take().c_str());
    }
  }
  return result.findings.empty() && result.denied.empty() && !injection ? 0 : 1;
}

}  // namespace

void AddGuardCommands(CLI::App& cli, Commands& commands) {
  CLI::App* guard = cli.add_subcommand("guard", "Content safety: personal data and secrets");
  guard->require_subcommand(1);
  auto scan = std::make_shared<GuardScanOptions>();
  CLI::App* cmd = guard->add_subcommand(
      "scan",
      "Find personal data and secrets in a text; one JSON line per finding (type, byte offsets, "
      "score, action), never the value. Exit 0 nothing found, 1 found (or blocked), 2 error");
  cmd->add_option("input", scan->input, "The text to scan; '-' (the default) reads standard input");
  cmd->add_option("-c,--config", scan->config_path,
                  "A TOML file whose [guard] table says the actions (docs/guard.md)");
  cmd->add_flag("--redact", scan->redact,
                "Print the text with the redactions applied instead of the findings (and "
                "without its display controls, as answers go out, unless the [guard] table "
                "says answer_controls = \"keep\")");
  commands.On(cmd, [scan] { return RunGuardScan(*scan); });
}

}  // namespace pillar::app
