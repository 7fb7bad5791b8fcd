// RemoteRunner::State's connection pools (remote_state.h): the lanes, the idle kept-alive
// connections of each endpoint, and endpoints out of step with their requests.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>

#include "upstream/remote_state.h"

namespace pillar::upstream {

size_t RemoteRunner::State::LaneOf(asio::io_context* loop) {
  for (size_t lane = 0; lane < lanes.size(); ++lane) {
    if (lanes[lane] == loop) return lane;
  }
  lanes.push_back(loop);
  return lanes.size() - 1;
}

std::shared_ptr<UpstreamConnection> RemoteRunner::State::TakeIdle(EndpointSlot& slot, size_t lane) {
  if (slot.idle.size() <= lane) return nullptr;
  std::vector<std::shared_ptr<UpstreamConnection>>& idle = slot.idle[lane];
  while (!idle.empty()) {  // the newest first: the least likely to have been timed out
    std::shared_ptr<UpstreamConnection> connection = std::move(idle.back());
    idle.pop_back();
    --slot.idle_count;
    // Whether the upstream closed it meanwhile is checked as the call starts (kNotSent).
    if (connection->open()) return connection;
    if (connection->unasked_bytes()) OutOfStep(slot);  // it wrote while the connection idled
  }
  return nullptr;
}

void RemoteRunner::State::ReturnIdle(EndpointSlot& slot, size_t lane,
                                     std::shared_ptr<UpstreamConnection> connection) {
  // (The clock is read only for an endpoint that has been out of step.)
  if (slot.out_of_step > 0 && Clock::now() < slot.no_reuse_until) return connection->Close();
  if (slot.idle.size() <= lane) slot.idle.resize(lanes.size());
  if (slot.idle_count >= config.remote.connections) {
    size_t other = 0;
    while (other < slot.idle.size() && (other == lane || slot.idle[other].empty())) ++other;
    if (other == slot.idle.size()) return connection->Close();  // all idle ones are this lane's
    std::vector<std::shared_ptr<UpstreamConnection>>& theirs = slot.idle[other];
    asio::post(*lanes[other], [oldest = std::move(theirs.front())] { oldest->Close(); });
    theirs.erase(theirs.begin());
    --slot.idle_count;
  }
  slot.idle[lane].push_back(std::move(connection));
  ++slot.idle_count;
}

void RemoteRunner::State::CloseIdle(EndpointSlot& slot) {
  for (size_t lane = 0; lane < slot.idle.size(); ++lane) {
    for (std::shared_ptr<UpstreamConnection>& connection : slot.idle[lane]) {
      asio::post(*lanes[lane], [connection = std::move(connection)] { connection->Close(); });
    }
    slot.idle[lane].clear();
  }
  slot.idle_count = 0;
}

void RemoteRunner::State::OutOfStep(EndpointSlot& slot) {
  CloseIdle(slot);
  const Clock::time_point now = Clock::now();
  if (now < slot.no_reuse_until) return;  // one episode, however many strays it shows
  slot.out_of_step = std::min(slot.out_of_step + 1, 30);
  const std::chrono::seconds window = std::min<std::chrono::seconds>(
      kNoReuseFor * (int64_t{1} << std::min(slot.out_of_step - 1, 20)), kMaxNoReuse);
  slot.no_reuse_until = now + window;
  std::fprintf(stderr,
               "pillar: upstream %s sent a reply nobody asked for (time %d); its connections "
               "carry one request each for the next %lld s, so that no stray reply answers "
               "another request\n",
               slot.endpoint.url.c_str(), slot.out_of_step, static_cast<long long>(window.count()));
}

}  // namespace pillar::upstream
