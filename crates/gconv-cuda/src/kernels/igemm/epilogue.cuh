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
