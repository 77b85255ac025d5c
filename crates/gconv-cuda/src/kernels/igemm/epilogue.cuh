#line 2 "igemm/epilogue.cuh"
// cuda.igemm, epilogue: where and how a block writes its results (OUT_MODE).

// Where the block writes: row offsets come from the GEMM row, columns are contiguous
// channels from `col_base`, valid below `col_limit` counted from `col_start`.
// OUT_MODE (compile-time, as a run-time branch per output would multiply the epilogue's code
// and its build time): 0 stores into out, 1 adds into the fp32 workspace with atomics, 2
// stores into the block's slice of the workspace.
#ifndef OUT_MODE
#define OUT_MODE 0
#endif
struct Output {
    elem_t* out;
    float* ws;
    long long slice;
    int col_base, col_start, col_limit;
};

__device__ __forceinline__ void emit(const Output& o, int off, float v) {
#if OUT_MODE == 0
    o.out[off] = from_f32(v);
#elif OUT_MODE == 1
    atomicAdd(&o.ws[off], v);
#else
    o.ws[o.slice + off] = v;
#endif
}

// Each accumulator to its place, straight from registers.
__device__ __forceinline__ void store_block(const ConvParams& p, const Block& blk, const float (&acc)[ACC_I][ACC_J][ACC_E],
                                            elem_t* out, float* ws, int tid) {
    Output o;
    o.out = out;
    o.ws = ws;
    o.slice = (long long)blk.z * p.g * p.kg * p.ws[0];
    o.col_start = blk.n0;
    o.col_limit = blk.N;
#if DIR == 0
    o.col_base = blk.group * p.kg + blk.n0;
#elif DIR == 1
    o.col_base = blk.group * p.cg + blk.n0;
#else
    o.col_base = blk.n0;  // dw[k][tap][c] is contiguous over (tap, c) in channels-last
#endif
    auto row_offset = [&](int m) {
#if DIR == 2
        return (blk.group * p.kg + m) * p.ws[0];
#else
        int c[3];
        const int img = decode_pixel(m, blk.rows_ext, c);
        int off = 0;
#pragma unroll
        for (int d = 0; d < 3; ++d) {
#if DIR == 1
            off += (blk.phase[d] + c[d] * phase_stride(p, d)) * p.xs[2 + d];
#else
            off += c[d] * p.ys[2 + d];
#endif
        }
        return off + img * (DIR == 1 ? p.xs[0] : p.ys[0]);
#endif
    };
#if TC
    const int lane = tid % 32, warp = tid / 32;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = blk.m0 + wm * WM + mi * 16 + lane / 4 + h * 8;
            if (m >= blk.M) continue;
            const int roff = row_offset(m);
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int col = wn * WN + ni * 8 + (lane % 4) * 2;
                const float v0 = acc[mi][ni][h * 2], v1 = acc[mi][ni][h * 2 + 1];
                const int off = roff + o.col_base + col;
                if (OUT_MODE == 0 && o.col_start + col + 1 < o.col_limit && off % 2 == 0) {
                    store_pair(out + off, v0, v1);
                } else {
                    if (o.col_start + col < o.col_limit) emit(o, off, v0);
                    if (o.col_start + col + 1 < o.col_limit) emit(o, off + 1, v1);
                }
            }
        }
#else
    const int tx = tid % TX, ty = tid / TX;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = blk.m0 + simt_row<TM, A_KMAJOR>(ty, i, TY, BM);
        if (m >= blk.M) continue;
        const int roff = row_offset(m);
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = simt_row<TN, B_KMAJOR>(tx, j, TX, BN);
            if (o.col_start + col < o.col_limit) emit(o, roff + o.col_base + col, acc[i][j][0]);
        }
    }
#endif
}
