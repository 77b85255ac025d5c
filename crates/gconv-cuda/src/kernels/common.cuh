// Shared by every gconv kernel. NVRTC builds these with no toolkit headers, so 16-bit types
// are raw bits with conversions in inline PTX. Exactly one of GCONV_F32, GCONV_F16,
// GCONV_BF16 is defined by the build.

// 16-bit values as raw bits, to and from fp32 (round to nearest even).
__device__ __forceinline__ float f16_to_f32(unsigned short v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ unsigned short f32_to_f16(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
__device__ __forceinline__ float bf16_to_f32(unsigned short v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ unsigned short f32_to_bf16(float v) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

#if defined(GCONV_F32)
typedef float elem_t;
__device__ __forceinline__ float to_f32(elem_t v) { return v; }
__device__ __forceinline__ elem_t from_f32(float v) { return v; }
#elif defined(GCONV_F16)
typedef unsigned short elem_t;
__device__ __forceinline__ float to_f32(elem_t v) { return f16_to_f32(v); }
__device__ __forceinline__ elem_t from_f32(float v) { return f32_to_f16(v); }
#elif defined(GCONV_BF16)
typedef unsigned short elem_t;
__device__ __forceinline__ float to_f32(elem_t v) { return bf16_to_f32(v); }
__device__ __forceinline__ elem_t from_f32(float v) { return f32_to_bf16(v); }
#else
#error "define one of GCONV_F32, GCONV_F16, GCONV_BF16"
#endif

// A shared-memory pointer as the 32-bit address PTX's shared-state-space instructions take.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// ldmatrix: four 8x8 matrices of 16-bit elements from shared memory, lane l giving the address
// (a shared-state-space address, or a pointer) of row l % 8 of matrix l / 8 (sm_75+); .trans
// transposes each.
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) { ldmatrix_x4(r, smem_addr(p)); }

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) { ldmatrix_x4_trans(r, smem_addr(p)); }

__device__ __forceinline__ void ldmatrix_x2(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned* r, const void* p) { ldmatrix_x2(r, smem_addr(p)); }

__device__ __forceinline__ void ldmatrix_x2_trans(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x2_trans(unsigned* r, const void* p) { ldmatrix_x2_trans(r, smem_addr(p)); }

// 16 bytes from global to shared memory by cp.async, or zeros when !valid (src must then still
// be a mapped address).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}

#if defined(GCONV_BF16) || defined(GCONV_F16)
// c += a b on the tensor cores, m16n8k16 with fp32 accumulators (sm_80+): a row-major 16 x 16,
// b column-major 16 x 8, in the fragments ldmatrix gives.
__device__ __forceinline__ void mma_m16n8k16(float* c, const unsigned* a, const unsigned* b) {
#if defined(GCONV_BF16)
#define MMA_16BIT_TYPES "bf16.bf16"
#else
#define MMA_16BIT_TYPES "f16.f16"
#endif
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_16BIT_TYPES ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// a / b rounded toward minus infinity (b > 0); constexpr, so that compile-time tile offsets can
// use it too.
__host__ __device__ constexpr int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
// The problem in index form, as gconv_core::Geometry: three spatial dimensions (outer ones of
// size 1 when the rank is lower) and element strides of each tensor. Must match ConvParams in
// params.rs field for field.
struct ConvParams {
    int n, g, cg, kg;
    int in[3], fil[3], out[3], stride[3], pad[3], dil[3];
    // Strides: [outer, channel, d, h, w]; outer is the image for x and y, k for w.
    int xs[5], ws[5], ys[5];
};

__device__ __forceinline__ int offset(const int* s, int outer, int c, int d, int h, int w) {
    return outer * s[0] + c * s[1] + d * s[2] + h * s[3] + w * s[4];
}

// The source coordinate a destination coordinate reads at filter tap f, or -1 if none:
// forward reads input dst * stride + f * dil - pad; backward-data reads the output position
// (if any) whose forward read lands on dst.
__device__ __forceinline__ int src_coord(int dst, int f, int stride, int pad, int dil, int extent, bool backward) {
    if (!backward) {
        const int i = dst * stride + f * dil - pad;
        return (i >= 0 && i < extent) ? i : -1;
    }
    const int t = dst + pad - f * dil;
    if (t < 0 || t % stride != 0) return -1;
    const int o = t / stride;
    return o < extent ? o : -1;
}

// The taps of a gathering direct kernel's destination pixel row (a, b): tap(fd, fh, fw, sa, sb)
// for every tap whose source depth sa and row sb exist (the caller checks columns). se: the
// source's extents. FH and FW are unrolled; the depth is a run-time loop.
template <int FH_, int FW_, bool BACKWARD, class Tap>
__device__ __forceinline__ void for_each_tap(const ConvParams& p, const int* se, int a, int b, Tap&& tap) {
    for (int fd = 0; fd < p.fil[0]; ++fd) {
        const int sa = src_coord(a, fd, p.stride[0], p.pad[0], p.dil[0], se[0], BACKWARD);
        if (sa < 0) continue;
#pragma unroll
        for (int fh = 0; fh < FH_; ++fh) {
            const int sb = src_coord(b, fh, p.stride[1], p.pad[1], p.dil[1], se[1], BACKWARD);
            if (sb < 0) continue;
#pragma unroll
            for (int fw = 0; fw < FW_; ++fw) tap(fd, fh, fw, sa, sb);
        }
    }
}
