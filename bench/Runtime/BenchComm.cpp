//===- BenchComm.cpp - Runtime collectives vs raw blocking MPI ------------===//
//
// Microseconds per all-reduce, all-gather and reduce-scatter through the
// runtime (nonblocking MPI completed under the watchdog, with and without a
// timeout set) next to the blocking MPI call (mpi) and the nonblocking one
// waited with MPI_Wait (mpi-nb) on the same buffers: mpi-nb vs mpi is the
// cost of MPI's nonblocking algorithms, loomrt vs mpi-nb that of the
// runtime and its watchdog. ratio = loomrt with a timeout / mpi.
//
//   mpirun -np 2 bench-comm [iterations]
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

template <typename Fn> double microseconds(int iterations, Fn fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  fn(); // warm up
  MPI_Barrier(MPI_COMM_WORLD);
  double begin = MPI_Wtime();
  for (int i = 0; i < iterations; ++i)
    fn();
  double local = (MPI_Wtime() - begin) / iterations * 1e6, slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

} // namespace

int main(int argc, char **argv) {
  loomrt_init(&argc, &argv);
  int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  const int P = loomrt_world_size(), me = loomrt_world_rank();
  loomrt_comm world = loomrt_comm_world();
  if (me == 0)
    std::printf("%d ranks, %d iterations; us per call (slowest rank)\n"
                "%-15s %10s %10s %10s %10s %10s %8s\n",
                P, iterations, "collective", "floats", "mpi", "mpi-nb",
                "loomrt", "+timeout", "ratio");
  for (int64_t n : {int64_t(1), int64_t(1) << 12, int64_t(1) << 16,
                    int64_t(1) << 20, int64_t(1) << 22}) {
    std::vector<float> a(size_t(n * P), 1.0f), b(size_t(n * P), 0.0f);
    int64_t shape[1] = {n * P};
    struct Case {
      const char *name;
      std::function<void()> mpi, runtime, nonblocking;
    };
    Case cases[] = {
        {"all_reduce",
         [&] {
           MPI_Allreduce(a.data(), b.data(), int(n), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD);
         },
         [&] {
           loomrt_all_reduce(world, LOOMRT_F32, LOOMRT_SUM, a.data(), b.data(),
                             n);
         },
         [&] {
           MPI_Request r;
           MPI_Iallreduce(a.data(), b.data(), int(n), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD, &r);
           MPI_Wait(&r, MPI_STATUS_IGNORE);
         }},
        {"all_gather",
         [&] {
           MPI_Allgather(a.data(), int(n), MPI_FLOAT, b.data(), int(n),
                         MPI_FLOAT, MPI_COMM_WORLD);
         },
         [&] {
           int64_t local[1] = {n};
           loomrt_all_gather(world, LOOMRT_F32, 1, local, 0, a.data(),
                             b.data());
         },
         [&] {
           MPI_Request r;
           MPI_Iallgather(a.data(), int(n), MPI_FLOAT, b.data(), int(n),
                          MPI_FLOAT, MPI_COMM_WORLD, &r);
           MPI_Wait(&r, MPI_STATUS_IGNORE);
         }},
        {"reduce_scatter",
         [&] {
           MPI_Reduce_scatter_block(a.data(), b.data(), int(n), MPI_FLOAT,
                                    MPI_SUM, MPI_COMM_WORLD);
         },
         [&] {
           loomrt_reduce_scatter(world, LOOMRT_F32, 1, shape, 0, a.data(),
                                 b.data());
         },
         [&] {
           MPI_Request r;
           MPI_Ireduce_scatter_block(a.data(), b.data(), int(n), MPI_FLOAT,
                                     MPI_SUM, MPI_COMM_WORLD, &r);
           MPI_Wait(&r, MPI_STATUS_IGNORE);
         }},
    };
    int reps = n >= (int64_t(1) << 20) ? iterations / 10 + 1 : iterations;
    for (Case &c : cases) {
      double mpi = microseconds(reps, c.mpi);
      double nonblocking = microseconds(reps, c.nonblocking);
      loomrt_set_timeout(0);
      double runtime = microseconds(reps, c.runtime);
      loomrt_set_timeout(600);
      double watched = microseconds(reps, c.runtime);
      loomrt_set_timeout(0);
      if (me == 0)
        std::printf("%-15s %10lld %10.1f %10.1f %10.1f %10.1f %8.2f\n",
                    c.name, (long long)n, mpi, nonblocking, runtime, watched,
                    watched / mpi);
    }
  }
  loomrt_finalize();
  return 0;
}
