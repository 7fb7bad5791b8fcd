// The harness-overhead peer of `pillar bench collective allreduce` (bench/run_collective.sh):
// the smallest honest MPI_Allreduce timing loop one would write by hand. For each size from
// MIN to MAX (doubling): one warm-up call, a barrier, ITERS timed out-of-place float sums, the
// per-call time averaged over ranks; rank 0 prints "bytes busbw_GBps" per size, with busbw =
// bytes / time * 2(n-1)/n as nccl-tests defines it, and the seconds per call.
//
//   mpirun -np 2 mpi_allreduce_peer MIN_BYTES MAX_BYTES ITERS
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const size_t min_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1 << 20;
  const size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64 << 20;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  std::vector<float> send(max_bytes / sizeof(float), 1.0f), recv(max_bytes / sizeof(float), 0.0f);
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const int count = int(bytes / sizeof(float));
    MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    const double mine = (MPI_Wtime() - start) / iters;
    double sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double seconds = sum / ranks;
    const double busbw = double(bytes) / 1e9 / seconds * 2.0 * (ranks - 1) / ranks;
    if (rank == 0) std::printf("%zu %.4f %.9f\n", bytes, busbw, seconds);
  }
  MPI_Finalize();
  return 0;
}
