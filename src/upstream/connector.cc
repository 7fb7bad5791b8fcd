// Connect() (upstream_connection.h): one connection attempt to an endpoint.
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <string>

#include "common/strings.h"
#include "upstream/connection_parts.h"
#include "upstream/upstream_connection.h"

namespace pillar::upstream {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

// Resolve, connect, and for TLS the handshake, all within one timer's deadline (a resolver has
// none of its own).
struct Connector : std::enable_shared_from_this<Connector> {
  Connector(asio::io_context& io, Endpoint endpoint, std::shared_ptr<asio::ssl::context> tls,
            Clock::time_point deadline, ConnectCallback done)
      : io(io),
        endpoint(std::move(endpoint)),
        tls(std::move(tls)),
        resolver(io),
        timer(io),
        done(std::move(done)) {
    timer.expires_at(deadline);
  }

  void Start() {
    unconnected =
        endpoint.tls ? internal::NewTlsConnection(io, *tls) : internal::NewPlainConnection(io);
    timer.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->finished) return;
      self->timed_out = true;
      self->resolver.cancel();
      self->unconnected.connection->Close();  // the connect or handshake in progress fails
    });
    error_code ec;
    const asio::ip::address address = asio::ip::make_address(endpoint.host, ec);
    if (!ec)
      return ConnectTo(tcp::resolver::results_type::create(
          tcp::endpoint(address, endpoint.port), endpoint.host, std::to_string(endpoint.port)));
    resolver.async_resolve(
        endpoint.host, std::to_string(endpoint.port),
        [self = shared_from_this()](error_code ec, tcp::resolver::results_type r) {
          if (self->timed_out)
            return self->Finish(absl::UnavailableError("name resolution timed out"));
          if (ec) {
            return self->Finish(
                absl::UnavailableError(StrCat("cannot resolve the host: ", ec.message())));
          }
          // Closed meanwhile by its caller (the call it was for ended): async_connect would open
          // the socket again.
          if (!self->unconnected.connection->open()) {
            return self->Finish(absl::CancelledError("the connection was closed"));
          }
          self->ConnectTo(std::move(r));
        });
  }

  void ConnectTo(const tcp::resolver::results_type& results) {
    asio::async_connect(
        *unconnected.socket, results,
        [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
          if (self->timed_out)
            return self->Finish(absl::UnavailableError("the connection timed out"));
          if (ec)
            return self->Finish(absl::UnavailableError(StrCat("cannot connect: ", ec.message())));
          self->unconnected.socket->set_option(tcp::no_delay(true), ec);
          if (self->endpoint.tls) return self->Handshake();
          self->Finish(self->unconnected.connection);
        });
  }

  void Handshake() {
    asio::ssl::stream<internal::Socket>& stream = *unconnected.tls;
    SSL* ssl = stream.native_handle();
    error_code not_an_address;
    asio::ip::make_address(endpoint.host, not_an_address);
    // The certificate must name the endpoint's host in its subject alternative names: never by
    // its subject CN, which OpenSSL falls back to when there is no DNS name (found by review
    // helper-59: any certificate of the same CA without SANs, a client's or a machine's, could
    // stand in for the upstream), and a wildcard only as a whole label. Server Name Indication
    // is for names only; an address is matched against the certificate's IP entries.
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(
        param, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT | X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const std::string name = TlsServerName(endpoint);
    const bool named =
        not_an_address
            ? SSL_set1_host(ssl, name.c_str()) == 1 && SSL_set_tlsext_host_name(ssl, name.c_str())
            : X509_VERIFY_PARAM_set1_ip_asc(param, endpoint.host.c_str()) == 1;
    if (!named) return Finish(absl::InternalError("cannot set the TLS server name"));
    stream.set_verify_mode(asio::ssl::verify_peer);
    stream.async_handshake(asio::ssl::stream_base::client, [self =
                                                                shared_from_this()](error_code ec) {
      if (self->timed_out)
        return self->Finish(absl::UnavailableError("the TLS handshake timed out"));
      if (ec) {
        return self->Finish(absl::UnavailableError(StrCat("TLS handshake failed: ", ec.message())));
      }
      self->Finish(self->unconnected.connection);
    });
  }

  void Finish(absl::StatusOr<std::shared_ptr<UpstreamConnection>> result) {
    finished = true;
    timer.cancel();
    if (!result.ok()) unconnected.connection->Close();
    std::move(done)(std::move(result));
  }

  asio::io_context& io;
  const Endpoint endpoint;
  const std::shared_ptr<asio::ssl::context> tls;
  tcp::resolver resolver;
  internal::Timer timer;
  bool timed_out = false;
  bool finished = false;
  internal::Unconnected unconnected;
  ConnectCallback done;
};

}  // namespace

std::shared_ptr<UpstreamConnection> Connect(asio::io_context& io, const Endpoint& endpoint,
                                            std::shared_ptr<asio::ssl::context> tls,
                                            Clock::time_point deadline, ConnectCallback done) {
  auto connector =
      std::make_shared<Connector>(io, endpoint, std::move(tls), deadline, std::move(done));
  connector->Start();
  return connector->unconnected.connection;
}

}  // namespace pillar::upstream
