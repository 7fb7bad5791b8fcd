// Whether this build runs under the sanitizers (scripts/sanitize.sh builds with AddressSanitizer
// and UndefinedBehaviorSanitizer together), for the few tests that measure what they change: a
// process's resident memory (ASan's quarantine holds freed blocks), a stream's pace (several
// times slower), or that starve the process of descriptors, which UBSan's own checks need (its
// memory probe opens a pipe, and reports an object it cannot probe as one with an invalid vptr).
#pragma once

namespace pillar::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizers = true;
#else
inline constexpr bool kUnderSanitizers = false;
#endif

}  // namespace pillar::testing
