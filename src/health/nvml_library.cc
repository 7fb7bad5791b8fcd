#include "health/nvml_library.h"

#include <dlfcn.h>

#include "common/strings.h"

namespace pillar::health {
namespace {

// NVML's ABI: return codes are ints (0 = NVML_SUCCESS), devices opaque pointers.
using Return = int;
using Device = void*;
constexpr Return kSuccess = 0;
constexpr Return kNotSupported = 3;
constexpr int kClockSm = 1;                 // NVML_CLOCK_SM
constexpr int kTemperatureGpu = 0;          // NVML_TEMPERATURE_GPU
constexpr int kMemoryErrorCorrected = 0;    // NVML_MEMORY_ERROR_TYPE_CORRECTED
constexpr int kMemoryErrorUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;             // NVML_VOLATILE_ECC

}  // namespace

struct NvmlLibrary::Api {
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  const char* (*error_string)(Return) = nullptr;
  Return (*count)(unsigned*) = nullptr;
  Return (*handle)(unsigned, Device*) = nullptr;
  Return (*name)(Device, char*, unsigned) = nullptr;
  Return (*ecc)(Device, int, int, unsigned long long*) = nullptr;
  Return (*clock)(Device, int, unsigned*) = nullptr;
  Return (*app_clock)(Device, int, unsigned*) = nullptr;
  Return (*max_clock)(Device, int, unsigned*) = nullptr;
  Return (*throttle)(Device, unsigned long long*) = nullptr;
  Return (*temperature)(Device, int, unsigned*) = nullptr;
};

NvmlLibrary::NvmlLibrary(void* handle, std::unique_ptr<Api> api)
    : handle_(handle), api_(std::move(api)) {}

NvmlLibrary::~NvmlLibrary() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(StrCat("cannot load ", path, ": ", why ? why : "unknown"));
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  auto bind = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
    if (fn == nullptr) missing = symbol;
  };
  bind(api->init, "nvmlInit_v2");
  bind(api->shutdown, "nvmlShutdown");
  bind(api->error_string, "nvmlErrorString");
  bind(api->count, "nvmlDeviceGetCount_v2");
  bind(api->handle, "nvmlDeviceGetHandleByIndex_v2");
  bind(api->name, "nvmlDeviceGetName");
  bind(api->ecc, "nvmlDeviceGetTotalEccErrors");
  bind(api->clock, "nvmlDeviceGetClockInfo");
  bind(api->app_clock, "nvmlDeviceGetApplicationsClock");
  bind(api->max_clock, "nvmlDeviceGetMaxClockInfo");
  bind(api->throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  bind(api->temperature, "nvmlDeviceGetTemperature");
  if (!missing.empty()) {
    dlclose(handle);
    return absl::FailedPreconditionError(StrCat(path, " has no ", missing));
  }
  if (Return r = api->init(); r != kSuccess) {
    const std::string why = api->error_string(r);
    dlclose(handle);
    return absl::FailedPreconditionError(StrCat("nvmlInit: ", why));
  }
  return std::unique_ptr<NvmlLibrary>(new NvmlLibrary(handle, std::move(api)));
}

absl::StatusOr<std::vector<GpuFacts>> NvmlLibrary::Gpus() {
  auto fail = [this](const char* call, Return r) {
    return absl::InternalError(StrCat(call, ": ", api_->error_string(r)));
  };
  unsigned count = 0;
  if (Return r = api_->count(&count); r != kSuccess) return fail("nvmlDeviceGetCount", r);
  std::vector<GpuFacts> gpus;
  for (unsigned i = 0; i < count; ++i) {
    Device device = nullptr;
    if (Return r = api_->handle(i, &device); r != kSuccess)
      return fail("nvmlDeviceGetHandleByIndex", r);
    GpuFacts gpu;
    gpu.index = int(i);
    char name[96] = {};
    if (Return r = api_->name(device, name, sizeof(name) - 1); r != kSuccess)
      return fail("nvmlDeviceGetName", r);
    gpu.name = name;
    unsigned long long errors = 0;
    Return r = api_->ecc(device, kMemoryErrorUncorrected, kVolatileEcc, &errors);
    if (r == kSuccess) {
      gpu.ecc_uncorrected = errors;
    } else if (r != kNotSupported) {
      return fail("nvmlDeviceGetTotalEccErrors", r);
    }
    r = api_->ecc(device, kMemoryErrorCorrected, kVolatileEcc, &errors);
    if (r == kSuccess) {
      gpu.ecc_corrected = errors;
    } else if (r != kNotSupported) {
      return fail("nvmlDeviceGetTotalEccErrors", r);
    }
    if (r = api_->clock(device, kClockSm, &gpu.sm_clock_mhz); r != kSuccess)
      return fail("nvmlDeviceGetClockInfo", r);
    if (r = api_->app_clock(device, kClockSm, &gpu.sm_app_clock_mhz);
        r != kSuccess && r != kNotSupported) {
      return fail("nvmlDeviceGetApplicationsClock", r);
    }
    if (r = api_->max_clock(device, kClockSm, &gpu.sm_max_clock_mhz); r != kSuccess)
      return fail("nvmlDeviceGetMaxClockInfo", r);
    unsigned long long reasons = 0;
    if (r = api_->throttle(device, &reasons); r != kSuccess)
      return fail("nvmlDeviceGetCurrentClocksThrottleReasons", r);
    gpu.throttle_reasons = reasons;
    if (r = api_->temperature(device, kTemperatureGpu, &gpu.temperature_c); r != kSuccess)
      return fail("nvmlDeviceGetTemperature", r);
    gpus.push_back(gpu);
  }
  return gpus;
}

}  // namespace pillar::health
