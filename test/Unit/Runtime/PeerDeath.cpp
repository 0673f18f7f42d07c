//===- PeerDeath.cpp - A rank dies while the others wait ------------------===//
//
// Rank 1 fails in one of these ways while rank 0 blocks in an all-reduce
// that rank 1 never joins; check-peer-death.sh asserts the job ends with an
// error within seconds instead of hanging.
//   exit        exit(0) without loomrt_finalize
//   signal      SIGKILL
//   fatal       a kernel misuse error (loomrt aborts the job with a message)
//   short-recv  rank 0 sends 3 elements where rank 1 expects 4
//   bad-groups  rank 1 passes a different group list to comm_create
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

int main(int argc, char **argv) {
  loomrt_init(&argc, &argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: loomrt-peer-death "
                         "exit|signal|fatal|short-recv|bad-groups\n");
    loomrt_abort("bad usage");
  }
  loomrt_comm world = loomrt_comm_world();
  const int me = loomrt_world_rank();
  if (!std::strcmp(argv[1], "short-recv")) {
    float buf[4] = {0, 1, 2, 3};
    if (me == 0)
      loomrt_send(world, LOOMRT_F32, buf, 3, 1);
    else if (me == 1)
      loomrt_recv(world, LOOMRT_F32, buf, 4, 0);
  } else if (!std::strcmp(argv[1], "bad-groups")) {
    int32_t sizes[1] = {2}, ranks[2] = {0, 1};
    if (me == 1) {
      ranks[0] = 1; // same ranks, other order: a different partition
      ranks[1] = 0;
    }
    loomrt_comm_create(1, sizes, ranks);
  }
  if (me == 1) {
    usleep(200 * 1000); // let rank 0 enter the collective first
    if (!std::strcmp(argv[1], "exit"))
      std::exit(0); // even a "successful" exit without finalize
    if (!std::strcmp(argv[1], "signal"))
      raise(SIGKILL);
    if (!std::strcmp(argv[1], "fatal")) {
      float x = 0;
      loomrt_cast(42, &x, LOOMRT_F32, &x, 1); // unknown dtype: fatal
    }
  }
  float x = 1;
  loomrt_all_reduce(world, LOOMRT_F32, LOOMRT_SUM, &x, &x, 1);
  std::printf("rank %d: all-reduce returned, which it must not\n", me);
  loomrt_finalize();
  return 0;
}
