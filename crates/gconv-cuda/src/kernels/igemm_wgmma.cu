// cuda.igemm_wgmma (sm_90a): forward implicit GEMM, channels-last 2D, on the warpgroup MMA fed
// by the tensor memory accelerator. Per group g (blockIdx.z), GEMM rows are output pixels
// (M = N x OH x OW), columns output channels of the group (Kg), the reduction runs over taps x
// input channels of the group (FH x FW x Cg) in blocks of 64 channels of one tap.
//
// One producer warpgroup (one elected thread) issues, per reduction block, a TMA im2col load
// of the BM x 64 activation tile (the tap as the im2col offset, padding zero-filled by the
// TMA unit) and a tiled load of the BN x 64 filter tile, both 128-byte swizzled, onto the
// stage's full barrier. Two consumer warpgroups each multiply a 64-row half of the tile with
// wgmma m64nBNk16 (4 per block), then release the stage on its empty barrier. STAGES stages.
// Accumulators are fp32; the epilogue rounds and stores them straight from registers.
//
// Compile-time: BN (128), STAGES, IN_F16 (fp16 operands, else bf16). Run-time: the problem
// (ConvParams) and the two tensor maps, made on the host (cuTensorMapEncodeIm2col / Tiled).

#define BM 128
#define BK 64
#define CONSUMERS 2

struct __align__(128) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// The activation tile: BM pixels of the im2col window from input position (w, h, n) on (the
// tile's first output pixel times the stride, less the pad), 64 channels from c, shifted by
// the tap's offset (ow, oh); pixels wrap across rows and images, and those outside the tensor
// read as zeros.
__device__ __forceinline__ void load_im2col(unsigned dst, const TensorMap* map, int c, int w, int h, int n, unsigned short ow, unsigned short oh, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
        ::"r"(dst), "l"(map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar), "h"(ow), "h"(oh)
        : "memory");
}

// The filter tile: BN filters from row k on, 64 reduction elements from column r.
__device__ __forceinline__ void load_tile(unsigned dst, const TensorMap* map, int r, int k, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(map), "r"(r), "r"(k), "r"(bar)
        : "memory");
}

// A K-major operand in shared memory with 128-byte swizzle: rows of 128 bytes in atoms of 8
// rows (stride 1024 bytes between atoms); stepping 16 elements along K adds 32 bytes.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_n128(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
#if IN_F16
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
#else
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
#endif
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
}

extern "C" __global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)
    igemm_wgmma(const __grid_constant__ TensorMap x_map, const __grid_constant__ TensorMap w_map, ConvParams p, elem_t* y) {
    extern __shared__ unsigned char raw[];
    // 128-byte swizzled tiles want 1024-byte alignment.
    const unsigned base = (smem_addr(raw) + 1023) & ~1023u;
    constexpr unsigned A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    const unsigned bars = base + STAGES * STAGE_BYTES;  // full[STAGES], then empty[STAGES]
    const int Cg = p.cg, Kg = p.kg, g = blockIdx.z;
    const int chunks = Cg / BK, taps = FH * FW, blocks = taps * chunks;
    const int pixels = p.out[1] * p.out[2];
    const int m_total = p.n * pixels;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bars + 8 * s, 1);
            mbar_init(bars + 8 * (STAGES + s), CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x != 0) return;
        asm volatile("prefetch.tensormap [%0];" ::"l"(&x_map) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(&w_map) : "memory");
        // The tile's first pixel, as the input position its first tap starts from.
        const int n = m0 / pixels, oh = m0 % pixels / p.out[2], ow = m0 % p.out[2];
        const int h = oh * p.stride[1] - p.pad[1], w = ow * p.stride[2] - p.pad[2];
        for (int it = 0; it < blocks; ++it) {
            const int s = it % STAGES;
            if (it >= STAGES) mbar_wait(bars + 8 * (STAGES + s), (it / STAGES - 1) & 1);
            const unsigned full = bars + 8 * s, a = base + s * STAGE_BYTES;
            const int tap = it / chunks, c0 = (it % chunks) * BK;
            const int fh = tap / FW, fw = tap % FW;
            mbar_expect_tx(full, STAGE_BYTES);
            load_im2col(a, &x_map, g * Cg + c0, w, h, n, (unsigned short)(fw * p.dil[2]), (unsigned short)(fh * p.dil[1]), full);
            load_tile(a + A_BYTES, &w_map, tap * Cg + c0, g * Kg + n0, full);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    const int half = wg - 1;
    for (int it = 0; it < blocks; ++it) {
        const int s = it % STAGES;
        mbar_wait(bars + 8 * s, (it / STAGES) & 1);
        const unsigned a = base + s * STAGE_BYTES + half * 64 * BK * 2, b = base + s * STAGE_BYTES + A_BYTES;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) wgmma_n128(d, smem_desc(a + kk * 32), smem_desc(b + kk * 32), it > 0 || kk > 0);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (threadIdx.x % 128 == 0) mbar_arrive(bars + 8 * (STAGES + s));
    }
    // Accumulator layout of m64nN: warp w of the warpgroup holds rows 16w + lane/4 and + 8;
    // register 4j + {0, 1} columns 8j + 2 (lane % 4) + {0, 1} of the first row, + {2, 3} of
    // the second.
    const int lane = threadIdx.x % 32, warp = threadIdx.x % 128 / 32;
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
        const int m = m0 + half * 64 + warp * 16 + lane / 4 + half_row * 8;
        if (m >= m_total) continue;
        elem_t* row = y + (long long)m * p.ys[4] + (long long)g * Kg;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int n = n0 + j * 8 + (lane % 4) * 2;
            if (n >= Kg) continue;
            elem_t pair[2] = {from_f32(d[4 * j + 2 * half_row]), from_f32(d[4 * j + 2 * half_row + 1])};
            *reinterpret_cast<unsigned*>(row + n) = *reinterpret_cast<unsigned*>(pair);
        }
    }
}
