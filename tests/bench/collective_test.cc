// nccl-tests compatibility without a cluster: flag parsing, the sweep's sizes, byte counts and
// bus-bandwidth factors against rows computed by hand, the output's exact shape (golden lines
// taken from real nccl-tests output), and the correctness check's ability to see a wrong or
// misplaced element.
#include "bench/collective.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "bench/collective_options.h"
#include "bench/collective_runner.h"
#include "bench/communicator.h"
#include "bench/elements.h"
#include "bench/nccl_tests_report.h"

namespace pillar::bench {
namespace {

absl::StatusOr<CollectiveOptions> Parse(std::vector<std::string> args, const char* env = nullptr) {
  return ParseCollectiveArgs(args, env);
}

std::string ErrorOf(std::vector<std::string> args) {
  auto parsed = Parse(std::move(args));
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(CollectiveOptionsTest, SizesTakeBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("8"), 8u);
  EXPECT_EQ(*ParseByteSize("64K"), 65536u);
  EXPECT_EQ(*ParseByteSize("32M"), 33554432u);
  EXPECT_EQ(*ParseByteSize("16G"), 17179869184u);
  EXPECT_EQ(*ParseByteSize("1k"), 1024u);
  EXPECT_EQ(*ParseByteSize("2MB"), 2097152u);
  for (const char* bad : {"", "M", "12Q", "-1", "1.5G", "99999999999T"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

TEST(CollectiveOptionsTest, DefaultsAreNcclTests) {
  auto o = Parse({"allreduce"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->min_bytes, 32u << 20);
  EXPECT_EQ(o->max_bytes, 32u << 20);
  EXPECT_EQ(o->step_bytes, 1u << 20);
  EXPECT_EQ(o->step_factor, 1u);
  EXPECT_EQ(o->iters, 20);
  EXPECT_EQ(o->warmup_iters, 1);
  EXPECT_TRUE(o->check);
  EXPECT_EQ(o->ops, std::vector<ReduceOp>{ReduceOp::kSum});
  EXPECT_EQ(o->types, std::vector<DataType>{DataType::kFloat});
  EXPECT_EQ(o->root, 0);
  EXPECT_EQ(o->average, 1);
  EXPECT_EQ(o->cycles, 1);
  EXPECT_FALSE(o->min_busbw.has_value());
}

TEST(CollectiveOptionsTest, ShortLongAttachedAndEqualsFormsAllParse) {
  auto o = Parse({"-b8",      "-e",       "128M",        "--stepfactor=2",
                  "--iters",  "5",        "-w0",         "-c",
                  "0",        "-o",       "all",         "-d",
                  "bfloat16", "-r",       "3",           "-a",
                  "3",        "-z",       "1",           "-N",
                  "2",        "-g",       "1",           "reducescatter",
                  "--json",   "out.json", "--min-busbw", "431"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->collective, Collective::kReduceScatter);
  EXPECT_EQ(o->min_bytes, 8u);
  EXPECT_EQ(o->max_bytes, 128u << 20);
  EXPECT_EQ(o->step_factor, 2u);
  EXPECT_EQ(o->iters, 5);
  EXPECT_EQ(o->warmup_iters, 0);
  EXPECT_FALSE(o->check);
  EXPECT_EQ(o->ops.size(), 5u);
  EXPECT_EQ(o->types, std::vector<DataType>{DataType::kBfloat16});
  EXPECT_EQ(o->root, 3);
  EXPECT_EQ(o->average, 3);
  EXPECT_TRUE(o->blocking);
  EXPECT_EQ(o->cycles, 2);
  EXPECT_EQ(o->json_path, "out.json");
  EXPECT_EQ(*o->min_busbw, 431);
}

TEST(CollectiveOptionsTest, TheThresholdComesFromTheEnvironmentUnlessGiven) {
  EXPECT_EQ(*Parse({"allreduce"}, "460")->min_busbw, 460);
  EXPECT_EQ(*Parse({"allreduce", "--min-busbw", "1"}, "460")->min_busbw, 1);
  EXPECT_NE(Parse({"allreduce"}, "fast").status().message().find("NCCL_TESTS_MIN_BW"),
            std::string::npos);
}

TEST(CollectiveOptionsTest, WhatCannotBeHonouredIsRefusedByName) {
  EXPECT_NE(ErrorOf({"allreduce", "-g", "8"}).find("-g 8"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-t", "2"}).find("-t 2"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-G", "1"}).find("CUDA graphs"), std::string::npos);
  EXPECT_EQ(ErrorOf({"allreduce", "-g", "1", "-G", "0", "-t", "1"}), "");
  EXPECT_NE(ErrorOf({"allreduce", "-T", "60"}).find("bound the run with the launcher"),
            std::string::npos);
  EXPECT_EQ(ErrorOf({"allreduce", "-p", "1", "-C", "1", "-R", "0", "-T", "0"}), "");
  EXPECT_NE(ErrorOf({"allreduce", "-C", "2"}).find("-C: 2 is out of range"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-x", "1"}).find("unknown flag '-x'"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-a", "4"}).find("-a: 4 is out of range"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-n", "0"}).find("-n"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-d", "complex"}).find("unknown type 'complex'"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-o", "xor"}).find("unknown operation 'xor'"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-b", "1G", "-e", "1M"}).find("larger than -e"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "-b"}).find("needs a value"), std::string::npos);
  EXPECT_NE(ErrorOf({"-b", "8"}).find("which collective"), std::string::npos);
  EXPECT_NE(ErrorOf({"allscatter"}).find("unknown collective 'allscatter'"), std::string::npos);
  EXPECT_NE(ErrorOf({"allreduce", "--backend", "nccl"}).find("not mpi or gloo"), std::string::npos);
}

TEST(CollectiveRunnerTest, SizesStepByFactorOrByBytes) {
  CollectiveOptions o;
  o.min_bytes = 8;
  o.max_bytes = 128u << 20;
  o.step_factor = 2;
  const std::vector<size_t> doubling = CollectiveRunner::Sizes(o);
  ASSERT_EQ(doubling.size(), 25u);  // 2^3 .. 2^27
  EXPECT_EQ(doubling.front(), 8u);
  EXPECT_EQ(doubling.back(), 128u << 20);
  o.min_bytes = 1 << 20;
  o.max_bytes = 4 << 20;
  o.step_factor = 1;
  EXPECT_EQ(CollectiveRunner::Sizes(o), (std::vector<size_t>{1 << 20, 2 << 20, 3 << 20, 4 << 20}));
  o.min_bytes = 0;
  o.max_bytes = 16;
  o.step_factor = 2;
  EXPECT_EQ(CollectiveRunner::Sizes(o), std::vector<size_t>{0});  // 0 * 2 never grows
}

// One rank, in process: every collective of one rank leaves its input as its output. It
// cannot reduce bfloat16, so the runner's handling of what a backend refuses is exercised.
class OneRank final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string Describe() const override { return "one rank"; }
  absl::Status Supports(Collective c, DataType type, ReduceOp) const override {
    if (Reduces(c) && type == DataType::kBfloat16) {
      return absl::UnimplementedError("no bfloat16 reductions here");
    }
    return absl::OkStatus();
  }
  absl::Status Run(const CollectiveCall& call) override {
    ++calls;
    const size_t bytes = call.count * DataTypeSize(call.type);
    if (!call.in_place && bytes > 0) std::memcpy(call.recv, call.send, bytes);
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  absl::StatusOr<double> Combine(double value, ReduceOp) override { return value; }
  absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine) override {
    return std::vector<std::string>{std::string(mine)};
  }
  int calls = 0;
};

TEST(CollectiveRunnerTest, RowsChecksAndRefusedCombinationsOnOneRank) {
  OneRank comm;
  auto o = Parse({"allreduce", "-b", "1K", "-e", "4K", "-f", "2", "-n", "3", "-w", "1", "-d", "all",
                  "-o", "sum"});
  ASSERT_TRUE(o.ok());
  CollectiveRunner runner(comm, *o);
  int printed = 0;
  auto summary = runner.Run([&](const CollectiveRow&) { ++printed; });
  ASSERT_TRUE(summary.ok()) << summary.status();
  // 9 types (bfloat16 refused and named) x 3 sizes.
  EXPECT_EQ(printed, 27);
  EXPECT_EQ(summary->rows.size(), 27u);
  ASSERT_EQ(summary->skipped.size(), 1u);
  EXPECT_EQ(summary->skipped[0], "bfloat16 sum: no bfloat16 reductions here");
  EXPECT_EQ(summary->wrong, 0u);
  for (const CollectiveRow& row : summary->rows) {
    EXPECT_EQ(row.out_of_place.wrong, 0u);
    EXPECT_EQ(row.in_place.wrong, 0u);
    EXPECT_GT(row.out_of_place.seconds, 0);
  }
  // Per placement: 1 warm-up, 3 timed, 1 checked.
  EXPECT_EQ(comm.calls, 27 * 2 * 5);
  // Asked for alone, the refused combination is an error, not an empty run.
  auto alone = Parse({"allreduce", "-b", "1K", "-e", "1K", "-d", "bfloat16"});
  ASSERT_TRUE(alone.ok());
  CollectiveRunner refused(comm, *alone);
  EXPECT_EQ(refused.Run([](const CollectiveRow&) {}).status().code(),
            absl::StatusCode::kUnimplemented);
  // A root beyond the ranks is refused.
  auto rooted = Parse({"broadcast", "-b", "1K", "-e", "1K", "-r", "1"});
  ASSERT_TRUE(rooted.ok());
  CollectiveRunner beyond(comm, *rooted);
  EXPECT_NE(beyond.Run([](const CollectiveRow&) {}).status().message().find("only 1 ranks"),
            std::string::npos);
}

TEST(CollectiveTest, CountsAndBandwidthMatchRowsComputedByHand) {
  // allreduce, 8 ranks, 16 GiB of floats in 80 ms: 17179869184 B / 0.08 s = 214.748 GB/s;
  // busbw = algbw * 2 * 7 / 8.
  Counts c = CollectiveCounts(Collective::kAllReduce, 16ull << 30, DataType::kFloat, 8, 3);
  EXPECT_EQ(c.count, 4294967296u);
  EXPECT_EQ(c.printed_bytes, 17179869184u);
  Bandwidth bw = CollectiveBandwidth(Collective::kAllReduce, c.count, DataType::kFloat, 8, 0.08);
  EXPECT_NEAR(bw.algbw, 214.748, 0.001);
  EXPECT_NEAR(bw.busbw, 375.809, 0.001);

  // allgather, 4 ranks, 1 MiB of floats: 65536 elements from each rank, 1 MiB received;
  // algbw counts the whole output (65536 * 4 * 4 B) per second; busbw * 3/4.
  c = CollectiveCounts(Collective::kAllGather, 1 << 20, DataType::kFloat, 4, 2);
  EXPECT_EQ(c.count, 65536u);
  EXPECT_EQ(c.send, 65536u);
  EXPECT_EQ(c.recv, 262144u);
  EXPECT_EQ(c.in_place_offset, 2u * 65536u);
  EXPECT_EQ(c.printed_bytes, 1u << 20);
  bw = CollectiveBandwidth(Collective::kAllGather, c.count, DataType::kFloat, 4, 0.001);
  EXPECT_NEAR(bw.algbw, 1.048576, 1e-9);
  EXPECT_NEAR(bw.busbw, 0.786432, 1e-9);

  // reducescatter, 4 ranks, 1 MiB: the size column is the input (1 MiB), count the share.
  c = CollectiveCounts(Collective::kReduceScatter, 1 << 20, DataType::kFloat, 4, 1);
  EXPECT_EQ(c.count, 65536u);
  EXPECT_EQ(c.send, 262144u);
  EXPECT_EQ(c.printed_bytes, 1u << 20);
  bw = CollectiveBandwidth(Collective::kReduceScatter, c.count, DataType::kFloat, 4, 0.001);
  EXPECT_NEAR(bw.busbw, 0.786432, 1e-9);

  // alltoall: per-peer count, factor (n-1)/n.
  c = CollectiveCounts(Collective::kAllToAll, 1 << 20, DataType::kDouble, 4, 0);
  EXPECT_EQ(c.count, 32768u);
  EXPECT_EQ(c.printed_bytes, 1u << 20);
  EXPECT_NEAR(
      CollectiveBandwidth(Collective::kAllToAll, c.count, DataType::kDouble, 4, 0.001).busbw,
      0.786432, 1e-9);

  // broadcast, reduce, sendrecv: busbw == algbw.
  for (Collective one : {Collective::kBroadcast, Collective::kReduce, Collective::kSendRecv}) {
    c = CollectiveCounts(one, 1000, DataType::kInt8, 16, 5);
    EXPECT_EQ(c.count, 1000u);
    bw = CollectiveBandwidth(one, c.count, DataType::kInt8, 16, 1e-6);
    EXPECT_NEAR(bw.algbw, 1.0, 1e-9);
    EXPECT_EQ(bw.busbw, bw.algbw);
  }
}

// The three header lines and a row exactly as NVIDIA's nccl-tests prints them (a row of
// `sendrecv_perf -b 128M -e 1G -f 2 -g 8` on 8 A100s, from its published output).
TEST(NcclTestsReportTest, HeaderAndRowsAreCharacterForCharacterNcclTests) {
  EXPECT_EQ(FormatHeader(),
            "#                                                              out-of-place        "
            "               in-place          \n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong "
            "    time   algbw   busbw #wrong\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
            "     (us)  (GB/s)  (GB/s)       \n");
  CollectiveRow row;
  row.bytes = 134217728;
  row.count = 33554432;
  row.type = DataType::kFloat;
  row.op = ReduceOp::kSum;
  row.root = -1;
  row.out_of_place = {.seconds = 1211.2e-6, .bandwidth = {110.81, 110.81}, .wrong = 0};
  row.in_place = {.seconds = 1211.8e-6, .bandwidth = {110.76, 110.76}, .wrong = std::nullopt};
  EXPECT_EQ(FormatRow(row),
            "   134217728      33554432     float     sum      -1   1211.2  110.81  110.81      0 "
            "  1211.8  110.76  110.76    N/A\n");
  // Times switch decimals at 100 us and 10 ms, as nccl-tests does.
  row.out_of_place.seconds = 36.35e-6;
  row.in_place.seconds = 54321e-6;
  row.op.reset();
  row.in_place.wrong = 3;
  EXPECT_EQ(FormatRow(row),
            "   134217728      33554432     float    none      -1    36.35  110.81  110.81      0 "
            "   54321  110.76  110.76      3\n");
}

TEST(NcclTestsReportTest, TheAverageIsTheSixthTokenAndTheThresholdDecides) {
  CollectiveSummary s;
  s.avg_busbw = 431.5;
  CollectiveOptions o;
  std::string footer = FormatFooter(s, o);
  EXPECT_EQ(footer, "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 431.5 \n#\n");
  std::vector<std::string> tokens;
  std::string line = footer.substr(footer.find("# Avg"));
  for (size_t at = 0; at < line.size();) {
    size_t end = line.find_first_of(" \n", at);
    if (end > at) tokens.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  ASSERT_GE(tokens.size(), 6u);
  EXPECT_EQ(tokens[5], "431.5");
  EXPECT_TRUE(Passed(s, o));
  o.min_busbw = 460;
  EXPECT_NE(FormatFooter(s, o).find(": 431.5 FAILED"), std::string::npos);
  EXPECT_FALSE(Passed(s, o));
  o.min_busbw = 431;
  EXPECT_TRUE(Passed(s, o));
  s.wrong = 2;
  EXPECT_NE(FormatFooter(s, o).find("# Out of bounds values : 2 FAILED"), std::string::npos);
  EXPECT_FALSE(Passed(s, o));
}

TEST(ElementsTest, SixteenBitFloatsConvertWithRoundToNearestEven) {
  EXPECT_EQ(HalfFromFloat(1.0f), 0x3C00);
  EXPECT_EQ(HalfFromFloat(-2.0f), 0xC000);
  EXPECT_EQ(HalfFromFloat(65504.0f), 0x7BFF);
  EXPECT_EQ(HalfFromFloat(65520.0f), 0x7C00);                // rounds to infinity
  EXPECT_EQ(HalfFromFloat(5.960464477539063e-08f), 0x0001);  // the smallest subnormal
  EXPECT_EQ(HalfFromFloat(1e-9f), 0x0000);
  EXPECT_EQ(HalfFromFloat(1.0009765625f), 0x3C01);
  EXPECT_EQ(HalfFromFloat(1.00048828125f), 0x3C00);  // a tie: to even
  EXPECT_EQ(Bfloat16FromFloat(1.0f), 0x3F80);
  EXPECT_EQ(Bfloat16FromFloat(1.00390625f), 0x3F80);  // a tie: to even
  for (int i = -300; i <= 300; ++i) {
    EXPECT_EQ(FloatFromHalf(HalfFromFloat(float(i))), float(i));
    if (i >= -256 && i <= 256) {
      EXPECT_EQ(FloatFromBfloat16(Bfloat16FromFloat(float(i))), float(i));
    }
  }
  EXPECT_EQ(FloatFromHalf(0x0001), 5.960464477539063e-08f);
}

// Simulates a reduction across `ranks` with the same helpers a software reduction uses, and
// checks every type and operator: a correct result has no wrong element, a changed or shifted
// one is seen.
TEST(ElementsTest, TheCheckAcceptsTheRightResultAndSeesAWrongOrMisplacedOne) {
  const int ranks = 3;
  const size_t count = 1000;
  for (DataType type : kAllDataTypes) {
    const size_t width = DataTypeSize(type);
    for (ReduceOp op : kAllReduceOps) {
      std::vector<std::byte> acc(count * width), mine(count * width);
      FillInput(Collective::kAllReduce, type, op, 0, ranks, acc.data(), count);
      for (int r = 1; r < ranks; ++r) {
        FillInput(Collective::kAllReduce, type, op, r, ranks, mine.data(), count);
        ReduceInto(type, op, acc.data(), mine.data(), count);
      }
      if (op == ReduceOp::kAvg) DivideBy(type, acc.data(), count, ranks);
      EXPECT_EQ(CountWrong(Collective::kAllReduce, type, op, 1, ranks, 0, acc.data(), count), 0u)
          << DataTypeName(type) << " " << ReduceOpName(op);
      std::vector<std::byte> bad = acc;
      CorruptFirstChecked(Collective::kAllReduce, type, 0, 0, bad.data(), count);
      EXPECT_EQ(CountWrong(Collective::kAllReduce, type, op, 1, ranks, 0, bad.data(), count), 1u)
          << DataTypeName(type) << " " << ReduceOpName(op);
      // The right values one chunk off (as a reduce-scatter whose output landed at the wrong
      // offset): many elements differ (a product of 1s and 2s over 3 ranks repeats most).
      std::vector<std::byte> shifted(count * width);
      std::memcpy(shifted.data(), acc.data() + 128 * width, (count - 128) * width);
      EXPECT_GT(CountWrong(Collective::kAllReduce, type, op, 1, ranks, 0, shifted.data(), count),
                count / 5)
          << DataTypeName(type) << " " << ReduceOpName(op);
    }
  }
}

TEST(ElementsTest, GatheredAndExchangedLayoutsAreChecked) {
  const int ranks = 4;
  const size_t count = 64;
  // allgather: rank k's input at k * count.
  std::vector<float> out(count * ranks);
  for (int k = 0; k < ranks; ++k) {
    FillInput(Collective::kAllGather, DataType::kFloat, ReduceOp::kSum, k, ranks,
              out.data() + size_t(k) * count, count);
  }
  EXPECT_EQ(CountWrong(Collective::kAllGather, DataType::kFloat, ReduceOp::kSum, 2, ranks, 0,
                       out.data(), count),
            0u);
  std::swap(out[0], out[count]);
  EXPECT_GT(CountWrong(Collective::kAllGather, DataType::kFloat, ReduceOp::kSum, 2, ranks, 0,
                       out.data(), count),
            0u);
  // sendrecv: rank 2 holds rank 1's input.
  std::vector<int32_t> got(count);
  FillInput(Collective::kSendRecv, DataType::kInt32, ReduceOp::kSum, 1, ranks, got.data(), count);
  EXPECT_EQ(CountWrong(Collective::kSendRecv, DataType::kInt32, ReduceOp::kSum, 2, ranks, 0,
                       got.data(), count),
            0u);
  // Rank 3 expects rank 2's input, not rank 1's.
  EXPECT_GT(CountWrong(Collective::kSendRecv, DataType::kInt32, ReduceOp::kSum, 3, ranks, 0,
                       got.data(), count),
            count / 2);
  // broadcast: every rank must end with the root's values; a rank that kept its own (an in-place
  // broadcast that never arrived) is wrong.
  std::vector<double> mine(count), roots(count);
  FillInput(Collective::kBroadcast, DataType::kDouble, ReduceOp::kSum, 2, ranks, mine.data(),
            count);
  FillInput(Collective::kBroadcast, DataType::kDouble, ReduceOp::kSum, 1, ranks, roots.data(),
            count);
  EXPECT_EQ(CountWrong(Collective::kBroadcast, DataType::kDouble, ReduceOp::kSum, 2, ranks, 1,
                       roots.data(), count),
            0u);
  EXPECT_GT(CountWrong(Collective::kBroadcast, DataType::kDouble, ReduceOp::kSum, 2, ranks, 1,
                       mine.data(), count),
            count / 2);
  // reduce: only the root's output is defined.
  EXPECT_EQ(CountWrong(Collective::kReduce, DataType::kInt32, ReduceOp::kSum, 1, ranks, 0,
                       got.data(), count),
            0u);
}

}  // namespace
}  // namespace pillar::bench
