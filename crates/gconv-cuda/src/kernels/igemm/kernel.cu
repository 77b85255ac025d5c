#line 2 "igemm/kernel.cu"
// cuda.igemm_tc and cuda.igemm_simt: implicit GEMM for channels-last tensors, one GEMM per
// group (blockIdx.z), tiles staged through shared memory by a cp.async pipeline. The kernel
// joins its pieces, which come before it in this order (igemm/mod.rs joins the files):
// layout.cuh (shared-memory layout), pipeline.cuh (cp.async), geometry.cuh (taps, pixels, the
// block's GEMM), math.cuh (mma or FMA per stage), epilogue.cuh (stores), loader.cuh (tile
// loads per direction), mainloop.cuh.
//
// Backward-data with stride s is split into s^rank phases (sub-pixel decomposition): the input
// pixels of one phase are read by the same taps, so taps that read nothing are skipped whole
// and no row needs a divisibility test. Backward-weight splits the pixel reduction into
// `zdim` slices that add into an fp32 workspace (atomics) or write one slice each (two-stage).
//
// Compile-time: DIR (0 fwd, 1 bwd-data, 2 bwd-weight), BM, BN, BK (block tile), THREADS,
// STAGES (pipeline depth), CPW_A and CPW_B (elements per global->shared copy of each operand:
// 16, 8 or 4 bytes by cp.async, 2 bytes by plain loads), TC (1: mma.sync with fp32 accumulation, m16n8k16 on 16-bit
// types or m16n8k8 on TF32-rounded fp32 (GCONV_TF32), with WARPS_M x WARPS_N warps; 0: fp32
// FMA, a TM x TN outer product per thread), OUT_MODE (see Output), TAP_BITS (tap-mask bits per
// dimension), STRIDED (backward-data: 0 where every stride is 1, see phase_stride) and
// MIN_BLOCKS (blocks per SM the registers are budgeted for).

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
    igemm(ConvParams p, const elem_t* a_src, const elem_t* b_src, elem_t* out, float* ws, int zdim) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    elem_t* const a_smem = reinterpret_cast<elem_t*>(smem_raw);
    elem_t* const b_smem = a_smem + STAGES * A_STAGE;
    const int tid = threadIdx.x;
    const Block blk = block_of(p, zdim);
    if (blk.m0 >= blk.M) return;

    Loader loader;
    loader.start(p, blk, tid);
    float acc[ACC_I][ACC_J][ACC_E];
#pragma unroll
    for (int i = 0; i < ACC_I; ++i)
#pragma unroll
        for (int j = 0; j < ACC_J; ++j)
#pragma unroll
            for (int e = 0; e < ACC_E; ++e) acc[i][j][e] = 0.0f;
    main_loop(loader, p, blk, a_src, b_src, a_smem, b_smem, acc, tid);
    store_block(p, blk, acc, out, ws, tid);
}
