// pillar health against a fake node: a /proc and /sys tree in a temp directory, a fake NVML
// library loaded through the real dlopen path, a kernel log file and shell commands that print
// nccl-tests summaries. Every threshold is shown to pass and to fail; malformed configs name
// their line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "health/health_checks.h"
#include "health/health_config.h"
#include "health/health_report.h"
#include "testing/temp_dir.h"

namespace pillar::health {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A two-CPU node with 16 GiB, no swap, eth0 up, ib0 down, lo unknown, and an XID 79 logged.
class FakeNode : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path root = dir_.path() / "root";
    Write(root / "proc/cpuinfo",
          "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9V84 96-Core "
          "Processor\n\n"
          "processor\t: 1\nmodel name\t: AMD EPYC 9V84 96-Core Processor\n\n");
    Write(
        root / "proc/meminfo",
        "MemTotal:       16777216 kB\nMemFree:         1000000 kB\nSwapTotal:             0 kB\n");
    Write(root / "sys/class/net/eth0/operstate", "up\n");
    Write(root / "sys/class/net/ib0/operstate", "down\n");
    Write(root / "sys/class/net/lo/operstate", "unknown\n");
    Write(root / "var/log/kern.log",
          "[  10.1] nvidia: loading out-of-tree module\n"
          "[ 812.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the "
          "bus.\n"
          "[ 900.0] NVRM: Xid (PCI:0000:5d:00): 13, pid=77, Graphics Exception\n");
    root_ = root.string();
    ::setenv("FAKE_NVML", "", 1);
  }

  HealthReport Run(const std::string& toml, const NodeProbe* probe = nullptr) {
    absl::StatusOr<HealthConfig> config = ParseHealthConfig(toml, "test.toml");
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return {};
    NodeProbe fake(root_);
    HealthOptions options;
    options.threads = 2;
    return RunHealthChecks(*config, probe != nullptr ? *probe : fake, options);
  }

  static const CheckResult* Find(const HealthReport& report, const std::string& name) {
    for (const CheckResult& c : report.checks) {
      if (c.name == name) return &c;
    }
    return nullptr;
  }

  static CheckStatus StatusOf(const HealthReport& report, const std::string& name) {
    const CheckResult* c = Find(report, name);
    EXPECT_NE(c, nullptr) << name << " missing from\n" << FormatHealthTable(report);
    return c == nullptr ? CheckStatus::kError : c->status;
  }

  testing::TempDir dir_;
  std::string root_;
};

TEST_F(FakeNode, AHealthyNodePassesEveryCheckAndExitsZero) {
  const std::string fake_nvml = FAKE_NVML_PATH;
  HealthReport r = Run(
      "name = \"test node\"\n"
      "[cpu]\nmin_count = 2\nmodel = \"EPYC\"\n"
      "[memory]\nmin_total_gib = 15.5\nswap_off = true\nmin_bandwidth_gbps = 0.1\nbandwidth_mib = "
      "24\n"
      "[[disk]]\npath = \"" +
      dir_.path().string() +
      "\"\nmin_free_gib = 0.001\nmin_write_mbps = 1\nwrite_mib = 4\n"
      "[network]\ninterfaces_up = [\"eth0\", \"lo\"]\n"
      "[gpu]\ncount = 8\nmax_uncorrected_ecc = 0\nmax_corrected_ecc = 10000\nmin_clock_ratio = "
      "0.9\n"
      "forbidden_throttle = [\"hw_slowdown\", \"sw_thermal\", \"hw_thermal\", \"hw_power_brake\"]\n"
      "max_temperature_c = 85\nforbidden_xids = [48, 94, 95]\nkernel_log = \"/var/log/kern.log\"\n"
      "library = \"" +
      fake_nvml +
      "\"\n"
      "[collective]\ncommand = \"printf '# Out of bounds values : 0 OK\\\\n# Avg bus bandwidth    "
      ": 470.5 \\\\n'\"\n"
      "min_busbw_gbps = 460\n");
  EXPECT_EQ(r.ExitCode(), 0) << FormatHealthTable(r);
  EXPECT_EQ(r.name, "test node");
  EXPECT_EQ(*Find(r, "cpu.count")->value, 2);
  EXPECT_EQ(*Find(r, "memory.total")->value, 16);
  EXPECT_GT(*Find(r, "memory.bandwidth")->value, 0.1);
  EXPECT_EQ(StatusOf(r, "gpu.count"), CheckStatus::kPass);
  EXPECT_EQ(StatusOf(r, "gpu7.temperature"), CheckStatus::kPass);
  EXPECT_EQ(StatusOf(r, "gpu.xid"), CheckStatus::kPass);  // 79 and 13 are logged, not forbidden
  EXPECT_EQ(*Find(r, "collective.busbw")->value, 470.5);
  // Every check of the config ran: 2 cpu, 3 memory, 2 disk, 2 net, 1 + 8 * 5 gpu + xid, 2
  // collective.
  EXPECT_EQ(r.checks.size(), 2u + 3u + 2u + 2u + 1u + 8u * 5u + 1u + 2u);
}

TEST_F(FakeNode, EachHostThresholdFailsOnItsOwn) {
  struct Case {
    std::string toml;
    std::string check;
  };
  const std::string disk = dir_.path().string();
  const std::vector<Case> cases = {
      {"[cpu]\nmin_count = 96\n", "cpu.count"},
      {"[cpu]\nmodel = \"Xeon\"\n", "cpu.model"},
      {"[memory]\nmin_total_gib = 1800\n", "memory.total"},
      {"[memory]\nmin_bandwidth_gbps = 100000\nbandwidth_mib = 24\n", "memory.bandwidth"},
      {"[[disk]]\npath = \"" + disk + "\"\nmin_free_gib = 1e9\n", "disk:" + disk + ".free"},
      {"[[disk]]\npath = \"" + disk + "\"\nmin_write_mbps = 1e8\nwrite_mib = 4\n",
       "disk:" + disk + ".write"},
      {"[network]\ninterfaces_up = [\"ib0\"]\n", "net.ib0"},
      {"[network]\ninterfaces_up = [\"ib7\"]\n", "net.ib7"},
  };
  for (const Case& c : cases) {
    HealthReport r = Run(c.toml);
    EXPECT_EQ(StatusOf(r, c.check), CheckStatus::kFail) << c.toml << FormatHealthTable(r);
    EXPECT_EQ(r.ExitCode(), 1) << c.toml;
  }
  // Swap present.
  Write(fs::path(root_) / "proc/meminfo", "MemTotal: 16777216 kB\nSwapTotal: 2097152 kB\n");
  HealthReport r = Run("[memory]\nswap_off = true\n");
  EXPECT_EQ(StatusOf(r, "memory.swap"), CheckStatus::kFail);
  EXPECT_EQ(Find(r, "memory.swap")->measured, "2.0 GiB");
}

class UnsyncedClock : public NodeProbe {
 public:
  using NodeProbe::NodeProbe;
  absl::StatusOr<ClockFacts> Clock() const override { return ClockFacts{false, 16000}; }
};

TEST_F(FakeNode, AnUnsynchronisedClockFails) {
  UnsyncedClock probe(root_);
  HealthReport r = Run("[clock]\nsynchronized = true\nmax_error_ms = 100\n", &probe);
  EXPECT_EQ(StatusOf(r, "clock.synchronized"), CheckStatus::kFail);
  EXPECT_EQ(StatusOf(r, "clock.max_error"), CheckStatus::kFail);
  EXPECT_EQ(r.ExitCode(), 1);
  // This machine's own clock answers (synchronised or not, it is read without error).
  NodeProbe real;
  EXPECT_TRUE(real.Clock().ok());
}

TEST_F(FakeNode, EachGpuThresholdFailsOnItsOwn) {
  const std::string lib = std::string("library = \"") + FAKE_NVML_PATH + "\"\n";
  struct Case {
    std::string fake;
    std::string toml;
    std::string check;
  };
  const std::vector<Case> cases = {
      {"count=7", "count = 8\n", "gpu.count"},
      {"count=2,ecc_uncorrected=1", "max_uncorrected_ecc = 0\n", "gpu1.ecc_uncorrected"},
      {"count=2,ecc_corrected=20000", "max_corrected_ecc = 10000\n", "gpu0.ecc_corrected"},
      {"count=1,app_clock=1200,max_clock=1980", "min_clock_ratio = 0.9\n", "gpu0.sm_clock_ratio"},
      {"count=1,throttle=0x48", "forbidden_throttle = [\"hw_thermal\"]\n", "gpu0.throttle"},
      {"count=1,temperature=91", "max_temperature_c = 85\n", "gpu0.temperature"},
      {"count=1", "forbidden_xids = [79]\nkernel_log = \"/var/log/kern.log\"\n", "gpu.xid"},
      {"count=1", "forbidden_xids = [\"all\"]\nkernel_log = \"/var/log/kern.log\"\n", "gpu.xid"},
  };
  for (const Case& c : cases) {
    ::setenv("FAKE_NVML", c.fake.c_str(), 1);
    HealthReport r = Run("[gpu]\n" + c.toml + lib);
    EXPECT_EQ(StatusOf(r, c.check), CheckStatus::kFail) << c.fake << "\n" << FormatHealthTable(r);
    EXPECT_EQ(r.ExitCode(), 1) << c.fake;
  }
  ::setenv("FAKE_NVML", "count=1,throttle=0x48", 1);
  HealthReport r = Run("[gpu]\nforbidden_throttle = [\"hw_thermal\", \"hw_slowdown\"]\n" + lib);
  EXPECT_EQ(Find(r, "gpu0.throttle")->measured, "hw_slowdown,hw_thermal");
  ::setenv("FAKE_NVML", "count=1", 1);
  r = Run("[gpu]\nforbidden_xids = [\"all\"]\nkernel_log = \"/var/log/kern.log\"\n" + lib);
  EXPECT_EQ(Find(r, "gpu.xid")->measured, "XID 79, 13");
}

TEST_F(FakeNode, WhatCannotBeCheckedExitsTwoAndAFailureStillWins) {
  // No NVML where GPUs are expected, no kernel log, ECC off.
  HealthReport r = Run("[gpu]\ncount = 8\nlibrary = \"/nonexistent/libnvidia-ml.so.1\"\n");
  EXPECT_EQ(StatusOf(r, "gpu"), CheckStatus::kError);
  EXPECT_NE(Find(r, "gpu")->detail.find("cannot load /nonexistent/libnvidia-ml.so.1"),
            std::string::npos);
  EXPECT_EQ(r.ExitCode(), 2);
  ::setenv("FAKE_NVML", "count=1,fail_init=1", 1);
  r = Run(std::string("[gpu]\ncount = 1\nlibrary = \"") + FAKE_NVML_PATH + "\"\n");
  EXPECT_NE(Find(r, "gpu")->detail.find("nvmlInit: Driver Not Loaded"), std::string::npos);
  ::setenv("FAKE_NVML", "count=1,ecc=off", 1);
  r = Run(std::string("[gpu]\nmax_uncorrected_ecc = 0\nlibrary = \"") + FAKE_NVML_PATH + "\"\n");
  EXPECT_EQ(StatusOf(r, "gpu0.ecc_uncorrected"), CheckStatus::kError);
  r = Run(std::string("[gpu]\nforbidden_xids = [79]\nkernel_log = \"/no/such/log\"\nlibrary = \"") +
          FAKE_NVML_PATH + "\"\n");
  EXPECT_EQ(StatusOf(r, "gpu.xid"), CheckStatus::kError);
  // An error and a failure: unhealthy (1), not unknown.
  r = Run("[cpu]\nmin_count = 64\n[gpu]\nlibrary = \"/nonexistent.so\"\n");
  EXPECT_EQ(r.ExitCode(), 1);
  // A missing /proc file.
  fs::remove(fs::path(root_) / "proc/meminfo");
  r = Run("[memory]\nmin_total_gib = 1\n");
  EXPECT_EQ(StatusOf(r, "memory"), CheckStatus::kError);
  EXPECT_EQ(r.ExitCode(), 2);
}

TEST_F(FakeNode, TheCollectiveCheckReadsNcclTestsOutputFromAnyCommand) {
  auto run = [&](const std::string& command, double min) {
    return Run("[collective]\ncommand = \"" + command +
               "\"\nmin_busbw_gbps = " + std::to_string(min) + "\ntimeout_s = 5\n");
  };
  const std::string summary =
      "printf '# Out of bounds values : 0 OK\\\\n# Avg bus bandwidth    : 431.0 \\\\n#\\\\n'";
  HealthReport r = run(summary, 431);
  EXPECT_EQ(r.ExitCode(), 0) << FormatHealthTable(r);
  r = run(summary, 460);
  EXPECT_EQ(StatusOf(r, "collective.busbw"), CheckStatus::kFail);
  r = run(
      "printf '# Out of bounds values : 12 FAILED\\\\n# Avg bus bandwidth    : 500 \\\\n'; exit 1",
      1);
  EXPECT_EQ(StatusOf(r, "collective.wrong"), CheckStatus::kFail);
  EXPECT_EQ(StatusOf(r, "collective.busbw"), CheckStatus::kPass);
  r = run("echo mpirun: command not found; exit 127", 1);
  EXPECT_EQ(StatusOf(r, "collective.busbw"), CheckStatus::kError);
  EXPECT_NE(Find(r, "collective.busbw")->detail.find("exited 127"), std::string::npos);
  EXPECT_EQ(r.ExitCode(), 2);
  const auto start = std::chrono::steady_clock::now();
  r = Run("[collective]\ncommand = \"sleep 30\"\nmin_busbw_gbps = 1\ntimeout_s = 1\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(StatusOf(r, "collective.busbw"), CheckStatus::kError);
  EXPECT_NE(Find(r, "collective.busbw")->detail.find("longer than 1 s"), std::string::npos);
  // A command that closes its output and runs on is held to the same deadline.
  const auto closed_at = std::chrono::steady_clock::now();
  r = Run("[collective]\ncommand = \"exec >&-; sleep 30\"\nmin_busbw_gbps = 1\ntimeout_s = 1\n");
  EXPECT_LT(std::chrono::steady_clock::now() - closed_at, std::chrono::seconds(10));
  EXPECT_NE(Find(r, "collective.busbw")->detail.find("longer than 1 s"), std::string::npos);
}

TEST(HealthParseTest, NcclTestsSummaryAndXidLines) {
  auto s = ParseNcclTestsSummary(
      "#\n# Out of bounds values : 3 FAILED\n# Avg bus bandwidth    : 12.5 OK\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->avg_busbw, 12.5);
  EXPECT_EQ(s->wrong, 3u);
  EXPECT_TRUE(absl::IsNotFound(ParseNcclTestsSummary("no summary\n").status()));
  EXPECT_FALSE(ParseNcclTestsSummary("# Avg bus bandwidth    : fast\n").ok());
  EXPECT_EQ(
      ParseXids(
          "NVRM: Xid (PCI:0000:01:00): 48, pid=1\nNVRM: Xid (x): \nNVRM: Xid (PCI:1): 119, x"),
      (std::vector<int>{48, 119}));
}

TEST(HealthConfigTest, MalformedConfigsNameTheirLine) {
  auto error = [](const std::string& toml) {
    auto c = ParseHealthConfig(toml, "h.toml");
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_EQ(error("[cpu]\nmin_cout = 3\n"), "h.toml:2:1: unknown key 'min_cout' in [cpu]");
  EXPECT_EQ(error("[memory]\n\nmin_total_gib = \"lots\"\n"),
            "h.toml:3:17: [memory] min_total_gib must be a number in [0, 1e+09]");
  EXPECT_NE(error("[gpu]\nforbidden_throttle = [\"hot\"]\n").find("unknown reason 'hot'"),
            std::string::npos);
  EXPECT_NE(
      error("[gpu]\nforbidden_xids = [79, \"some\"]\n").find("h.toml:2: [gpu] forbidden_xids"),
      std::string::npos);
  EXPECT_NE(error("[[disk]]\nmin_free_gib = 1\n").find("[disk 1] needs a path"), std::string::npos);
  EXPECT_NE(error("[collective]\nmin_busbw_gbps = 1\n").find("[collective] needs a command"),
            std::string::npos);
  EXPECT_NE(error("cpu = 3\n").find("[cpu] must be a table"), std::string::npos);
  EXPECT_NE(error("disk = 3\n").find("disk must be an array of tables"), std::string::npos);
  EXPECT_NE(error("[gpu]\ncount = -1\n").find("count must be an integer in [0, 4096]"),
            std::string::npos);
  EXPECT_NE(error("[cpu\n").find("h.toml:1"), std::string::npos);
  EXPECT_NE(error("colour = \"blue\"\n").find("unknown key 'colour'"), std::string::npos);
}

TEST(HealthConfigTest, TheSampleConfigsParse) {
  for (const char* name : {"azure-nd-h100-v5.toml", "azure-nd-h200-v5.toml", "cpu-node.toml"}) {
    auto c = LoadHealthConfig((fs::path(PILLAR_SOURCE_DIR) / "configs/health" / name).string());
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_FALSE(c->name.empty());
  }
  auto h200 = LoadHealthConfig(
      (fs::path(PILLAR_SOURCE_DIR) / "configs/health/azure-nd-h200-v5.toml").string());
  ASSERT_TRUE(h200.ok());
  EXPECT_EQ(h200->collective->min_busbw_gbps, 431);
  EXPECT_EQ(*h200->gpu->count, 8);
}

TEST(HealthReportTest, JsonAndPrometheusSayTheSame) {
  HealthReport r;
  r.name = "n";
  r.checks.push_back({.name = "cpu.count",
                      .status = CheckStatus::kPass,
                      .measured = "2",
                      .required = ">= 2",
                      .value = 2,
                      .detail = ""});
  r.checks.push_back({.name = "net.\"odd\"",
                      .status = CheckStatus::kFail,
                      .measured = "down",
                      .required = "up",
                      .value = 0,
                      .detail = ""});
  const std::string prom = HealthPrometheus(r);
  EXPECT_NE(prom.find("pillar_health_status 1\n"), std::string::npos);
  EXPECT_NE(prom.find("pillar_health_check_ok{check=\"cpu.count\"} 1\n"), std::string::npos);
  EXPECT_NE(prom.find("pillar_health_check_ok{check=\"net.\\\"odd\\\"\"} 0\n"), std::string::npos);
  EXPECT_NE(prom.find("pillar_health_check_value{check=\"cpu.count\"} 2\n"), std::string::npos);
  const std::string json = HealthJson(r);
  EXPECT_NE(json.find("\"exit_code\":1"), std::string::npos);
  EXPECT_NE(json.find("\"verdict\":\"unhealthy\""), std::string::npos);
  EXPECT_NE(FormatHealthTable(r).find("n: UNHEALTHY (2 checks, exit 1)"), std::string::npos);
}

}  // namespace
}  // namespace pillar::health
