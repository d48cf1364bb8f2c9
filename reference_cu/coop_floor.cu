// coop_floor.cu: the CUDA C++ yardsticks of `python -m bench probe floors` (built by the probe at run
// time: nvcc -O2 -arch=sm_90 -cubin; not part of `python -m bench build-reference`).
//
// Both kernels do no work: launched cooperatively with the persistent schedulers' grid (one 128-thread
// block per worker), they time what a cooperative launch costs (coop_floor_empty) and what CUDA's own
// grid barrier, cooperative groups' grid.sync(), costs twice over (coop_floor_two_grid_syncs), beside
// the Numba kernels and the persistent kernel's empty-work floors in the same process.

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

extern "C" __global__ void coop_floor_empty() {}

extern "C" __global__ void coop_floor_two_grid_syncs() {
    cg::grid_group grid = cg::this_grid();
    grid.sync();
    grid.sync();
}
