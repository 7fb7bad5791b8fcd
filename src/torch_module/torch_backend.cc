// The only translation unit that includes LibTorch. LibTorch reports errors with exceptions
// (c10::Error); they are caught here, at the boundary, and become absl::Status.
#include "torch_module/torch_backend.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <istream>
#include <mutex>
#include <streambuf>
#include <utility>

#include "common/strings.h"

namespace pillar::runtime {
namespace {

using protocol::DataType;

c10::ScalarType ToTorch(DataType type) {
  switch (type) {
    case DataType::kBool:
      return torch::kBool;
    case DataType::kUint8:
      return torch::kUInt8;
    case DataType::kInt8:
      return torch::kInt8;
    case DataType::kInt16:
      return torch::kInt16;
    case DataType::kInt32:
      return torch::kInt32;
    case DataType::kInt64:
      return torch::kInt64;
    case DataType::kFp32:
      return torch::kFloat32;
    case DataType::kFp64:
      return torch::kFloat64;
    // Torch 1.13 has no unsigned types wider than 8 bits.
    case DataType::kUint16:
    case DataType::kUint32:
    case DataType::kUint64:
    case DataType::kBytes:  // no tensors of strings (model configs refuse them)
      break;
  }
  return c10::ScalarType::Undefined;
}

[[nodiscard]] absl::StatusOr<DataType> FromTorch(c10::ScalarType type) {
  switch (type) {
    case torch::kBool:
      return DataType::kBool;
    case torch::kUInt8:
      return DataType::kUint8;
    case torch::kInt8:
      return DataType::kInt8;
    case torch::kInt16:
      return DataType::kInt16;
    case torch::kInt32:
      return DataType::kInt32;
    case torch::kInt64:
      return DataType::kInt64;
    case torch::kFloat32:
      return DataType::kFp32;
    case torch::kFloat64:
      return DataType::kFp64;
    default:
      return absl::InvalidArgumentError(StrCat("unsupported output dtype ", c10::toString(type)));
  }
}

class TorchBackend final : public Backend {
 public:
  TorchBackend(torch::jit::Module module, const models::ModelConfig& config, torch::Device device)
      : module_(std::move(module)), config_(config), device_(device) {}

  // A forward pass runs to its end; BatchingRunner inlines only models measured to be fast.
  bool MayRunInline() const override { return true; }

  const torch::jit::Module& module() const { return module_; }

  [[nodiscard]] absl::StatusOr<std::vector<protocol::Tensor>> Execute(
      std::vector<protocol::Tensor>& inputs) override {
    try {
      c10::InferenceMode guard;
      std::vector<torch::jit::IValue> args;
      args.reserve(inputs.size());
      for (protocol::Tensor& t : inputs) {
        c10::ScalarType type = ToTorch(t.datatype);
        if (type == c10::ScalarType::Undefined) {
          return absl::InvalidArgumentError(StrCat("input '", t.name, "': datatype ",
                                                   protocol::DataTypeName(t.datatype),
                                                   " is not supported by LibTorch"));
        }
        // from_blob borrows the bytes; `inputs` outlives forward().
        torch::Tensor tensor =
            torch::from_blob(t.data.data(), t.shape, torch::TensorOptions().dtype(type));
        args.emplace_back(device_.is_cpu() ? tensor : tensor.to(device_));
      }
      torch::jit::IValue result = module_.forward(args);
      std::vector<torch::Tensor> tensors;
      if (result.isTensor()) {
        tensors.push_back(result.toTensor());
      } else if (result.isTuple()) {
        for (const auto& v : result.toTupleRef().elements()) {
          if (!v.isTensor())
            return absl::InternalError("the model returned a tuple with a non-tensor");
          tensors.push_back(v.toTensor());
        }
      } else if (result.isTensorList()) {
        for (const torch::Tensor& t : result.toTensorVector()) tensors.push_back(t);
      } else {
        return absl::InternalError("the model returned neither a tensor nor a tuple of tensors");
      }
      if (tensors.size() != config_.outputs.size()) {
        return absl::InternalError(StrCat("the model returned ", tensors.size(),
                                          " outputs; its config declares ",
                                          config_.outputs.size()));
      }
      std::vector<protocol::Tensor> outputs;
      outputs.reserve(tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) {
        torch::Tensor t = tensors[i].to(torch::kCPU).contiguous();
        absl::StatusOr<DataType> type = FromTorch(t.scalar_type());
        if (!type.ok()) return type.status();
        if (*type != config_.outputs[i].datatype) {
          return absl::InternalError(StrCat("output '", config_.outputs[i].name, "' is ",
                                            protocol::DataTypeName(*type), "; its config declares ",
                                            protocol::DataTypeName(config_.outputs[i].datatype)));
        }
        protocol::Tensor out;
        out.name = config_.outputs[i].name;
        out.datatype = *type;
        out.shape.assign(t.sizes().begin(), t.sizes().end());
        out.data.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
        outputs.push_back(std::move(out));
      }
      return outputs;
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat("model execution failed: ", e.what()));
    }
  }

 private:
  torch::jit::Module module_;
  const models::ModelConfig config_;
  torch::Device device_;
};

// A read-only stream over bytes in memory, with the seeking LibTorch's archive reader does
// (it asks for the size, then reads records at offsets): no copy of a model that may be
// gigabytes.
class MemoryStreamBuffer final : public std::streambuf {
 public:
  explicit MemoryStreamBuffer(std::string_view bytes) {
    char* begin = const_cast<char*>(bytes.data());  // get area only: never written through
    setg(begin, begin, begin + bytes.size());
  }

 protected:
  pos_type seekoff(off_type offset, std::ios_base::seekdir dir,
                   std::ios_base::openmode which) override {
    if (!(which & std::ios_base::in)) return pos_type(off_type(-1));
    off_type base = dir == std::ios_base::beg   ? 0
                    : dir == std::ios_base::cur ? off_type(gptr() - eback())
                                                : off_type(egptr() - eback());
    return seekpos(pos_type(base + offset), which);
  }

  pos_type seekpos(pos_type position, std::ios_base::openmode which) override {
    const off_type at = off_type(position);
    if (!(which & std::ios_base::in) || at < 0 || at > off_type(egptr() - eback())) {
      return pos_type(off_type(-1));
    }
    setg(eback(), eback() + at, egptr());
    return position;
  }
};

// Builds a tensor of `rows` zero rows for `spec`; -1 dimensions become 1.
protocol::Tensor ZeroInput(const models::TensorSpec& spec, bool batched) {
  protocol::Tensor t;
  t.name = spec.name;
  t.datatype = spec.datatype;
  if (batched) t.shape.push_back(1);
  for (int64_t d : spec.shape) t.shape.push_back(d == -1 ? 1 : d);
  t.data.assign(size_t(t.ElementCount()) * protocol::ElementSize(spec.datatype), '\0');
  return t;
}

// A probe of `rows` rows for `spec` (0: an unbatched input); -1 dimensions become 1. Floating-point
// elements are drawn from a fixed sequence in [0, 1), so that every weight a row meets counts in
// a comparison (zeros would leave a linear layer's weights out); other types are zero, which no
// embedding or index input can find out of range.
protocol::Tensor ProbeInput(const models::TensorSpec& spec, int64_t rows, uint32_t& state) {
  protocol::Tensor t;
  t.name = spec.name;
  t.datatype = spec.datatype;
  if (rows > 0) t.shape.push_back(rows);
  for (int64_t d : spec.shape) t.shape.push_back(d == -1 ? 1 : d);
  t.data.assign(size_t(t.ElementCount()) * protocol::ElementSize(spec.datatype), '\0');
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;  // a linear congruential sequence: reproducible
    return double(state >> 8) / double(1u << 24);
  };
  if (spec.datatype == DataType::kFp32) {
    for (size_t i = 0; i < t.data.size(); i += 4) {
      const float v = float(next());
      std::memcpy(t.data.data() + i, &v, 4);
    }
  } else if (spec.datatype == DataType::kFp64) {
    for (size_t i = 0; i < t.data.size(); i += 8) {
      const double v = next();
      std::memcpy(t.data.data() + i, &v, 8);
    }
  }
  return t;
}

// Whether two executions agree: floating-point outputs within rounding (|a - b| <= 1e-5 +
// 1e-4 |b|, NaN where the other has NaN), every other output byte for byte. `why` says where not.
bool SameOutputs(const std::vector<protocol::Tensor>& a, const std::vector<protocol::Tensor>& b,
                 std::string& why) {
  if (a.size() != b.size()) {
    why = "a different number of outputs";
    return false;
  }
  auto close = [](double x, double y) {
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
    return x == y || std::fabs(x - y) <= 1e-5 + 1e-4 * std::fabs(y);
  };
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].datatype != b[i].datatype || a[i].shape != b[i].shape ||
        a[i].data.size() != b[i].data.size()) {
      why = StrCat("output '", b[i].name, "' has another type or shape");
      return false;
    }
    const std::string& x = a[i].data;
    const std::string& y = b[i].data;
    bool same = true;
    if (a[i].datatype == DataType::kFp32) {
      for (size_t k = 0; same && k < x.size(); k += 4) {
        float u, v;
        std::memcpy(&u, x.data() + k, 4);
        std::memcpy(&v, y.data() + k, 4);
        same = close(u, v);
      }
    } else if (a[i].datatype == DataType::kFp64) {
      for (size_t k = 0; same && k < x.size(); k += 8) {
        double u, v;
        std::memcpy(&u, x.data() + k, 8);
        std::memcpy(&v, y.data() + k, 8);
        same = close(u, v);
      }
    } else {
      same = x == y;
    }
    if (!same) {
      why = StrCat("output '", b[i].name, "' differs beyond rounding");
      return false;
    }
  }
  return true;
}

// The best of a few executions of `inputs`, in microseconds, after three to warm up (the
// profiling executor specializes a graph on its first runs); within about 200 ms.
absl::StatusOr<double> BestMicros(Backend& backend, const std::vector<protocol::Tensor>& inputs) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point stop = Clock::now() + std::chrono::milliseconds(200);
  double best = 0;
  for (int run = 0; run < 23; ++run) {
    std::vector<protocol::Tensor> copy = inputs;
    const Clock::time_point start = Clock::now();
    absl::StatusOr<std::vector<protocol::Tensor>> out = backend.Execute(copy);
    if (!out.ok()) return out.status();
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (run == 3 || (run > 3 && us < best)) best = us;
    if (run >= 3 && Clock::now() > stop) break;
  }
  return best;
}

// The module is loaded RTLD_LOCAL, so the BLAS that LibTorch brought in is not in the global
// scope RTLD_DEFAULT searches; a handle to this library searches its dependencies too.
void* FindBlasSetThreads() {
  if (void* f = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) return f;
  Dl_info self_info{};
  if (dladdr(reinterpret_cast<void*>(&FindBlasSetThreads), &self_info) == 0 ||
      self_info.dli_fname == nullptr) {
    return nullptr;
  }
  void* self = dlopen(self_info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
  if (self == nullptr) return nullptr;
  void* f = dlsym(self, "openblas_set_num_threads");
  dlclose(self);  // only drops the reference RTLD_NOLOAD took
  return f;
}

}  // namespace

void ConfigureTorch(int threads) {
  static std::once_flag once;
  std::call_once(once, [threads] {
    at::set_num_threads(std::max(1, threads));
    // LibTorch's thread setting does not reach OpenBLAS, which keeps a pool of one thread per
    // core that spins in sched_yield between calls: measured, a third of the CPU at load went
    // there. Debian's OpenBLAS exports openblas_set_num_threads; look it up so that pillar
    // does not link against one BLAS in particular.
    using SetThreads = void (*)(int);
    if (auto set_blas_threads = reinterpret_cast<SetThreads>(FindBlasSetThreads())) {
      set_blas_threads(std::max(1, threads));
    }
    try {
      at::set_num_interop_threads(1);
    } catch (const std::exception&) {
      // Set already by LibTorch's own first use; keep that.
    }
  });
}

bool CudaAvailable() { return torch::cuda::is_available(); }

[[nodiscard]] absl::StatusOr<std::string> ResolveDevice(models::DeviceKind kind) {
  switch (kind) {
    case models::DeviceKind::kCpu:
      return std::string("cpu");
    case models::DeviceKind::kAuto:
      return std::string(CudaAvailable() ? "cuda:0" : "cpu");
    case models::DeviceKind::kCuda:
      if (!CudaAvailable())
        return absl::FailedPreconditionError("instance.kind is cuda but no CUDA device is usable");
      return std::string("cuda:0");
  }
  return absl::InvalidArgumentError("unknown device kind");
}

namespace {

// Archives larger than this are served as saved: freezing holds a second copy of the weights
// while it runs, and such a model's time is in its arithmetic, not the interpreter.
constexpr size_t kMaxOptimizedBytes = size_t(256) << 20;

// Freezing inlines a module's weights as constants; optimize_for_inference then folds and fuses
// what it can (batch norms into convolutions, linear layers into oneDNN's where that is faster):
// the demo's MLP runs 24 % faster for one row and 35 % for 64. Not every model survives it, and
// fused arithmetic rounds differently, so the result replaces `plain` only when, on a probe of
// one row and one of a full batch, it computes the same outputs within rounding (SameOutputs)
// and takes less time. `note` says what was decided and why.
std::unique_ptr<TorchBackend> Optimize(const torch::jit::Module& module, TorchBackend& plain,
                                       const models::ModelConfig& config, torch::Device device,
                                       std::string& note) {
  std::unique_ptr<TorchBackend> optimized;
  try {
    torch::jit::Module frozen = torch::jit::freeze(module);
    torch::jit::optimize_for_inference(frozen);
    optimized = std::make_unique<TorchBackend>(std::move(frozen), config, device);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    note = StrCat("served as saved: optimizing failed: ", what.substr(0, what.find('\n')));
    return nullptr;
  }
  // One row, and a full batch of at most 64 rows and 16 MiB of input.
  std::vector<int64_t> probes = {config.max_batch_size > 0 ? 1 : 0};
  if (config.max_batch_size > 1) {
    size_t row_bytes = 0;
    for (const models::TensorSpec& spec : config.inputs) {
      size_t elements = 1;
      for (int64_t d : spec.shape) elements *= size_t(d == -1 ? 1 : d);
      row_bytes += elements * protocol::ElementSize(spec.datatype);
    }
    const int64_t rows = std::min<int64_t>(
        {config.max_batch_size, 64, int64_t((size_t(16) << 20) / std::max<size_t>(1, row_bytes))});
    if (rows > 1) probes.push_back(rows);
  }
  uint32_t state = 2026;
  double plain_us = 0, optimized_us = 0;
  for (int64_t rows : probes) {
    std::vector<protocol::Tensor> probe;
    for (const models::TensorSpec& spec : config.inputs) {
      probe.push_back(ProbeInput(spec, rows, state));
    }
    const std::string named = rows <= 1 ? std::string("one row") : StrCat(rows, " rows");
    std::vector<protocol::Tensor> a = probe, b = probe;
    absl::StatusOr<std::vector<protocol::Tensor>> want = plain.Execute(a);
    absl::StatusOr<std::vector<protocol::Tensor>> got = optimized->Execute(b);
    if (!want.ok() || !got.ok()) {
      note = StrCat("served as saved: a probe of ", named,
                    " failed: ", (want.ok() ? got : want).status().message());
      return nullptr;
    }
    std::string why;
    if (!SameOutputs(*got, *want, why)) {
      note = StrCat("served as saved: optimized, its ", why, " on a probe of ", named);
      return nullptr;
    }
    absl::StatusOr<double> p = BestMicros(plain, probe);
    absl::StatusOr<double> o = BestMicros(*optimized, probe);
    if (!p.ok() || !o.ok()) {
      note = "served as saved: a timed probe failed";
      return nullptr;
    }
    plain_us += *p;
    optimized_us += *o;
  }
  char times[64];
  std::snprintf(times, sizeof times, "%.1f us against %.1f us", optimized_us, plain_us);
  if (optimized_us >= plain_us) {
    note = StrCat("served as saved: optimized, its probes took ", times);
    return nullptr;
  }
  note = StrCat("optimized for inference: its probes took ", times);
  return optimized;
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> LoadTorchBackend(
    std::string_view model_bytes, std::string_view source, const models::ModelConfig& config,
    const std::string& device) {
  std::unique_ptr<TorchBackend> backend;
  try {
    torch::Device torch_device(device);
    MemoryStreamBuffer buffer(model_bytes);
    std::istream stream(&buffer);
    torch::jit::Module module = torch::jit::load(stream, torch_device);
    module.eval();
    backend = std::make_unique<TorchBackend>(module, config, torch_device);
  } catch (const std::exception& e) {
    std::string what = e.what();
    // c10 messages carry a long C++ backtrace after the first line; keep the first line.
    return absl::InvalidArgumentError(
        StrCat(source, ": cannot load TorchScript: ", what.substr(0, what.find('\n'))));
  }
  std::vector<protocol::Tensor> probe;
  for (const models::TensorSpec& spec : config.inputs) {
    probe.push_back(ZeroInput(spec, config.max_batch_size > 0));
  }
  absl::StatusOr<std::vector<protocol::Tensor>> out = backend->Execute(probe);
  if (!out.ok()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": does not match model.toml: ", out.status().message()));
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const models::TensorSpec& spec = config.outputs[i];
    const std::vector<int64_t>& shape = (*out)[i].shape;
    size_t offset = config.max_batch_size > 0 ? 1 : 0;
    bool ok = shape.size() == spec.shape.size() + offset;
    for (size_t d = 0; ok && d < spec.shape.size(); ++d) {
      ok = spec.shape[d] == -1 || spec.shape[d] == shape[d + offset];
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          StrCat(source, ": output '", spec.name, "' has a shape that does not match model.toml"));
    }
  }
  if (config.instance.optimize && device == "cpu" && model_bytes.size() <= kMaxOptimizedBytes) {
    std::string note;
    std::unique_ptr<TorchBackend> optimized =
        Optimize(backend->module(), *backend, config, torch::Device(torch::kCPU), note);
    std::fprintf(stderr, "pillar: %.*s: %s\n", int(source.size()), source.data(), note.c_str());
    if (optimized != nullptr) return optimized;
  }
  return backend;
}

}  // namespace pillar::runtime
