// MPICH hostfiles ("host" or "host:slots" per line, '#' comments) and the
// check that a running job's placement matches one: every rank on a listed
// host, no host with more ranks than slots. Used by the MPI stages (option
// --hostfile) so a job launched with the wrong file fails with a clear error
// instead of running oversubscribed or on the wrong machines.
#pragma once

#include <string>
#include <vector>

#include "parallel/comm.h"

namespace gpt2 {

struct HostEntry {
  std::string host;
  int slots = 1;
  int line = 0;
};

// Parses a hostfile; errors name the file and line (syntax, slots, a host
// name that does not resolve).
std::vector<HostEntry> read_hostfile(const std::string& path);

// Collective: throws std::invalid_argument on every rank if this job's ranks
// do not fit the hostfile.
void check_placement(const std::vector<HostEntry>& hosts, const std::string& path, Communicator& comm);

}  // namespace gpt2
