#include "common/event_loop.h"

namespace pillar {
namespace {

thread_local boost::asio::io_context* this_thread_loop = nullptr;

}  // namespace

boost::asio::io_context* ThisThreadEventLoop() { return this_thread_loop; }

ScopedEventLoop::ScopedEventLoop(boost::asio::io_context& loop) : previous_(this_thread_loop) {
  this_thread_loop = &loop;
}

ScopedEventLoop::~ScopedEventLoop() { this_thread_loop = previous_; }

}  // namespace pillar
