// The only translation unit that includes LibTorch. LibTorch reports errors with exceptions
// (c10::Error); they are caught here, at the boundary, and become absl::Status.
#include "torch_module/torch_backend.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/cuda.h>
#include <torch/script.h>

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
    backend = std::make_unique<TorchBackend>(std::move(module), config, torch_device);
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
  return backend;
}

}  // namespace pillar::runtime
