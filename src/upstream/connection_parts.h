// The two kinds of upstream connection (upstream_connection.cc), as the connector (connector.cc)
// builds them: not a door into upstream/; include upstream_connection.h.
#pragma once

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <memory>

#include "upstream/upstream_connection.h"

namespace pillar::upstream::internal {

// The socket type of the hot path: bound to an io_context's own executor, not asio's
// polymorphic one, whose copies and dispatch showed in the proxy's profile.
using Socket =
    boost::asio::basic_stream_socket<boost::asio::ip::tcp, boost::asio::io_context::executor_type>;
using Timer = boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>,
                                                boost::asio::io_context::executor_type>;

// A connection not connected yet, and what the connector connects and shakes hands on: its
// socket, and for TLS its stream (null for a plain one). Both live as long as `connection`.
struct Unconnected {
  std::shared_ptr<UpstreamConnection> connection;
  Socket* socket = nullptr;
  boost::asio::ssl::stream<Socket>* tls = nullptr;
};

Unconnected NewPlainConnection(boost::asio::io_context& io);
Unconnected NewTlsConnection(boost::asio::io_context& io, boost::asio::ssl::context& tls);

}  // namespace pillar::upstream::internal
