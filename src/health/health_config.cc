#include "health/health_config.h"

#include <array>
#include <utility>

#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::health {
namespace {

constexpr std::array<std::pair<std::string_view, uint64_t>, 9> kThrottleReasons = {{
    {"gpu_idle", 0x1},
    {"applications_clocks_setting", 0x2},
    {"sw_power_cap", 0x4},
    {"hw_slowdown", 0x8},
    {"sync_boost", 0x10},
    {"sw_thermal", 0x20},
    {"hw_thermal", 0x40},
    {"hw_power_brake", 0x80},
    {"display_clocks_setting", 0x100},
}};

// Sets `out` only when the key is present (and valid).
template <typename T>
[[nodiscard]] absl::Status ReadOptional(TomlSection& s, std::string_view key, std::optional<T>& out,
                                        double min, double max) {
  if (!s.Contains(key)) return absl::OkStatus();
  if constexpr (std::is_floating_point_v<T>) {
    double value = 0;
    if (absl::Status st = s.ReadDouble(key, value, min, max); !st.ok()) return st;
    out = value;
  } else {
    int64_t value = 0;
    if (absl::Status st = s.ReadInt(key, value, int64_t(min), int64_t(max)); !st.ok()) return st;
    out = T(value);
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<uint64_t> ThrottleReasonBit(std::string_view name) {
  for (const auto& [n, bit] : kThrottleReasons) {
    if (n == name) return bit;
  }
  return std::nullopt;
}

std::vector<std::string> ThrottleReasonNames(uint64_t bits) {
  std::vector<std::string> names;
  for (const auto& [n, bit] : kThrottleReasons) {
    if ((bits & bit) != 0) names.emplace_back(n);
  }
  return names;
}

namespace {

// The table [name]: null when the file has none, an error when it is not a table.
[[nodiscard]] absl::StatusOr<const toml::table*> SectionTable(const toml::table& root,
                                                              std::string_view name,
                                                              std::string_view source) {
  const toml::node* node = root.get(name);
  if (node == nullptr) return nullptr;
  if (!node->is_table()) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", node->source().begin.line, ": [", name, "] must be a table"));
  }
  return node->as_table();
}

// Sets `out` from the table [name] with `read`, when the file has that table.
template <typename T>
[[nodiscard]] absl::Status ReadSection(
    const toml::table& root, std::string_view name, std::string_view source,
    absl::StatusOr<T> (*read)(const toml::table&, std::string_view), std::optional<T>& out) {
  PILLAR_ASSIGN_OR_RETURN(const toml::table* table, SectionTable(root, name, source));
  if (table != nullptr) {
    PILLAR_ASSIGN_OR_RETURN(out, read(*table, source));
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::StatusOr<CpuThresholds> ReadCpu(const toml::table& t, std::string_view source) {
  TomlSection s(&t, "cpu", source);
  CpuThresholds cpu;
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "min_count", cpu.min_count, 1, 1 << 20));
  std::string model;
  PILLAR_RETURN_IF_ERROR(s.ReadString("model", model));
  if (!model.empty()) cpu.model = model;
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  return cpu;
}

[[nodiscard]] absl::StatusOr<MemoryThresholds> ReadMemory(const toml::table& t,
                                                          std::string_view source) {
  TomlSection s(&t, "memory", source);
  MemoryThresholds memory;
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "min_total_gib", memory.min_total_gib, 0, 1e9));
  PILLAR_RETURN_IF_ERROR(s.ReadBool("swap_off", memory.swap_off));
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "min_bandwidth_gbps", memory.min_bandwidth_gbps, 0, 1e6));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("bandwidth_mib", memory.bandwidth_mib, 3, 1 << 20));
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  return memory;
}

// The [[disk]] tables, when the file has any.
[[nodiscard]] absl::Status ReadDisks(const toml::table& root, std::string_view source,
                                     std::vector<DiskThresholds>& disks) {
  const toml::node* node = root.get("disk");
  if (node == nullptr) return absl::OkStatus();
  const toml::array* array = node->as_array();
  if (array == nullptr || !array->is_array_of_tables()) {
    return absl::InvalidArgumentError(StrCat(source, ":", node->source().begin.line,
                                             ": disk must be an array of tables ([[disk]])"));
  }
  for (const toml::node& item : *array) {
    const std::string name = StrCat("disk ", disks.size() + 1);
    TomlSection s(item.as_table(), name, source);
    DiskThresholds disk;
    PILLAR_RETURN_IF_ERROR(s.ReadString("path", disk.path));
    if (disk.path.empty()) {
      return absl::InvalidArgumentError(
          StrCat(source, ":", item.source().begin.line, ": [", name, "] needs a path"));
    }
    PILLAR_RETURN_IF_ERROR(ReadOptional(s, "min_free_gib", disk.min_free_gib, 0, 1e12));
    PILLAR_RETURN_IF_ERROR(ReadOptional(s, "min_write_mbps", disk.min_write_mbps, 0, 1e9));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("write_mib", disk.write_mib, 1, 1 << 20));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    disks.push_back(disk);
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::StatusOr<NetworkThresholds> ReadNetwork(const toml::table& t,
                                                            std::string_view source) {
  TomlSection s(&t, "network", source);
  NetworkThresholds network;
  PILLAR_RETURN_IF_ERROR(s.ReadStrings("interfaces_up", network.interfaces_up));
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  return network;
}

[[nodiscard]] absl::StatusOr<ClockThresholds> ReadClock(const toml::table& t,
                                                        std::string_view source) {
  TomlSection s(&t, "clock", source);
  ClockThresholds clock;
  PILLAR_RETURN_IF_ERROR(s.ReadBool("synchronized", clock.synchronized));
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "max_error_ms", clock.max_error_ms, 0, 1e9));
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  return clock;
}

// Refuses a forbidden_throttle name that is not an NVML throttle reason.
[[nodiscard]] absl::Status CheckThrottleReasons(const std::vector<std::string>& names,
                                                std::string_view source) {
  for (const std::string& name : names) {
    if (!ThrottleReasonBit(name)) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [gpu] forbidden_throttle: unknown reason '", name,
                 "' (gpu_idle, applications_clocks_setting, sw_power_cap, hw_slowdown, sync_boost, "
                 "sw_thermal, hw_thermal, hw_power_brake, display_clocks_setting)"));
    }
  }
  return absl::OkStatus();
}

// [gpu] forbidden_xids: XID numbers, or "all" (any XID fails).
[[nodiscard]] absl::Status ReadForbiddenXids(const toml::table& t, TomlSection& s,
                                             std::string_view source, GpuThresholds& gpu) {
  const toml::node* xids = t.get("forbidden_xids");
  if (xids == nullptr) return absl::OkStatus();
  s.Allow("forbidden_xids");
  const toml::array* array = xids->as_array();
  bool ok = array != nullptr;
  for (size_t i = 0; ok && i < array->size(); ++i) {
    const toml::node& item = *array->get(i);
    if (item.is_string() && item.as_string()->get() == "all") {
      gpu.any_xid = true;
    } else if (item.is_integer() && item.as_integer()->get() > 0 &&
               item.as_integer()->get() < 1000000) {
      gpu.forbidden_xids.push_back(int(item.as_integer()->get()));
    } else {
      ok = false;
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", xids->source().begin.line,
               ": [gpu] forbidden_xids must be an array of XID numbers or \"all\""));
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::StatusOr<GpuThresholds> ReadGpu(const toml::table& t, std::string_view source) {
  TomlSection s(&t, "gpu", source);
  GpuThresholds gpu;
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "count", gpu.count, 0, 4096));
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "max_uncorrected_ecc", gpu.max_uncorrected_ecc, 0, 1e15));
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "max_corrected_ecc", gpu.max_corrected_ecc, 0, 1e15));
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "min_clock_ratio", gpu.min_clock_ratio, 0, 1));
  PILLAR_RETURN_IF_ERROR(s.ReadStrings("forbidden_throttle", gpu.forbidden_throttle));
  PILLAR_RETURN_IF_ERROR(CheckThrottleReasons(gpu.forbidden_throttle, source));
  PILLAR_RETURN_IF_ERROR(ReadOptional(s, "max_temperature_c", gpu.max_temperature_c, 0, 200));
  PILLAR_RETURN_IF_ERROR(ReadForbiddenXids(t, s, source, gpu));
  PILLAR_RETURN_IF_ERROR(s.ReadString("kernel_log", gpu.kernel_log));
  PILLAR_RETURN_IF_ERROR(s.ReadString("library", gpu.library));
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  return gpu;
}

[[nodiscard]] absl::StatusOr<CollectiveThresholds> ReadCollective(const toml::table& t,
                                                                  std::string_view source) {
  TomlSection s(&t, "collective", source);
  CollectiveThresholds collective;
  PILLAR_RETURN_IF_ERROR(s.ReadString("command", collective.command));
  PILLAR_RETURN_IF_ERROR(s.ReadDouble("min_busbw_gbps", collective.min_busbw_gbps, 0, 1e9));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("timeout_s", collective.timeout_s, 1, 86400));
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  if (collective.command.empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": [collective] needs a command"));
  }
  return collective;
}

}  // namespace

[[nodiscard]] absl::StatusOr<HealthConfig> ParseHealthConfig(std::string_view text,
                                                             std::string_view source) {
  absl::StatusOr<toml::table> parsed = ParseToml(text, source);
  if (!parsed.ok()) return parsed.status();
  const toml::table& root = *parsed;
  HealthConfig config;
  TomlSection top(&root, "top level", source);
  PILLAR_RETURN_IF_ERROR(top.ReadString("name", config.name));
  for (std::string_view section :
       {"cpu", "memory", "disk", "network", "clock", "gpu", "collective"}) {
    top.Allow(section);
  }
  PILLAR_RETURN_IF_ERROR(top.CheckNoUnknownKeys());
  PILLAR_RETURN_IF_ERROR(ReadSection(root, "cpu", source, ReadCpu, config.cpu));
  PILLAR_RETURN_IF_ERROR(ReadSection(root, "memory", source, ReadMemory, config.memory));
  PILLAR_RETURN_IF_ERROR(ReadDisks(root, source, config.disks));
  PILLAR_RETURN_IF_ERROR(ReadSection(root, "network", source, ReadNetwork, config.network));
  PILLAR_RETURN_IF_ERROR(ReadSection(root, "clock", source, ReadClock, config.clock));
  PILLAR_RETURN_IF_ERROR(ReadSection(root, "gpu", source, ReadGpu, config.gpu));
  PILLAR_RETURN_IF_ERROR(
      ReadSection(root, "collective", source, ReadCollective, config.collective));
  return config;
}

[[nodiscard]] absl::StatusOr<HealthConfig> LoadHealthConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, 1 << 20);
  if (!text.ok()) return text.status();
  return ParseHealthConfig(*text, path);
}

}  // namespace pillar::health
