#include "monitor/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace pillar::monitor {
namespace {

void AppendNumber(std::string& out, double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < 1e15) {
    StrAppend(&out, static_cast<int64_t>(v));
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void AppendLabelValue(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\')
      out.append("\\\\");
    else if (c == '"')
      out.append("\\\"");
    else if (c == '\n')
      out.append("\\n");
    else
      out.push_back(c);
  }
}

// Process metrics as the Prometheus client libraries name them.
void RenderProcessMetrics(std::string& out, double start_time_seconds) {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(line.substr(paren + 2));
    std::vector<std::string> f;
    std::string field;
    while (fields >> field) f.push_back(field);
    // After the command: state(0) ... utime(11) stime(12) ... vsize(20) rss(21).
    if (f.size() > 21) {
      double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
      double rss = std::stod(f[21]) * static_cast<double>(sysconf(_SC_PAGESIZE));
      StrAppend(&out, "# HELP process_cpu_seconds_total Total user and system CPU time.\n",
                "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ");
      AppendNumber(out, cpu);
      StrAppend(&out, "\n# HELP process_resident_memory_bytes Resident memory size.\n",
                "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes ");
      AppendNumber(out, rss);
      StrAppend(&out, "\n# HELP process_virtual_memory_bytes Virtual memory size.\n",
                "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes ");
      AppendNumber(out, std::stod(f[20]));
      out.push_back('\n');
    }
  }
  int fds = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) ++fds;
    closedir(dir);
    fds -= 3;  // ".", ".." and the directory's own descriptor
  }
  StrAppend(&out, "# HELP process_open_fds Open file descriptors.\n",
            "# TYPE process_open_fds gauge\nprocess_open_fds ", fds, "\n",
            "# HELP process_start_time_seconds Start time since the Unix epoch.\n",
            "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds ");
  AppendNumber(out, start_time_seconds);
  out.push_back('\n');
}

// This thread's shard: given in turn when the thread first asks.
size_t ThisThreadShard() {
  static std::atomic<size_t> next{0};
  thread_local const size_t shard =
      next.fetch_add(1, std::memory_order_relaxed) % Histogram::kShards;
  return shard;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      lines_per_shard_((1 + bounds_.size() + 1 + 7) / 8),
      lines_(new Line[kShards * lines_per_shard_]) {
  for (size_t i = 0; i < kShards * lines_per_shard_; ++i) {
    for (auto& cell : lines_[i].cells) cell.store(0, std::memory_order_relaxed);
  }
}

void Histogram::Observe(double value) {
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  const size_t shard = ThisThreadShard();
  Cell(shard, 1 + bucket).fetch_add(1, std::memory_order_relaxed);
  std::atomic<uint64_t>& sum = Cell(shard, 0);
  uint64_t bits = sum.load(std::memory_order_relaxed);
  while (!sum.compare_exchange_weak(bits,
                                    std::bit_cast<uint64_t>(std::bit_cast<double>(bits) + value),
                                    std::memory_order_relaxed)) {
  }
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.assign(bounds_.size() + 1, 0);
  for (size_t shard = 0; shard < kShards; ++shard) {
    s.sum += std::bit_cast<double>(Cell(shard, 0).load(std::memory_order_relaxed));
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      s.cumulative[i] += Cell(shard, 1 + i).load(std::memory_order_relaxed);
    }
  }
  uint64_t total = 0;
  for (uint64_t& c : s.cumulative) c = total += c;
  s.count = total;
  return s;
}

const std::vector<double>& LatencyBuckets() {
  // From 100 ns: the stages of a cheap request take well under a microsecond each, and a
  // lowest bucket of 1 us said only "under 1 us" of all of them.
  static const std::vector<double> kBounds = {
      100e-9, 250e-9, 500e-9, 1e-6,   2e-6,   3e-6,   4e-6,   5e-6,   10e-6,  20e-6, 30e-6,
      40e-6,  50e-6,  75e-6,  100e-6, 150e-6, 200e-6, 300e-6, 500e-6, 750e-6, 1e-3,  2e-3,
      5e-3,   10e-3,  25e-3,  50e-3,  100e-3, 250e-3, 500e-3, 1,      2.5,    5,     10};
  return kBounds;
}

const std::vector<double>& BatchSizeBuckets() {
  static const std::vector<double> kBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return kBounds;
}

std::string FamilyBase::LabelText(const std::vector<std::string>& values,
                                  std::string_view extra) const {
  if (values.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < values.size() && i < labels_.size(); ++i) {
    if (i > 0) out.push_back(',');
    StrAppend(&out, labels_[i], "=\"");
    AppendLabelValue(out, values[i]);
    out.push_back('"');
  }
  if (!extra.empty()) {
    if (!values.empty()) out.push_back(',');
    out.append(extra);
  }
  out.push_back('}');
  return out;
}

void FamilyBase::Render(std::string& out) const {
  StrAppend(&out, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " ", type_, "\n");
  RenderSamples(out);
}

template <>
void Family<Counter>::RenderSamples(std::string& out) const {
  absl::MutexLock lock(&mu_);
  Prune();
  for (const auto& [labels, series] : metrics_) {
    StrAppend(&out, name_, LabelText(labels), " ", series.metric->value(), "\n");
  }
}

template <>
void Family<Gauge>::RenderSamples(std::string& out) const {
  absl::MutexLock lock(&mu_);
  Prune();
  for (const auto& [labels, series] : metrics_) {
    StrAppend(&out, name_, LabelText(labels), " ");
    AppendNumber(out, series.metric->value());
    out.push_back('\n');
  }
}

template <>
void Family<Histogram>::RenderSamples(std::string& out) const {
  absl::MutexLock lock(&mu_);
  Prune();
  for (const auto& [labels, series] : metrics_) {
    Histogram::Snapshot s = series.metric->Take();
    for (size_t i = 0; i < s.bounds.size(); ++i) {
      std::string le = "le=\"";
      AppendNumber(le, s.bounds[i]);
      le.push_back('"');
      StrAppend(&out, name_, "_bucket", LabelText(labels, le), " ", s.cumulative[i], "\n");
    }
    StrAppend(&out, name_, "_bucket", LabelText(labels, "le=\"+Inf\""), " ", s.count, "\n");
    StrAppend(&out, name_, "_sum", LabelText(labels), " ");
    AppendNumber(out, s.sum);
    StrAppend(&out, "\n", name_, "_count", LabelText(labels), " ", s.count, "\n");
  }
}

MetricsRegistry::MetricsRegistry()
    : start_time_seconds_(
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count()) {}

Family<Counter>& MetricsRegistry::AddCounter(std::string name, std::string help,
                                             std::vector<std::string> labels) {
  auto family = std::make_unique<Family<Counter>>(std::move(name), std::move(help), "counter",
                                                  std::move(labels),
                                                  [] { return std::make_unique<Counter>(); });
  Family<Counter>& ref = *family;
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(family));
  return ref;
}

Family<Gauge>& MetricsRegistry::AddGauge(std::string name, std::string help,
                                         std::vector<std::string> labels) {
  auto family =
      std::make_unique<Family<Gauge>>(std::move(name), std::move(help), "gauge", std::move(labels),
                                      [] { return std::make_unique<Gauge>(); });
  Family<Gauge>& ref = *family;
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(family));
  return ref;
}

Family<Histogram>& MetricsRegistry::AddHistogram(std::string name, std::string help,
                                                 std::vector<std::string> labels,
                                                 const std::vector<double>& bounds) {
  auto family = std::make_unique<Family<Histogram>>(
      std::move(name), std::move(help), "histogram", std::move(labels),
      [bounds] { return std::make_unique<Histogram>(bounds); });
  Family<Histogram>& ref = *family;
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(family));
  return ref;
}

std::string MetricsRegistry::Render() const {
  std::string out;
  out.reserve(16 * 1024);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& family : families_) family->Render(out);
  }
  RenderProcessMetrics(out, start_time_seconds_);
  return out;
}

}  // namespace pillar::monitor
