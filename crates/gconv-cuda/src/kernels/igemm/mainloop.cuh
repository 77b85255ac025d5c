#line 2 "igemm/mainloop.cuh"
// cuda.igemm, main loop: STAGES tiles in flight through the cp.async pipeline; each iteration
// waits for the oldest, refills the stage read one iteration ago and multiplies the oldest.

__device__ __forceinline__ void main_loop(Loader& loader, const ConvParams& p, const Block& blk, const elem_t* a_src,
                                          const elem_t* b_src, elem_t* a_smem, elem_t* b_smem,
                                          float (&acc)[ACC_I][ACC_J][ACC_E], int tid) {
    auto load_stage = [&](int stage) {
        loader.load(p, blk, a_src, b_src, a_smem + stage * A_STAGE, b_smem + stage * B_STAGE, tid);
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < blk.iters) load_stage(s);
        commit();
    }
    for (int it = 0; it < blk.iters; ++it) {
        wait_pending<STAGES - 2>();
        __syncthreads();
        // The stage refilled here was read in the previous iteration, which every warp has
        // finished by the barrier above.
        if (it + STAGES - 1 < blk.iters) load_stage((it + STAGES - 1) % STAGES);
        commit();
        multiply_stage(acc, a_smem + (it % STAGES) * A_STAGE, b_smem + (it % STAGES) * B_STAGE, tid);
    }
    wait_pending<0>();
}
