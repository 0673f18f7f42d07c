//===- Stall.cpp - A rank never joins; the others time out ----------------===//
//
// Three ranks, loomrt_set_timeout(2 s). Ranks 0 and 1 all-reduce over the
// world; rank 2
//   absent      sleeps instead (stopped, or stuck computing)
//   elsewhere   all-reduces over the group {1, 2}, which rank 1 never joins
// check-stall.sh asserts the job ends with a report naming rank 2 as not
// arriving or as waiting in the other all-reduce, and never rank 0 or 1
// as missing: they arrived.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <cstdio>
#include <cstring>
#include <unistd.h>

int main(int argc, char **argv) {
  loomrt_init(&argc, &argv);
  if (argc != 2 || loomrt_world_size() != 3)
    loomrt_abort("usage: mpirun -np 3 loomrt-stall absent|elsewhere");
  const int me = loomrt_world_rank();
  int32_t sizes[2] = {1, 2}, ranks[3] = {0, 1, 2};
  loomrt_comm pair = loomrt_comm_create(2, sizes, ranks); // {0}, {1, 2}
  loomrt_set_timeout(2.0);
  float x = 1;
  if (me == 2) {
    if (!std::strcmp(argv[1], "absent"))
      sleep(60);
    else
      loomrt_all_reduce(pair, LOOMRT_F32, LOOMRT_SUM, &x, &x, 1);
  } else {
    loomrt_all_reduce(loomrt_comm_world(), LOOMRT_F32, LOOMRT_SUM, &x, &x, 1);
  }
  std::printf("rank %d: all-reduce returned, which it must not\n", me);
  loomrt_finalize();
  return 0;
}
