#include "common/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>

namespace pillar {

void NameThisThread(std::string_view name) {
  char cut[16];
  const size_t length = std::min(name.size(), sizeof cut - 1);
  std::memcpy(cut, name.data(), length);
  cut[length] = '\0';
  // Fails only for a name longer than 15 bytes, which `cut` never is; a name is no reason to
  // stop a thread in any case.
  (void)pthread_setname_np(pthread_self(), cut);
}

}  // namespace pillar
