// Converts an activation tensor between two network layers' formats: the data type (one of
// SRC_F32, SRC_F16, SRC_BF16 to one of DST_F32, DST_F16, DST_BF16) and, in gconv_transpose,
// the layout. common.cuh, before every build, holds the 16-bit conversions.

#if defined(SRC_F32)
typedef float src_t;
__device__ __forceinline__ float load(src_t v) { return v; }
#elif defined(SRC_F16)
typedef unsigned short src_t;
__device__ __forceinline__ float load(src_t v) { return f16_to_f32(v); }
#elif defined(SRC_BF16)
typedef unsigned short src_t;
__device__ __forceinline__ float load(src_t v) { return bf16_to_f32(v); }
#else
#error "define one of SRC_F32, SRC_F16, SRC_BF16"
#endif

#if defined(DST_F32)
typedef float dst_t;
__device__ __forceinline__ dst_t store(float v) { return v; }
#elif defined(DST_F16)
typedef unsigned short dst_t;
__device__ __forceinline__ dst_t store(float v) { return f32_to_f16(v); }
#elif defined(DST_BF16)
typedef unsigned short dst_t;
__device__ __forceinline__ dst_t store(float v) { return f32_to_bf16(v); }
#else
#error "define one of DST_F32, DST_F16, DST_BF16"
#endif

// Same layout: element by element.
extern "C" __global__ void gconv_cast(const src_t* in, dst_t* out, unsigned long long n) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += step) {
        out[i] = store(load(in[i]));
    }
}

// Each image (blockIdx.z) is a rows x cols matrix in the source (NCHW: channels x pixels;
// NHWC: pixels x channels) and is written transposed. A 32 x 32 tile passes through shared
// memory so that reads and writes are both coalesced; blocks are 32 x 8 threads.
#define TILE 32
extern "C" __global__ void gconv_transpose(const src_t* in, dst_t* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    const long long image = (long long)blockIdx.z * rows * cols;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    for (int dy = threadIdx.y; dy < TILE; dy += blockDim.y) {
        const int r = r0 + dy, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[dy][threadIdx.x] = load(in[image + (long long)r * cols + c]);
    }
    __syncthreads();
    for (int dx = threadIdx.y; dx < TILE; dx += blockDim.y) {
        const int c = c0 + dx, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[image + (long long)c * rows + r] = store(tile[threadIdx.x][dx]);
    }
}
