// `pillar usage`: language models' tokens added up from the access log, for chargeback, by
// tenant, model, principal and day, as CSV or JSON. The access log is the record: every
// charged call's line holds its tokens (the model's usage, or pillar's estimate of the prompt
// when the model reported none; an answer the guard withheld, or a call cut by its deadline, is
// charged too), its tenant and principal, and its time; a call a fallback answered counts for
// the fallback's model.
//
//   pillar usage -c pillar.toml --since 2026-12-01 --by tenant,model
//   pillar usage --log access.log --log access.log.1 --since 7d --format json
#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "app/commands.h"
#include "app/config.h"
#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::app {
namespace {

struct UsageOptions {
  std::string config_path;
  std::vector<std::string> logs;
  std::string since;
  std::string until;
  std::string by = "tenant,model";
  std::string format = "csv";
};

struct Totals {
  int64_t requests = 0;
  int64_t prompt = 0;
  int64_t completion = 0;
};

// A time: RFC 3339 ("2026-12-01T00:00:00Z"), a day ("2026-12-01", UTC), or an age before now
// ("36h", "7d").
[[nodiscard]] absl::StatusOr<int64_t> ParseWhen(const std::string& text, int64_t now_us) {
  absl::Time t;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &error) ||
      absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &t, &error)) {
    return absl::ToUnixMicros(t);
  }
  absl::Duration age;
  if (!text.empty() && text.back() == 'd' && text.size() <= 6) {
    int days = 0;
    if (absl::SimpleAtoi(text.substr(0, text.size() - 1), &days) && days >= 0) {
      return now_us - int64_t(days) * 86'400'000'000;
    }
  } else if (absl::ParseDuration(text, &age) && age >= absl::ZeroDuration()) {
    return now_us - absl::ToInt64Microseconds(age);
  }
  return absl::InvalidArgumentError(
      StrCat("'", text.substr(0, 64), "' is not a time (2026-12-01, RFC 3339, or 36h, 7d)"));
}

// A CSV field: quoted when it must be, and never read as a formula by a spreadsheet (a tenant
// name comes from a key or a JWT claim, which anyone holding one chose).
std::string CsvField(std::string_view value) {
  std::string out;
  if (!value.empty() && std::string_view("=+-@\t\r").find(value[0]) != std::string_view::npos) {
    out.push_back('\'');
  }
  out.append(value);
  if (out.find_first_of(",\"\n\r") == std::string::npos) return out;
  std::string quoted = "\"";
  for (char c : out) {
    if (c == '"') quoted.push_back('"');
    quoted.push_back(c);
  }
  quoted.push_back('"');
  return quoted;
}

// The value of one grouping key of a record.
std::string KeyOf(std::string_view key, simdjson::dom::object record, int64_t ts_us) {
  if (key == "day") {
    return absl::FormatTime("%Y-%m-%d", absl::FromUnixMicros(ts_us), absl::UTCTimeZone());
  }
  std::string_view value;
  // A call a fallback answered is the fallback's ("<model>/<version>"): it did the work.
  if (key == "model" && record["fallback"].get(value) == simdjson::SUCCESS && !value.empty()) {
    return std::string(value.substr(0, value.find('/')));
  }
  if (record[key].get(value) != simdjson::SUCCESS) return "";
  return std::string(value);
}

struct Scan {
  std::map<std::vector<std::string>, Totals> groups;
  int64_t skipped = 0;  // lines that are not access records
};

[[nodiscard]] absl::Status ReadLog(const std::string& path, const std::vector<std::string>& by,
                                   int64_t since_us, int64_t until_us, Scan& scan) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read the access log ", path));
  simdjson::dom::parser parser;
  std::string line;
  while (std::getline(in, line)) {
    simdjson::dom::element root;
    simdjson::dom::object record;
    if (line.size() > (1 << 20) ||
        parser.parse(line.data(), line.size()).get(root) != simdjson::SUCCESS ||
        root.get(record) != simdjson::SUCCESS) {
      ++scan.skipped;
      continue;
    }
    int64_t ts_us = 0, prompt = 0, completion = 0;
    if (record["ts_us"].get(ts_us) != simdjson::SUCCESS) {
      ++scan.skipped;
      continue;
    }
    if (record["prompt_tokens"].get(prompt) != simdjson::SUCCESS) continue;  // not an LLM call
    if (ts_us < since_us || ts_us >= until_us || prompt < 0) continue;
    if (record["completion_tokens"].get(completion) != simdjson::SUCCESS || completion < 0) {
      completion = 0;
    }
    std::vector<std::string> key;
    for (const std::string& k : by) key.push_back(KeyOf(k, record, ts_us));
    // A count far beyond any real one is a tampered line, not a total to overflow.
    constexpr int64_t kMaxCount = int64_t(1) << 40;
    if (prompt > kMaxCount || completion > kMaxCount) {
      ++scan.skipped;
      continue;
    }
    Totals& t = scan.groups[key];
    ++t.requests;
    t.prompt = std::min(t.prompt + prompt, INT64_MAX / 2);
    t.completion = std::min(t.completion + completion, INT64_MAX / 2);
  }
  if (in.bad()) return absl::DataLossError(StrCat("error reading ", path));
  return absl::OkStatus();
}

void Print(const Scan& scan, const std::vector<std::string>& by, bool json) {
  if (json) {
    JsonWriter w(256);
    w.BeginArray();
    for (const auto& [key, t] : scan.groups) {
      w.BeginObject();
      for (size_t i = 0; i < by.size(); ++i) {
        w.Key(by[i]);
        w.String(key[i]);
      }
      w.Key("requests");
      w.Int(t.requests);
      w.Key("prompt_tokens");
      w.Int(t.prompt);
      w.Key("completion_tokens");
      w.Int(t.completion);
      w.Key("total_tokens");
      w.Int(t.prompt + t.completion);
      w.EndObject();
    }
    w.EndArray();
    std::printf("%s\n", w.str().c_str());
    return;
  }
  std::string out;
  for (const std::string& k : by) StrAppend(&out, k, ",");
  out += "requests,prompt_tokens,completion_tokens,total_tokens\n";
  for (const auto& [key, t] : scan.groups) {
    for (const std::string& value : key) StrAppend(&out, CsvField(value), ",");
    StrAppend(&out, t.requests, ",", t.prompt, ",", t.completion, ",", t.prompt + t.completion,
              "\n");
  }
  std::fputs(out.c_str(), stdout);
}

int RunUsage(const UsageOptions& options) {
  std::vector<std::string> by;
  for (absl::string_view k : absl::StrSplit(options.by, ',', absl::SkipEmpty())) {
    if (k != "tenant" && k != "model" && k != "principal" && k != "day") {
      return Fail("usage",
                  absl::InvalidArgumentError(
                      "--by takes tenant, model, principal and day, comma-separated"),
                  2);
    }
    by.emplace_back(k);
  }
  if (options.format != "csv" && options.format != "json") {
    return Fail("usage", absl::InvalidArgumentError("--format is csv or json"), 2);
  }
  std::vector<std::string> logs = options.logs;
  if (logs.empty()) {
    absl::StatusOr<Config> config = LoadConfig(options.config_path);
    if (!config.ok()) return Fail("usage", config.status(), 2);
    if (config->access_log.empty() || config->access_log == "-") {
      return Fail("usage",
                  absl::FailedPreconditionError(
                      "the access log goes to standard output ([logging] access_log): name "
                      "its files with --log"),
                  2);
    }
    logs.push_back(config->access_log);
  }
  const int64_t now_us = absl::ToUnixMicros(absl::Now());
  int64_t since_us = 0, until_us = INT64_MAX;
  for (auto [text, out] : {std::pair{&options.since, &since_us}, {&options.until, &until_us}}) {
    if (text->empty()) continue;
    absl::StatusOr<int64_t> when = ParseWhen(*text, now_us);
    if (!when.ok()) return Fail("usage", when.status(), 2);
    *out = *when;
  }
  Scan scan;
  for (const std::string& log : logs) {
    if (absl::Status read = ReadLog(log, by, since_us, until_us, scan); !read.ok()) {
      return Fail("usage", read, 1);
    }
  }
  if (scan.skipped > 0) {
    std::fprintf(stderr, "pillar usage: skipped %lld lines that are not access records\n",
                 static_cast<long long>(scan.skipped));
  }
  Print(scan, by, options.format == "json");
  return 0;
}

}  // namespace

void AddUsageCommand(CLI::App& cli, Commands& commands) {
  auto options = std::make_shared<UsageOptions>();
  CLI::App* cmd = cli.add_subcommand(
      "usage",
      "Language models' tokens from the access log, added up for chargeback (CSV or JSON)");
  cmd->add_option("-c,--config", options->config_path,
                  "pillar.toml, whose [logging] access_log is read");
  cmd->add_option("--log", options->logs, "An access log file to read (repeat for rotated ones)");
  cmd->add_option("--since", options->since, "From (2026-12-01, RFC 3339, or an age: 36h, 7d)");
  cmd->add_option("--until", options->until, "Before (the same forms)");
  cmd->add_option("--by", options->by,
                  "Group by tenant, model, principal, day (comma-separated; tenant,model)");
  cmd->add_option("--format", options->format, "csv (the default) or json");
  commands.On(cmd, [options] { return RunUsage(*options); });
}

}  // namespace pillar::app
