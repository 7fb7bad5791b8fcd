#include "monitor/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace pillar::monitor {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndLabelsInPrometheusText) {
  MetricsRegistry registry;
  auto& requests = registry.AddCounter("x_requests_total", "Requests.", {"model", "outcome"});
  requests.Get({"a\"b", "ok"}).Increment(2);
  registry.AddGauge("x_inflight", "In flight.").Get().Set(3);
  std::string text = registry.Render();
  EXPECT_NE(text.find("# HELP x_requests_total Requests.\n# TYPE x_requests_total counter\n"),
            std::string::npos);
  EXPECT_NE(text.find("x_requests_total{model=\"a\\\"b\",outcome=\"ok\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("x_inflight 3\n"), std::string::npos);
  EXPECT_NE(text.find("process_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(text.find("process_cpu_seconds_total "), std::string::npos);
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  auto& h = registry.AddHistogram("x_seconds", "Latency.", {}, {0.1, 1});
  h.Get().Observe(0.05);
  h.Get().Observe(0.5);
  h.Get().Observe(5);
  std::string text = registry.Render();
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.1\"} 1\nx_seconds_bucket{le=\"1\"} "
                      "2\nx_seconds_bucket{le=\"+Inf\"} 3\n"
                      "x_seconds_sum 5.55\nx_seconds_count 3\n"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, LatencyBucketsTellSubMicrosecondStagesApart) {
  MetricsRegistry registry;
  auto& h = registry.AddHistogram("stage_seconds", "S.", {}, LatencyBuckets());
  h.Get().Observe(80e-9);
  h.Get().Observe(300e-9);
  h.Get().Observe(2e-6);
  const Histogram::Snapshot s = h.Get().Take();
  ASSERT_GE(s.bounds.size(), 4u);
  EXPECT_LT(s.bounds[0], 1e-6);
  EXPECT_EQ(s.cumulative[0], 1u);  // <= 100 ns
  EXPECT_EQ(s.cumulative[1], 1u);  // <= 250 ns
  EXPECT_EQ(s.cumulative[2], 2u);  // <= 500 ns
  EXPECT_EQ(s.count, 3u);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  auto& c = registry.AddCounter("x_total", "X.");
  auto& h = registry.AddHistogram("x_h", "H.", {}, LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Get().Increment();
        h.Get().Observe(1e-5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Get().value(), 40000u);
  EXPECT_EQ(h.Get().Take().count, 40000u);
}

// More threads than shards, each observing its own value: every bucket and the sum add up over
// the shards (the values are binary fractions, so the sum is exact).
TEST(MetricsTest, HistogramShardsAddUpOverMoreThreadsThanShards) {
  MetricsRegistry registry;
  auto& h = registry.AddHistogram("x_h", "H.", {}, {0.25, 1, 4});
  const double values[] = {0.125, 0.5, 2, 8};  // one per bucket, +Inf last
  const int threads = int(Histogram::kShards) * 2 + 3;
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) h.Get().Observe(values[t % 4]);
    });
  }
  for (auto& t : running) t.join();
  uint64_t per_bucket[4] = {};
  double sum = 0;
  for (int t = 0; t < threads; ++t) {
    per_bucket[t % 4] += 1000;
    sum += 1000 * values[t % 4];
  }
  const Histogram::Snapshot s = h.Get().Take();
  ASSERT_EQ(s.cumulative.size(), 4u);
  uint64_t expected = 0;
  for (size_t i = 0; i < 4; ++i) {
    expected += per_bucket[i];
    EXPECT_EQ(s.cumulative[i], expected) << i;
  }
  EXPECT_EQ(s.count, uint64_t(threads) * 1000);
  EXPECT_EQ(s.sum, sum);
}

// A held series lives while a handle does; then it leaves at the next render, and asked for again
// it starts from zero. One that Get() asked for stays for good.
TEST(MetricsTest, AHeldSeriesLeavesOnceNothingHoldsIt) {
  MetricsRegistry registry;
  auto& attempts = registry.AddCounter("x_attempts_total", "Attempts.", {"endpoint"});
  auto& latency = registry.AddHistogram("x_latency_seconds", "Latency.", {"endpoint"}, {0.1, 1});
  std::shared_ptr<Counter> a = attempts.Hold({"a"});
  std::shared_ptr<Counter> again = attempts.Hold({"a"});
  EXPECT_EQ(a.get(), again.get());  // one series, however many hold it
  a->Increment(3);
  std::shared_ptr<Histogram> la = latency.Hold({"a"});
  la->Observe(0.5);
  attempts.Get({"kept"}).Increment();
  std::shared_ptr<Counter> pinned = attempts.Hold({"kept"});
  std::string text = registry.Render();
  EXPECT_NE(text.find("x_attempts_total{endpoint=\"a\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_latency_seconds_count{endpoint=\"a\"} 1\n"), std::string::npos);

  a.reset();
  text = registry.Render();  // `again` still holds it
  EXPECT_NE(text.find("x_attempts_total{endpoint=\"a\"} 3\n"), std::string::npos) << text;
  again.reset();
  la.reset();
  pinned.reset();
  text = registry.Render();
  EXPECT_EQ(text.find("endpoint=\"a\""), std::string::npos) << text;
  EXPECT_NE(text.find("x_attempts_total{endpoint=\"kept\"} 1\n"), std::string::npos) << text;

  std::shared_ptr<Counter> back = attempts.Hold({"a"});
  text = registry.Render();
  EXPECT_NE(text.find("x_attempts_total{endpoint=\"a\"} 0\n"), std::string::npos) << text;
  // Get() on a held series keeps it past its handles.
  attempts.Get({"a"}).Increment();
  back.reset();
  text = registry.Render();
  EXPECT_NE(text.find("x_attempts_total{endpoint=\"a\"} 1\n"), std::string::npos) << text;
}

// Handles taken and dropped on many threads while another renders: nothing is freed under a
// holder (run under the sanitizers in the suite's sanitized build).
TEST(MetricsTest, HoldingAndRenderingRaceSafely) {
  MetricsRegistry registry;
  auto& gauges = registry.AddGauge("x_held", "Held.", {"endpoint"});
  std::atomic<bool> stop{false};
  std::vector<std::thread> holders;
  for (int t = 0; t < 4; ++t) {
    holders.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        std::shared_ptr<Gauge> g = gauges.Hold({std::to_string((i + t) % 8)});
        g->Add(1);
        g->Add(-1);
      }
    });
  }
  for (int i = 0; i < 200; ++i) (void)registry.Render();
  stop = true;
  for (std::thread& t : holders) t.join();
  EXPECT_EQ(registry.Render().find("x_held{"), std::string::npos);
}

}  // namespace
}  // namespace pillar::monitor
