#line 2 "igemm/pipeline.cuh"
// cuda.igemm, pipeline: global->shared copies by cp.async (plain loads for narrow
// chunks) and the commit/wait of its stages.

// Copies W elements, or writes zeros when !valid (src must then still be a mapped address).
template <int W>
__device__ __forceinline__ void copy_chunk(elem_t* dst, const elem_t* src, bool valid) {
    constexpr int BYTES = W * ELEM_BYTES;
    if constexpr (BYTES == 16) {
        cp_async_16(dst, src, valid);
    } else if constexpr (BYTES >= 4) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(smem_addr(dst)), "l"(src), "n"(BYTES), "r"(valid ? BYTES : 0));
    } else {
#pragma unroll
        for (int e = 0; e < W; ++e) dst[e] = valid ? src[e] : from_f32(0.0f);
    }
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }

template <int N>
__device__ __forceinline__ void wait_pending() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}
