// MPI initialisation when attnsim is built with MPI; a one-rank stand-in otherwise.
#pragma once

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

}  // namespace attnsim
