// MPI initialisation when attnsim is built with MPI; a one-rank stand-in otherwise.
#pragma once

#include <string>
#include <vector>

namespace attnsim {

// Initialises MPI only when the process was started by an MPI launcher (so a plain `attnsim`
// never needs mpirun), and finalises it at exit.
class MpiEnvironment {
 public:
  MpiEnvironment(int* argc, char*** argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
};

int mpi_rank();
int mpi_size();
bool mpi_built();
// True when MPI was initialised (the process was started by an MPI launcher).
bool mpi_active();

// Collectives over MPI_COMM_WORLD; with one rank they are the identity.
void mpi_barrier();
// True on every rank when `flag` is true on any rank.
bool mpi_any(bool flag);
// Rank 0 receives every rank's string, in rank order; other ranks receive an empty vector.
std::vector<std::string> mpi_gather_to_root(const std::string& mine);
// Ends every rank with `code` (MPI_Abort), after the caller printed its one-line error.
[[noreturn]] void mpi_abort(int code);

}  // namespace attnsim
