// HeldBytes: bytes something outside a connection counts while the connection delivers them (a
// job's result, against jobs/FetchBudget). Once an answer is written, its bytes are the kernel's
// to deliver: the connection tells its held answers, at each look, how many bytes the socket has
// yet to deliver, which bounds what is left of each, so that a client that stops reading near
// the end of a large answer holds no more of a budget than its socket really holds (review
// helper-136: 7.5 MB stayed counted for as long as the client kept its connection alive, with
// 200 KB left in the socket, and every other principal's fetch was refused).
//
//   class Ticket final : public HeldBytes { void Undelivered(uint64_t bytes) override; };
//   response.held = ticket;   // http::Response; the session calls Undelivered, then lets go
#pragma once

#include <cstdint>

namespace pillar {

class HeldBytes {
 public:
  virtual ~HeldBytes() = default;
  // At most `bytes` of the answer are left to deliver. Called from the connection's thread;
  // what is counted only ever shrinks.
  virtual void Undelivered(uint64_t bytes) = 0;
};

}  // namespace pillar
