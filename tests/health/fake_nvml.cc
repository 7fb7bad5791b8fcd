// A stand-in for libnvidia-ml.so with the few entry points pillar health calls, so the dlopen
// path, the ABI declarations and every GPU threshold are tested on a machine without a GPU.
// Its readings come from FAKE_NVML, e.g. "count=8,ecc_uncorrected=0,temperature=45,
// throttle=0x8,sm_clock=1980,app_clock=1980,max_clock=1980,ecc=on,fail_init=0".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct Fake {
  unsigned count = 8;
  unsigned long long ecc_uncorrected = 0;
  unsigned long long ecc_corrected = 3;
  bool ecc = true;
  unsigned temperature = 40;
  unsigned long long throttle = 0;
  unsigned sm_clock = 1980, app_clock = 1980, max_clock = 1980;
  bool fail_init = false;
};

Fake Read() {
  Fake f;
  const char* spec = std::getenv("FAKE_NVML");
  if (spec == nullptr) return f;
  std::string s(spec);
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(at, end - at);
    at = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const unsigned long long n = std::strtoull(value.c_str(), nullptr, 0);
    if (key == "count") f.count = unsigned(n);
    if (key == "ecc_uncorrected") f.ecc_uncorrected = n;
    if (key == "ecc_corrected") f.ecc_corrected = n;
    if (key == "ecc") f.ecc = value == "on";
    if (key == "temperature") f.temperature = unsigned(n);
    if (key == "throttle") f.throttle = n;
    if (key == "sm_clock") f.sm_clock = unsigned(n);
    if (key == "app_clock") f.app_clock = unsigned(n);
    if (key == "max_clock") f.max_clock = unsigned(n);
    if (key == "fail_init") f.fail_init = n != 0;
  }
  return f;
}

Fake g;
int devices[4096];

}  // namespace

extern "C" {
int nvmlInit_v2() {
  g = Read();
  return g.fail_init ? 9 : 0;  // NVML_ERROR_DRIVER_NOT_LOADED
}
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int r) {
  return r == 9 ? "Driver Not Loaded" : r == 3 ? "Not Supported" : "Unknown Error";
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = g.count;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** device) {
  if (i >= g.count) return 2;  // invalid argument
  *device = &devices[i];
  return 0;
}
int nvmlDeviceGetName(void*, char* name, unsigned length) {
  std::snprintf(name, length, "Fake H200");
  return 0;
}
int nvmlDeviceGetTotalEccErrors(void*, int type, int, unsigned long long* count) {
  if (!g.ecc) return 3;
  *count = type == 1 ? g.ecc_uncorrected : g.ecc_corrected;
  return 0;
}
int nvmlDeviceGetClockInfo(void*, int, unsigned* mhz) {
  *mhz = g.sm_clock;
  return 0;
}
int nvmlDeviceGetApplicationsClock(void*, int, unsigned* mhz) {
  *mhz = g.app_clock;
  return 0;
}
int nvmlDeviceGetMaxClockInfo(void*, int, unsigned* mhz) {
  *mhz = g.max_clock;
  return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void*, unsigned long long* reasons) {
  *reasons = g.throttle;
  return 0;
}
int nvmlDeviceGetTemperature(void*, int, unsigned* celsius) {
  *celsius = g.temperature;
  return 0;
}
}
