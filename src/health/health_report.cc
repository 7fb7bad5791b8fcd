#include "health/health_report.h"

#include <algorithm>
#include <cstdio>

#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::health {
namespace {

std::string_view Verdict(int exit_code) {
  return exit_code == 0 ? "healthy" : exit_code == 1 ? "UNHEALTHY" : "COULD NOT CHECK";
}

// Prometheus label values escape backslash, quote and newline.
std::string Label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string FormatHealthTable(const HealthReport& report) {
  size_t name_w = 5, measured_w = 8;
  for (const CheckResult& c : report.checks) {
    name_w = std::max(name_w, c.name.size());
    measured_w = std::max(measured_w, c.measured.size());
  }
  auto pad = [](std::string_view s, size_t w) {
    std::string out(s);
    if (out.size() < w) out.append(w - out.size(), ' ');
    return out;
  };
  std::string out = StrCat(pad("check", name_w), "  ", pad("status", 6), "  ",
                           pad("measured", measured_w), "  required\n");
  for (const CheckResult& c : report.checks) {
    out += StrCat(pad(c.name, name_w), "  ", pad(CheckStatusName(c.status), 6), "  ",
                  pad(c.measured, measured_w), "  ", c.required);
    if (!c.detail.empty()) out += StrCat("  (", c.detail, ")");
    out += "\n";
  }
  const int code = report.ExitCode();
  out += StrCat(report.name.empty() ? "node" : report.name, ": ", Verdict(code), " (",
                report.checks.size(), " checks, exit ", code, ")\n");
  return out;
}

std::string HealthJson(const HealthReport& report) {
  JsonWriter w;
  w.BeginObject();
  w.Key("name");
  w.String(report.name);
  w.Key("exit_code");
  w.Int(report.ExitCode());
  w.Key("verdict");
  w.String(report.ExitCode() == 0 ? "healthy" : report.ExitCode() == 1 ? "unhealthy" : "unknown");
  w.Key("checks");
  w.BeginArray();
  for (const CheckResult& c : report.checks) {
    w.BeginObject();
    w.Key("name");
    w.String(c.name);
    w.Key("status");
    w.String(c.status == CheckStatus::kPass   ? "pass"
             : c.status == CheckStatus::kFail ? "fail"
                                              : "error");
    w.Key("measured");
    w.String(c.measured);
    w.Key("required");
    w.String(c.required);
    w.Key("value");
    if (c.value) {
      w.Double(*c.value);
    } else {
      w.Null();
    }
    w.Key("detail");
    w.String(c.detail);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

std::string HealthPrometheus(const HealthReport& report) {
  std::string out;
  out += "# HELP pillar_health_status Node health: 0 healthy, 1 unhealthy, 2 could not check.\n";
  out += "# TYPE pillar_health_status gauge\n";
  out += StrCat("pillar_health_status ", report.ExitCode(), "\n");
  out +=
      "# HELP pillar_health_check_ok 1 when the check passed, 0 when it failed or could not run.\n";
  out += "# TYPE pillar_health_check_ok gauge\n";
  for (const CheckResult& c : report.checks) {
    out += StrCat("pillar_health_check_ok{check=\"", Label(c.name), "\"} ",
                  c.status == CheckStatus::kPass ? 1 : 0, "\n");
  }
  out += "# HELP pillar_health_check_value What the check measured, in the unit its table shows.\n";
  out += "# TYPE pillar_health_check_value gauge\n";
  for (const CheckResult& c : report.checks) {
    if (!c.value) continue;
    char number[64];
    std::snprintf(number, sizeof(number), "%.17g", *c.value);
    out += StrCat("pillar_health_check_value{check=\"", Label(c.name), "\"} ", number, "\n");
  }
  return out;
}

}  // namespace pillar::health
