// Decoding an Open Inference Protocol request body: pillar's decoder (simdjson, validated into
// raw tensor bytes) beside nlohmann::json, the library a C++ server would otherwise reach for,
// doing the same job (parse, walk, convert the numbers to float). Same body, same process.
//
//   build/bench/json_decode_benchmark --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "protocol/json_codec.h"

namespace {

std::string Body(int rows) {
  std::string data;
  for (int i = 0; i < rows * 64; ++i) {
    if (i > 0) data += ',';
    data += std::to_string((i * 7) % 17);
  }
  return R"({"id":"bench","inputs":[{"name":"pixels","datatype":"FP32","shape":[)" +
         std::to_string(rows) + ",64],\"data\":[" + data + "]}]}";
}

void BM_PillarDecode(benchmark::State& state) {
  const std::string body = Body(int(state.range(0)));
  pillar::protocol::InferenceRequestDecoder decoder;
  for (auto _ : state) {
    auto request = decoder.Decode(body);
    benchmark::DoNotOptimize(request);
    if (!request.ok()) state.SkipWithError("decode failed");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(body.size()));
}

void BM_NlohmannDecode(benchmark::State& state) {
  const std::string body = Body(int(state.range(0)));
  for (auto _ : state) {
    nlohmann::json doc = nlohmann::json::parse(body);
    std::vector<float> values;
    for (const auto& input : doc["inputs"]) {
      values.reserve(input["data"].size());
      for (const auto& v : input["data"]) values.push_back(v.get<float>());
    }
    benchmark::DoNotOptimize(values);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(body.size()));
}

BENCHMARK(BM_PillarDecode)->Arg(1)->Arg(64);
BENCHMARK(BM_NlohmannDecode)->Arg(1)->Arg(64);

}  // namespace

BENCHMARK_MAIN();
