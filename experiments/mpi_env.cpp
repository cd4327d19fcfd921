// MPI initialisation when attnsim is built with MPI; a one-rank stand-in otherwise.
#include "experiments/mpi_env.hpp"

#include <cstdlib>

#if defined(ATTNSIM_HAVE_MPI)
#include <mpi.h>
#endif

namespace attnsim {

namespace {
bool g_mpi_active = false;

// Open MPI, MPICH and Slurm's PMI set one of these in every rank they start.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}
}  // namespace

MpiEnvironment::MpiEnvironment(int* argc, char*** argv) {
#if defined(ATTNSIM_HAVE_MPI)
  if (launched_by_mpi()) {
    MPI_Init(argc, argv);
    g_mpi_active = true;
  }
#else
  (void)argc;
  (void)argv;
#endif
}

MpiEnvironment::~MpiEnvironment() {
#if defined(ATTNSIM_HAVE_MPI)
  if (g_mpi_active) MPI_Finalize();
#endif
}

int mpi_rank() {
#if defined(ATTNSIM_HAVE_MPI)
  if (g_mpi_active) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
#endif
  return 0;
}

int mpi_size() {
#if defined(ATTNSIM_HAVE_MPI)
  if (g_mpi_active) {
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
  }
#endif
  return 1;
}

bool mpi_built() {
#if defined(ATTNSIM_HAVE_MPI)
  return true;
#else
  return false;
#endif
}

}  // namespace attnsim
