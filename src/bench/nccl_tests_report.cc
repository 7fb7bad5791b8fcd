#include "bench/nccl_tests_report.h"

#include <cstdio>

#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::bench {
namespace {

// printf into a std::string (the formats are nccl-tests' own widths).
template <typename... Args>
std::string Format(const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  std::string out(size_t(n > 0 ? n : 0), '\0');
  if (n > 0) std::snprintf(out.data(), out.size() + 1, format, args...);
  return out;
}

// nccl-tests prints microseconds with fewer decimals as they grow.
std::string Micros(double seconds) {
  const double us = seconds * 1e6;
  if (us >= 10000.0) return Format("%7.0f", us);
  if (us >= 100.0) return Format("%7.1f", us);
  return Format("%7.2f", us);
}

std::string FormatPlacement(const Placement& p) {
  std::string out = Format("  %7s  %6.2f  %6.2f", Micros(p.seconds).c_str(), p.bandwidth.algbw,
                           p.bandwidth.busbw);
  if (p.wrong) {
    out += Format("  %5g", double(*p.wrong));
  } else {
    out += Format("  %5s", "N/A");
  }
  return out;
}

}  // namespace

std::string FormatPreamble(const CollectiveOptions& o, const std::vector<RankInfo>& ranks) {
  std::string out = Format("# Collective test starting: pillar bench collective %s\n",
                           std::string(CollectiveName(o.collective)).c_str());
  const std::string step =
      o.step_factor > 1 ? Format("%zu(factor)", o.step_factor) : Format("%zu(bytes)", o.step_bytes);
  out += Format(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg "
      "iters: %d validation: %d graph: 0\n",
      o.min_bytes, o.max_bytes, step.c_str(), o.warmup_iters, o.iters, o.agg_iters,
      o.check ? 1 : 0);
  out += "#\n# Using devices\n";
  for (const RankInfo& r : ranks) {
    out += Format("#  Rank %2d Group  0 Pid %6d on %10s device  0 [%s] %s\n", r.rank, r.pid,
                  r.host.c_str(), r.bus.c_str(), r.device.c_str());
  }
  out += "#\n";
  return out;
}

std::string FormatHeader() {
  std::string out = Format(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place  "
      "        \n",
      "", "", "", "", "");
  out += Format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong");
  out += Format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
  return out;
}

std::string FormatRow(const CollectiveRow& row) {
  const std::string op = row.op ? std::string(ReduceOpName(*row.op)) : "none";
  std::string out = Format("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
                           std::string(DataTypeName(row.type)).c_str(), op.c_str(), row.root);
  out += FormatPlacement(row.out_of_place);
  out += FormatPlacement(row.in_place);
  out += "\n";
  return out;
}

bool Passed(const CollectiveSummary& s, const CollectiveOptions& o) {
  return s.wrong == 0 && (!o.min_busbw || s.avg_busbw >= *o.min_busbw);
}

std::string FormatFooter(const CollectiveSummary& s, const CollectiveOptions& o) {
  std::string out;
  for (const std::string& skipped : s.skipped) out += StrCat("# Skipped ", skipped, "\n");
  out += Format("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(s.wrong),
                s.wrong == 0 ? "OK" : "FAILED");
  std::string verdict;
  if (o.min_busbw) verdict = s.avg_busbw >= *o.min_busbw ? "OK" : "FAILED";
  out += Format("# Avg bus bandwidth    : %g %s\n", s.avg_busbw, verdict.c_str());
  out += "#\n";
  return out;
}

std::string CollectiveJson(const CollectiveSummary& s, const CollectiveOptions& o,
                           const std::string& backend, int ranks) {
  JsonWriter w;
  w.BeginObject();
  w.Key("collective");
  w.String(CollectiveName(o.collective));
  w.Key("backend");
  w.String(backend);
  w.Key("ranks");
  w.Int(ranks);
  w.Key("iters");
  w.Int(o.iters);
  w.Key("warmup_iters");
  w.Int(o.warmup_iters);
  w.Key("check");
  w.Bool(o.check);
  w.Key("rows");
  w.BeginArray();
  for (const CollectiveRow& row : s.rows) {
    w.BeginObject();
    w.Key("size_bytes");
    w.Uint(row.bytes);
    w.Key("count");
    w.Uint(row.count);
    w.Key("type");
    w.String(DataTypeName(row.type));
    w.Key("redop");
    w.String(row.op ? ReduceOpName(*row.op) : "none");
    w.Key("root");
    w.Int(row.root);
    for (const auto& [name, p] :
         {std::pair{"out_of_place", &row.out_of_place}, std::pair{"in_place", &row.in_place}}) {
      w.Key(name);
      w.BeginObject();
      w.Key("time_us");
      w.Double(p->seconds * 1e6);
      w.Key("algbw_gbps");
      w.Double(p->bandwidth.algbw);
      w.Key("busbw_gbps");
      w.Double(p->bandwidth.busbw);
      w.Key("wrong");
      if (p->wrong) {
        w.Uint(*p->wrong);
      } else {
        w.Null();
      }
      w.EndObject();
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("skipped");
  w.BeginArray();
  for (const std::string& skipped : s.skipped) w.String(skipped);
  w.EndArray();
  w.Key("out_of_bounds");
  w.Uint(s.wrong);
  w.Key("avg_busbw_gbps");
  w.Double(s.avg_busbw);
  w.Key("min_busbw_gbps");
  if (o.min_busbw) {
    w.Double(*o.min_busbw);
  } else {
    w.Null();
  }
  w.Key("passed");
  w.Bool(Passed(s, o));
  w.EndObject();
  return std::move(w).Take();
}

}  // namespace pillar::bench
