// `pillar serve` runs on tcmalloc; every other command runs on glibc's allocator.
//
// The server allocates a request's buffers on one event loop and frees them on another thread;
// tcmalloc's per-thread caches take about a tenth off a proxied request's CPU (docs/benchmarks.md).
// But tcmalloc zeroes its page map as it loads, before main: about 1,000 page faults, which on a
// VM whose first touch of a page costs 13 us doubled the start-up of `pillar --version` (26 ms
// against 11 ms without it, docs/benchmarks.md "Command start-up"). So the binary does not link
// it, and the server asks the dynamic loader for it by executing itself once more with the
// library preloaded (same process id, same arguments), before any thread or file exists.
//
//   int main(int argc, char** argv) {
//     pillar::app::ServeOnTcmalloc(argc, argv);  // returns unless it replaced the process
//
// Where it cannot (no /proc, the library gone, exec refused), the server runs on glibc's
// allocator and says so on stderr; a server started through the dynamic loader (`ld.so pillar
// serve`, where /proc/self/exe is the loader) or with raised privileges (AT_SECURE) is not
// executed again. `PILLAR_ALLOCATOR=system` keeps glibc's (a profiler, a
// debugger); a process that already has tcmalloc (preloaded by its caller) is left as it is.
// The re-executed server takes LD_PRELOAD back to what it was, so that what it starts does not
// inherit it.
#pragma once

namespace pillar::app {

void ServeOnTcmalloc(int argc, char** argv);

}  // namespace pillar::app
