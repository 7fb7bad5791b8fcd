// Cluster validation end to end with the real binary: `pillar bench collective` under
// `mpirun -np 2` and `-np 4` (oversubscribed on this machine) for every collective with every
// element checked, an injected wrong element and a bandwidth threshold that fail the run, Gloo
// ranks meeting through a shared directory and through a real Redis server, and
// `pillar health` on a fake node with its JSON and Prometheus outputs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/redis_server.h"
#include "testing/server_process.h"
#include "testing/temp_dir.h"

namespace pillar {
namespace {

namespace fs = std::filesystem;

struct Ran {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command line; stdout only (stderr goes to the test's log).
Ran Shell(const std::string& command) {
  Ran ran;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return ran;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) ran.out.append(buffer, n);
  const int status = ::pclose(pipe);
  ran.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ran;
}

std::string Mpirun(int ranks, const std::string& args) {
  return "mpirun --oversubscribe -np " + std::to_string(ranks) + " " + testing::PillarBinary() +
         " bench collective " + args;
}

// The sixth token of the "# Avg bus bandwidth" line, as health checkers read it.
double AvgBusBw(const std::string& out) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# Avg bus bandwidth", 0) != 0) continue;
    std::istringstream tokens(line);
    std::string t;
    for (int i = 0; i < 6; ++i) tokens >> t;
    return std::stod(t);
  }
  return -1;
}

int DataRows(const std::string& out) {
  int rows = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') ++rows;
  }
  return rows;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // CI runs as root; Open MPI refuses that unless told.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);  // containers lack CMA
    ::unsetenv("NCCL_TESTS_MIN_BW");
  }
};

TEST_F(ClusterTest, MpiRunsEveryCollectiveOnTwoAndFourRanksWithEveryElementRight) {
  for (int ranks : {2, 4}) {
    for (const char* op : {"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                           "alltoall", "sendrecv"}) {
      const Ran ran = Shell(Mpirun(ranks, std::string(op) + " -b 1K -e 64K -f 8 -n 5 -r 1"));
      EXPECT_EQ(ran.exit_code, 0) << op << " on " << ranks << "\n" << ran.out;
      EXPECT_NE(ran.out.find("# Out of bounds values : 0 OK"), std::string::npos) << ran.out;
      EXPECT_EQ(DataRows(ran.out), 3) << ran.out;  // 1K, 8K, 64K
      EXPECT_GT(AvgBusBw(ran.out), 0) << ran.out;
      EXPECT_NE(ran.out.find("#  Rank " + std::string(ranks == 2 ? " 1" : " 3")),
                std::string::npos);
    }
  }
  // Every type and every operator at once.
  const Ran all = Shell(Mpirun(4, "allreduce -b 4K -e 4K -d all -o all -n 2"));
  EXPECT_EQ(all.exit_code, 0) << all.out;
  EXPECT_EQ(DataRows(all.out), 50) << all.out;  // 10 types x 5 operators
  EXPECT_NE(all.out.find("bfloat16     avg"), std::string::npos) << all.out;
}

TEST_F(ClusterTest, AWrongElementIsCountedAndFailsTheRun) {
  const Ran ran = Shell(Mpirun(2, "allreduce -b 1K -e 4K -f 2 -n 2 --inject-fault"));
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_NE(ran.out.find("# Out of bounds values : 6 FAILED"), std::string::npos) << ran.out;
  // Without the check nothing is counted: the #wrong columns say N/A.
  const Ran unchecked = Shell(Mpirun(2, "allreduce -b 1K -e 1K -n 2 -c 0 --inject-fault"));
  EXPECT_EQ(unchecked.exit_code, 0) << unchecked.out;
  EXPECT_NE(unchecked.out.find("N/A"), std::string::npos);
}

TEST_F(ClusterTest, ABandwidthThresholdTurnsTheRunIntoPassOrFail) {
  Ran ran = Shell(Mpirun(2, "allreduce -b 64K -e 64K -n 3 --min-busbw 1000000"));
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_NE(ran.out.find(" FAILED\n"), std::string::npos) << ran.out;
  ran = Shell("NCCL_TESTS_MIN_BW=0.000001 " + Mpirun(2, "allreduce -b 64K -e 64K -n 3"));
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find(" OK\n#\n"), std::string::npos) << ran.out;
}

TEST_F(ClusterTest, JsonCarriesTheSameRows) {
  testing::TempDir dir;
  const fs::path json = dir.path() / "r.json";
  const Ran ran = Shell(Mpirun(2, "alltoall -b 8K -e 32K -f 2 -n 2 --json " + json.string()));
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("\"collective\":\"alltoall\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"ranks\":2"), std::string::npos);
  EXPECT_NE(text.find("\"size_bytes\":32768"), std::string::npos);
  EXPECT_NE(text.find("\"passed\":true"), std::string::npos);
  // -N repeats the sweep.
  const Ran cycles = Shell(Mpirun(2, "alltoall -b 8K -e 32K -f 2 -n 2 -N 3"));
  EXPECT_EQ(cycles.exit_code, 0) << cycles.out;
  EXPECT_EQ(DataRows(cycles.out), 9) << cycles.out;
}

// N gloo ranks as separate processes; returns rank 0's output and every exit code.
std::pair<std::string, std::vector<int>> Gloo(int ranks, const std::string& rendezvous,
                                              const std::string& args, const fs::path& dir) {
  std::string script;
  for (int r = 0; r < ranks; ++r) {
    script += "{ " + testing::PillarBinary() + " bench collective " + args +
              " --backend gloo --iface lo --rendezvous " + rendezvous + " --rank " +
              std::to_string(r) + " --world-size " + std::to_string(ranks) + " > " +
              (dir / ("out." + std::to_string(r))).string() + "; echo $? > " +
              (dir / ("rc." + std::to_string(r))).string() + "; } &\n";
  }
  script += "wait\n";
  Shell("bash -c '" + script + "'");
  std::vector<int> codes;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream rc(dir / ("rc." + std::to_string(r)));
    int code = -1;
    rc >> code;
    codes.push_back(code);
  }
  std::ifstream out(dir / "out.0");
  return {std::string((std::istreambuf_iterator<char>(out)), {}), codes};
}

TEST_F(ClusterTest, GlooRanksMeetThroughASharedDirectory) {
  for (int ranks : {2, 4}) {
    for (const char* op : {"allreduce", "reducescatter", "alltoall", "sendrecv"}) {
      testing::TempDir dir;
      fs::create_directories(dir.path() / "rdv");
      auto [out, codes] = Gloo(ranks, "file:" + (dir.path() / "rdv").string(),
                               std::string(op) + " -b 1K -e 64K -f 8 -n 3 -d all", dir.path());
      EXPECT_EQ(codes, std::vector<int>(size_t(ranks), 0)) << op << "\n" << out;
      EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
      EXPECT_NE(out.find("gloo 0.5.0 over tcp (lo)"), std::string::npos) << out;
      EXPECT_EQ(DataRows(out), 30) << out;  // 3 sizes x 10 types
    }
  }
}

TEST_F(ClusterTest, GlooRanksMeetThroughRedis) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  testing::TempDir dir;
  auto [out, codes] = Gloo(2, "redis://127.0.0.1:" + std::to_string(redis.port()),
                           "allreduce -b 4K -e 64K -f 4 -n 3 -o all --job redis-run", dir.path());
  EXPECT_EQ(codes, (std::vector<int>{0, 0})) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
  EXPECT_EQ(DataRows(out), 15) << out;  // 4K, 16K, 64K x 5 operators
}

TEST_F(ClusterTest, UsageErrorsExitTwoWithAReason) {
  std::string out, err;
  EXPECT_EQ(testing::RunPillar({"bench", "collective", "allreduce", "-g", "8"}, &out, &err), 2);
  EXPECT_NE(err.find("-g 8: one device per process"), std::string::npos) << err;
  EXPECT_EQ(testing::RunPillar({"bench", "collective", "allreduce", "--backend", "gloo", "--rank",
                                "0", "--world-size", "2"},
                               &out, &err),
            2);
  EXPECT_NE(err.find("gloo needs --rendezvous"), std::string::npos) << err;
  EXPECT_EQ(
      testing::RunPillar({"bench", "collective", "allreduce", "--backend", "gloo", "--rendezvous",
                          "file:/nonexistent/dir", "--rank", "0", "--world-size", "1"},
                         &out, &err),
      2);
  EXPECT_NE(err.find("not a writable directory"), std::string::npos) << err;
  // More than this machine could ever hold: refused before any rank waits for another.
  EXPECT_EQ(
      testing::RunPillar({"bench", "collective", "allreduce", "-e", "64T", "--backend", "gloo",
                          "--rank", "0", "--world-size", "2", "--rendezvous", "file:/nonexistent"},
                         &out, &err),
      2);
  EXPECT_NE(err.find("needs twice that in host memory"), std::string::npos) << err;
  EXPECT_EQ(testing::RunPillar({"bench", "collective", "-h"}, &out, &err), 0);
  EXPECT_NE(out.find("-b,--minbytes"), std::string::npos);
}

TEST_F(ClusterTest, HealthOnAFakeNodeWritesJsonAndPrometheusAndExitsByVerdict) {
  testing::TempDir dir;
  const fs::path root = dir.path() / "root";
  fs::create_directories(root / "proc");
  fs::create_directories(root / "sys/class/net/lo");
  std::ofstream(root / "proc/cpuinfo") << "processor : 0\nmodel name : Fake CPU\nprocessor : 1\n";
  std::ofstream(root / "proc/meminfo") << "MemTotal: 8388608 kB\nSwapTotal: 0 kB\n";
  std::ofstream(root / "sys/class/net/lo/operstate") << "unknown\n";
  const fs::path config = dir.path() / "node.toml";
  std::ofstream(config) << "name = \"fake\"\n[cpu]\nmin_count = 2\n[memory]\nmin_total_gib = 7\n"
                           "swap_off = true\n[network]\ninterfaces_up = [\"lo\"]\n"
                           "[collective]\ncommand = \"mpirun --oversubscribe -np 2 "
                        << testing::PillarBinary()
                        << " bench collective allreduce -b 64K -e 256K -f 2 -n 3\"\n"
                           "min_busbw_gbps = 0.000001\ntimeout_s = 120\n";
  const fs::path prom = dir.path() / "health.prom";
  std::string out, err;
  EXPECT_EQ(testing::RunPillar({"health", "-c", config.string(), "--root", root.string(), "--json",
                                "--prometheus", prom.string()},
                               &out, &err),
            0)
      << out << err;
  EXPECT_NE(out.find("\"verdict\":\"healthy\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"name\":\"collective.busbw\",\"status\":\"pass\""), std::string::npos)
      << out;
  std::ifstream in(prom);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("pillar_health_status 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pillar_health_check_ok{check=\"memory.total\"} 1"), std::string::npos);

  // The same node against a bigger family's thresholds: unhealthy, named in the table.
  std::ofstream(config) << "[cpu]\nmin_count = 96\n";
  EXPECT_EQ(
      testing::RunPillar({"health", "-c", config.string(), "--root", root.string()}, &out, &err),
      1);
  EXPECT_NE(out.find("cpu.count  FAIL"), std::string::npos) << out;
  // A config with a typo: could not check.
  std::ofstream(config) << "[cpu]\nmin_cout = 96\n";
  EXPECT_EQ(
      testing::RunPillar({"health", "-c", config.string(), "--root", root.string()}, &out, &err),
      2);
  EXPECT_NE(err.find("unknown key 'min_cout' in [cpu]"), std::string::npos) << err;
}

}  // namespace
}  // namespace pillar
