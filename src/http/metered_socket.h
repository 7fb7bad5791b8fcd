// MeteredSocket: a TCP socket that, once given a WaitMeter, times what its writes wait for the
// peer to make room. Each write is tried at once; only what the socket could not take is written
// asynchronously, and that wait goes into the meter. A session's connection is one (a plaintext
// one) or has one under its TLS stream, whose own writes (the record sealed in memory, then its
// bytes written here) say nothing of the socket's room: a streamed response puts its waits down
// to the client by what the socket took, on either kind, not by guesses from how long each
// piece took. Until Meter is called a write is the socket's own asynchronous write.
//
//   ssl::stream<MeteredSocket> stream(MeteredSocket(std::move(socket)), context);
//   stream.next_layer().Meter(meter);   // from now on, on the connection's executor
//
// Not thread-safe: used on its connection's executor, as the socket it wraps.
#pragma once

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <memory>
#include <utility>

#include "common/clock.h"
#include "common/wait_meter.h"

namespace pillar::http::internal {

class MeteredSocket {
 public:
  using socket_type = boost::asio::ip::tcp::socket;
  using executor_type = socket_type::executor_type;
  using lowest_layer_type = socket_type::lowest_layer_type;

  explicit MeteredSocket(socket_type socket) : socket_(std::move(socket)) {}

  socket_type& socket() { return socket_; }
  executor_type get_executor() { return socket_.get_executor(); }
  lowest_layer_type& lowest_layer() { return socket_.lowest_layer(); }
  const lowest_layer_type& lowest_layer() const { return socket_.lowest_layer(); }

  // The writes from now on that wait for the peer are timed into `meter`.
  void Meter(std::shared_ptr<WaitMeter> meter) { meter_ = std::move(meter); }

  template <typename Buffers, typename Handler>
  auto async_read_some(const Buffers& buffers, Handler&& handler) {
    return socket_.async_read_some(buffers, std::forward<Handler>(handler));
  }

  template <typename Buffers, typename Handler>
  auto async_write_some(const Buffers& buffers, Handler&& handler) {
    return boost::asio::async_initiate<Handler, void(boost::system::error_code, size_t)>(
        [this](auto completion, const Buffers& pieces) { Write(pieces, std::move(completion)); },
        handler, buffers);
  }

 private:
  template <typename Buffers, typename Completion>
  void Write(const Buffers& buffers, Completion completion) {
    if (meter_ == nullptr) {
      socket_.async_write_some(buffers, std::move(completion));
      return;
    }
    // What the asynchronous write would try first, done here so that its outcome is known: the
    // socket's room took some (or all) of it, or the peer has some reading to do.
    boost::system::error_code error;
    if (!socket_.non_blocking()) socket_.non_blocking(true, error);
    size_t sent = error ? 0 : socket_.write_some(buffers, error);
    if (error == boost::asio::error::would_block || error == boost::asio::error::try_again) {
      error = {};
      sent = 0;
    }
    const auto executor = boost::asio::get_associated_executor(completion, socket_.get_executor());
    if (error || sent > 0 || boost::asio::buffer_size(buffers) == 0) {
      // Completed, as an asynchronous operation completes: from the executor's queue, not from
      // within this call.
      boost::asio::post(executor,
                        boost::beast::bind_front_handler(std::move(completion), error, sent));
      return;
    }
    meter_->Began(SystemClock().MonotonicNanos());
    socket_.async_write_some(
        buffers,
        boost::asio::bind_executor(executor, [meter = meter_, completion = std::move(completion)](
                                                 boost::system::error_code ec, size_t n) mutable {
          meter->Ended(SystemClock().MonotonicNanos());
          std::move(completion)(ec, n);
        }));
  }

  socket_type socket_;
  std::shared_ptr<WaitMeter> meter_;  // null: writes are not timed
};

}  // namespace pillar::http::internal
