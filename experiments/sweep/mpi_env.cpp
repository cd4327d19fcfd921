// MPI initialisation when attnsim is built with MPI; a one-rank stand-in otherwise.
#include "experiments/sweep/mpi_env.hpp"

#include <cstdio>
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

bool mpi_active() { return g_mpi_active; }

void mpi_barrier() {
#if defined(ATTNSIM_HAVE_MPI)
  if (g_mpi_active) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

bool mpi_any(bool flag) {
#if defined(ATTNSIM_HAVE_MPI)
  if (g_mpi_active) {
    int in = flag ? 1 : 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return out != 0;
  }
#endif
  return flag;
}

std::vector<std::string> mpi_gather_to_root(const std::string& mine) {
#if defined(ATTNSIM_HAVE_MPI)
  if (g_mpi_active) {
    const int size = mpi_size(), rank = mpi_rank();
    // Sizes first (as long long: a rank's rows may exceed 2 GiB only in absurd sweeps, which
    // MPI_Gatherv's int counts cannot carry; those are refused with a clear message).
    long long n = static_cast<long long>(mine.size());
    std::vector<long long> sizes(static_cast<std::size_t>(size), 0);
    MPI_Gather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    std::vector<int> counts(static_cast<std::size_t>(size), 0),
        displs(static_cast<std::size_t>(size), 0);
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      displs[std::size_t(r)] = int(total);
      counts[std::size_t(r)] = int(sizes[std::size_t(r)]);
      total += sizes[std::size_t(r)];
    }
    if (rank == 0 && total > 2000000000LL) {
      std::fprintf(stderr, "attnsim: error: results too large to gather over MPI (%lld bytes)\n",
                   total);
      mpi_abort(2);
    }
    std::string all(rank == 0 ? std::size_t(total) : 0, '\0');
    MPI_Gatherv(mine.data(), int(n), MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR,
                0, MPI_COMM_WORLD);
    std::vector<std::string> out;
    if (rank == 0) {
      for (int r = 0; r < size; ++r)
        out.push_back(
            all.substr(std::size_t(displs[std::size_t(r)]), std::size_t(counts[std::size_t(r)])));
    }
    return out;
  }
#endif
  return {mine};
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
#if defined(ATTNSIM_HAVE_MPI)
  if (g_mpi_active) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace attnsim
