// The identity of a TLS client that presented a certificate the listener verified: its
// subject common name, first URI SAN (SPIFFE IDs live there) or first DNS SAN.
#pragma once

#include <string>

#include "http/server.h"

typedef struct ssl_st SSL;

namespace pillar::http {

// Empty when the client sent no certificate, or the chosen name is absent.
std::string PeerIdentity(SSL* ssl, ListenerOptions::ClientIdentity which);

}  // namespace pillar::http
