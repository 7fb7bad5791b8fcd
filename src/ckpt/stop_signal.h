// The eviction notice of a spot machine (SIGTERM, or SIGUSR1 from an agent) turned into a
// question the training loop asks after each step, so it can write a final checkpoint and exit
// (R-COST-2). The handler only sets a flag: everything else happens on the loop's thread.
//
//   InstallStopSignals();
//   while (...) { Step(); if (StopRequested()) { manager->Save(step, sources); break; } }
#pragma once

namespace pillar::ckpt {

// SIGTERM and SIGUSR1 set the flag (SA_RESTART, so the loop's system calls carry on).
void InstallStopSignals();
bool StopRequested();
// The signal that asked; 0 when none did.
int StopSignal();

}  // namespace pillar::ckpt
