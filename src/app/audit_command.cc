// `pillar audit verify|anchor|tail|export`: checking the audit chain (against an anchor kept
// off the host, when given), taking such an anchor, and reading the chain out, from a file or
// from PostgreSQL.
#include <unistd.h>

#include <cstdio>
#include <deque>

#include "absl/time/clock.h"
#include "app/cli_values.h"
#include "app/commands.h"
#include "app/config.h"
#include "audit/audit_log_format.h"
#include "audit/audit_record.h"
#include "audit/audit_verifier.h"
#include "audit/file_audit_store.h"
#include "audit/postgres_audit_store.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/strings.h"

namespace pillar::app {
namespace {

struct AuditOptions {
  std::string config_path;
  std::string file;               // overrides [audit] file
  std::string postgres;           // overrides [audit] postgres, and reads the chains there
  std::string instance;           // postgres: the chain (verify: default all of them)
  std::vector<std::string> keys;  // overrides [audit] public_keys
  int lines = 20;                 // tail
  bool follow = false;            // tail
  std::string since;              // export: RFC 3339 time, or an age such as "24h"
  // verify: what is known from off the chain's host, so that records cut off the end together
  // with the checkpoint kept beside it are found (formats/audit-log.md, "Anchors").
  std::string anchor;       // a file holding an anchor line, or COUNT:HEAD itself; empty: none
  int64_t min_records = 0;  // the chain must hold at least this many records
};

// Where the chain is: the options over the configuration.
struct Where {
  Config config;
  bool postgres = false;
  std::string instance;
};

[[nodiscard]] absl::StatusOr<Where> Locate(const AuditOptions& options) {
  absl::StatusOr<Config> config = LoadConfig(options.config_path);
  if (!config.ok()) return config.status();
  Where where{.config = std::move(*config), .postgres = false, .instance = options.instance};
  audit::AuditConfig& audit = where.config.audit;
  if (!options.file.empty()) audit.file = options.file;
  if (!options.postgres.empty()) audit.postgres = options.postgres;
  where.postgres =
      !options.postgres.empty() ||
      (options.file.empty() && audit.backend == audit::AuditConfig::Backend::kPostgres);
  if (!options.keys.empty()) audit.public_keys = options.keys;
  if (where.postgres && where.instance.empty()) where.instance = audit.instance;
  return where;
}

// Each record's payload, in order, from `*position` on (0: the start; then what the previous
// call left there: a byte offset in a file, a sequence number in PostgreSQL), until `fn` returns
// false. `*position` is left just past the last record read, so following a log reads only
// what is new. A line that is not a record is skipped with a warning (`verify` says more).
[[nodiscard]] absl::Status ForEachPayload(const Where& where, uint64_t* position,
                                          const std::function<bool(std::string_view)>& fn) {
  if (where.postgres) {
    if (where.instance.empty()) {
      return absl::InvalidArgumentError("--instance names the chain to read");
    }
    return audit::ReadPostgresChain(
        where.config.audit.postgres, where.instance,
        [&](std::string_view payload, std::string_view, uint64_t seq) {
          *position = seq + 1;
          return fn(payload);
        },
        *position);
  }
  absl::StatusOr<uint64_t> torn = audit::ReadAuditFile(
      where.config.audit.file,
      [&](std::string_view text, uint64_t offset) {
        *position = offset + text.size() + 1;
        audit::RecordLine line;
        if (!audit::SplitRecordLine(text, &line)) {
          std::fprintf(stderr, "pillar audit: skipping a line that is not a record at byte %llu\n",
                       static_cast<unsigned long long>(offset));
          return true;
        }
        return fn(line.payload);
      },
      *position);
  return torn.status();
}

void PrintLine(std::string_view payload) {
  std::fwrite(payload.data(), 1, payload.size(), stdout);
  std::fputc('\n', stdout);
}

// The "time" member of a payload (fixed width, so it compares as text); empty if none.
std::string_view TimeOf(std::string_view payload) {
  static constexpr std::string_view kTime = "\"time\":\"";
  const size_t at = payload.find(kTime);
  if (at == std::string_view::npos) return {};
  const size_t start = at + kTime.size();
  const size_t end = payload.find('"', start);
  return end == std::string_view::npos ? std::string_view() : payload.substr(start, end - start);
}

// Whether `value` is written as an anchor rather than a file's name: a checkpoint's payload, or
// a (signed) number and a colon, as COUNT:HEAD begins.
bool ShapedLikeAnAnchor(std::string_view value) {
  if (!value.empty() && value.front() == '{') return true;
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) return false;
  std::string_view count = value.substr(0, colon);
  if (!count.empty() && (count.front() == '-' || count.front() == '+')) count.remove_prefix(1);
  return !count.empty() && count.find_first_not_of("0123456789") == std::string_view::npos;
}

// The anchor `--anchor` names: the anchor itself (COUNT:HEAD), or a file holding its line.
[[nodiscard]] absl::StatusOr<audit::Anchor> LoadAnchor(const std::string& value) {
  absl::StatusOr<audit::Anchor> inline_anchor = audit::ParseAnchor(value);
  if (inline_anchor.ok()) return inline_anchor;
  absl::StatusOr<std::string> text = ReadSmallFile(value, 2 * audit::format::kMaxLineBytes);
  if (!text.ok()) {
    // `0:abc` is a mistyped anchor, not a missing file: say what is wrong with it. (A file of
    // that name, should one exist, is still read.)
    if (absl::IsNotFound(text.status()) && ShapedLikeAnAnchor(value)) {
      return absl::InvalidArgumentError(
          StrCat("--anchor ", value, ": ", inline_anchor.status().message()));
    }
    return absl::Status(text.status().code(),
                        StrCat("--anchor ", value, ": ", text.status().message()));
  }
  absl::StatusOr<audit::Anchor> anchor = audit::ParseAnchor(*text);
  if (!anchor.ok()) {
    return absl::InvalidArgumentError(StrCat("--anchor ", value, ": ", anchor.status().message()));
  }
  return anchor;
}

std::string ChainName(const Where& where, const std::string& instance) {
  return where.postgres ? StrCat("postgres chain ", instance) : where.config.audit.file;
}

audit::VerifyReport VerifyChain(const Where& where, const std::string& instance,
                                std::vector<signing::PublicKey> keys,
                                audit::VerifyOptions options) {
  return where.postgres
             ? audit::VerifyPostgresChain(where.config.audit.postgres, instance, std::move(keys),
                                          std::move(options))
             : audit::VerifyAuditFile(where.config.audit.file, std::move(keys), std::move(options));
}

int RunAuditVerify(const AuditOptions& options) {
  absl::StatusOr<Where> where = Locate(options);
  if (!where.ok()) return Fail("audit", where.status(), 2);
  absl::StatusOr<std::vector<signing::PublicKey>> keys =
      signing::ReadPublicKeys(where->config.audit.public_keys);
  if (!keys.ok()) return Fail("audit", keys.status(), 2);
  audit::VerifyOptions verify;
  verify.min_records = options.min_records;
  if (!options.anchor.empty()) {
    absl::StatusOr<audit::Anchor> loaded = LoadAnchor(options.anchor);
    if (!loaded.ok()) return Fail("audit", loaded.status(), 2);
    verify.anchor = std::move(*loaded);
  }
  std::vector<std::string> instances;
  if (!where->postgres) {
    instances.push_back("");
  } else if (!where->instance.empty()) {
    instances.push_back(where->instance);
  } else if (verify.anchor.has_value() || verify.min_records > 0) {
    return Fail("audit",
                absl::InvalidArgumentError(
                    "--anchor and --min-records hold for one chain: name it with --instance"),
                2);
  } else {
    absl::StatusOr<std::vector<std::string>> all =
        audit::ListPostgresChains(where->config.audit.postgres);
    if (!all.ok()) return Fail("audit", all.status(), 2);
    instances = std::move(*all);
  }
  int failed = 0;
  for (const std::string& instance : instances) {
    const absl::Time start = absl::Now();
    audit::VerifyReport report = VerifyChain(*where, instance, *keys, verify);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const std::string name = ChainName(*where, instance);
    std::printf("%s: %s\n", name.c_str(), report.Summary().c_str());
    std::printf("checked in %.3f s%s\n", seconds, report.status.ok() ? "; OK" : "");
    std::fflush(stdout);
    // On stderr, so that they are seen even when the summary goes to a file.
    for (const std::string& warning : report.warnings) {
      std::fprintf(stderr, "pillar audit: WARNING: %s: %s\n", name.c_str(), warning.c_str());
    }
    if (!report.status.ok()) ++failed;
  }
  return failed == 0 ? 0 : 1;
}

int RunAuditAnchor(const AuditOptions& options) {
  absl::StatusOr<Where> where = Locate(options);
  if (!where.ok()) return Fail("audit", where.status(), 2);
  if (where->postgres && where->instance.empty()) {
    return Fail("audit", absl::InvalidArgumentError("--instance names the chain to anchor"), 2);
  }
  absl::StatusOr<std::vector<signing::PublicKey>> keys =
      signing::ReadPublicKeys(where->config.audit.public_keys);
  if (!keys.ok()) return Fail("audit", keys.status(), 2);
  // An anchor taken from a chain that does not verify would vouch for whatever was done to it.
  const audit::VerifyReport report = VerifyChain(*where, where->instance, *keys, {});
  const std::string name = ChainName(*where, where->instance);
  if (!report.status.ok()) {
    std::fprintf(stderr, "pillar audit: %s does not verify; no anchor taken\n%s\n", name.c_str(),
                 report.Summary().c_str());
    return 1;
  }
  if (report.newest_checkpoint.empty()) {
    std::fprintf(stderr,
                 "pillar audit: %s holds no signed checkpoint yet; the server signs one every "
                 "[audit] checkpoint_interval_ms and at shutdown when [audit] signing_key is set\n",
                 name.c_str());
    return 1;
  }
  std::printf("%s\n", report.newest_checkpoint.c_str());
  return std::fflush(stdout) == 0 ? 0 : 2;
}

int RunAuditTail(const AuditOptions& options) {
  absl::StatusOr<Where> where = Locate(options);
  if (!where.ok()) return Fail("audit", where.status(), 2);
  std::deque<std::string> last;
  uint64_t position = 0;
  absl::Status read = ForEachPayload(*where, &position, [&](std::string_view payload) {
    last.emplace_back(payload);
    if (int(last.size()) > options.lines) last.pop_front();
    return true;
  });
  if (!read.ok()) return Fail("audit", read, 2);
  for (const std::string& payload : last) PrintLine(payload);
  std::fflush(stdout);
  while (options.follow) {
    ::usleep(200'000);
    read = ForEachPayload(*where, &position, [](std::string_view payload) {
      PrintLine(payload);
      return true;
    });
    if (!read.ok()) return Fail("audit", read, 2);
    std::fflush(stdout);
  }
  return 0;
}

int RunAuditExport(const AuditOptions& options) {
  absl::StatusOr<Where> where = Locate(options);
  if (!where.ok()) return Fail("audit", where.status(), 2);
  std::string since;
  if (!options.since.empty()) {
    absl::Time t;
    std::string error;
    if (absl::ParseTime(absl::RFC3339_full, options.since, &t, &error)) {
      since = FormatUtcMicros(absl::ToUnixMicros(t));
    } else {
      absl::StatusOr<int64_t> age = ParseDurationSeconds(options.since);
      if (!age.ok()) {
        return Fail("audit",
                    absl::InvalidArgumentError(StrCat(
                        "--since '", options.since, "': give an RFC 3339 time or an age like 24h")),
                    2);
      }
      since = FormatUtcMicros(absl::ToUnixMicros(absl::Now()) - *age * 1'000'000);
    }
  }
  uint64_t position = 0;
  absl::Status read = ForEachPayload(*where, &position, [&](std::string_view payload) {
    if (since.empty() || TimeOf(payload) >= since) PrintLine(payload);
    return true;
  });
  if (!read.ok()) return Fail("audit", read, 2);
  return std::fflush(stdout) == 0 ? 0 : 2;
}

}  // namespace

void AddAuditCommands(CLI::App& cli, Commands& commands) {
  auto audit = std::make_shared<AuditOptions>();
  CLI::App* group = cli.add_subcommand("audit", "Verify and read the tamper-evident audit log");
  group->require_subcommand(1);
  // Each subcommand reads a chain from the configuration or from these overrides.
  auto add = [&](const char* name, const char* what, int (*run)(const AuditOptions&)) {
    CLI::App* cmd = group->add_subcommand(name, what);
    cmd->add_option("-c,--config", audit->config_path, "Configuration file ([audit] section)");
    cmd->add_option("--file", audit->file, "The audit log file (overrides [audit] file)");
    cmd->add_option("--postgres", audit->postgres,
                    "A libpq connection string: read the chains in PostgreSQL");
    cmd->add_option("--instance", audit->instance, "PostgreSQL: the instance whose chain to read");
    commands.On(cmd, [audit, run] { return run(*audit); });
    return cmd;
  };
  const char* kTrustedKeys =
      "A trusted audit public key (repeatable; overrides [audit] public_keys)";
  CLI::App* verify =
      add("verify", "Check every record, link and signed checkpoint; name the first bad record",
          RunAuditVerify);
  verify->add_option("--key", audit->keys, kTrustedKeys);
  verify->add_option("--anchor", audit->anchor,
                     "A file holding a checkpoint kept off this host (`pillar audit anchor`), "
                     "or COUNT:HEAD: the chain must still reach it");
  verify
      ->add_option("--min-records", audit->min_records,
                   "The chain must hold at least this many records")
      ->check(CLI::NonNegativeNumber);
  add("anchor", "Verify, then print the newest signed checkpoint: one line to keep off this host",
      RunAuditAnchor)
      ->add_option("--key", audit->keys, kTrustedKeys);
  CLI::App* tail = add("tail", "Print the newest records (JSON lines)", RunAuditTail);
  tail->add_option("-n,--lines", audit->lines, "How many records")->check(CLI::Range(1, 1000000));
  tail->add_flag("-f,--follow", audit->follow, "Keep printing records as they are written");
  add("export", "Print records as JSON lines, for a SIEM", RunAuditExport)
      ->add_option("--since", audit->since,
                   "Only records from this time on: RFC 3339, or an age such as 24h");
}

}  // namespace pillar::app
