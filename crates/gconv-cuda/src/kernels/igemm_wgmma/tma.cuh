struct __align__(128) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
#if CLUSTER_CTAS == 1
    return 0;
#else
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
#endif
}

// This CTA's slice of the cluster's reduction (see KSPLIT).
__device__ __forceinline__ int cluster_slice() { return KSPLIT == 1 ? 0 : cluster_rank() / CLUSTER; }

// The first of the CTAs that share this CTA's loads: its slice's.
__device__ __forceinline__ unsigned first_sharing() { return cluster_slice() * CLUSTER; }

// The CTAs that share this CTA's loads, as a multicast's mask.
__device__ __forceinline__ unsigned short multicast_mask() { return (unsigned short)(((1u << CLUSTER) - 1) << first_sharing()); }

// Arrive on the barrier at shared address `bar` in every CTA that shares this one's loads
// (with one CTA, its own).
// The arrive's default CTA-scope release is enough: the stage it frees was read by MMAs already
// waited for. A cluster-scope release compiles to a fence that waits for the MMAs still in
// flight, serialising the consumers (Nsight Compute on the H100: cluster 2 ran 2.6x slower
// than 1, its warps stalled on the fence).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar) {
#if CLUSTER == 1
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#else
    const unsigned first = first_sharing();
#pragma unroll
    for (unsigned cta = first; cta < first + CLUSTER; ++cta) {
        asm volatile(
            "{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [remote]; }"
            ::"r"(bar), "r"(cta)
            : "memory");
    }
#endif
}

// Every thread of the cluster: its barriers are initialised before any CTA multicasts into or
// arrives on them, and none leaves while another may still do so.
__device__ __forceinline__ void cluster_sync() {
#if CLUSTER_CTAS > 1
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
#endif
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

// The source tile: BM pixels of the im2col window from source position (w, h, d, n) on (the
// tile's first destination pixel times the stride, less the pad), 64 channels from c, shifted
// by the tap's offsets (ow, oh, od); pixels wrap across rows, planes and images, and those
// outside the tensor read as zeros. Coordinates and offsets go innermost first, as many as the
// map's rank wants. MULTICAST: into every CTA that shares the loads.
#if SPATIAL == 1
#define IM2COL_DIM "3d"
#define IM2COL_OPERANDS "{%2, %3, %4}], [%5], {%6}"
#define IM2COL_MASK ", %7"
#define IM2COL_INPUTS "r"(c), "r"(pos[2]), "r"(n), "r"(bar), "h"(off[2])
#elif SPATIAL == 2
#define IM2COL_DIM "4d"
#define IM2COL_OPERANDS "{%2, %3, %4, %5}], [%6], {%7, %8}"
#define IM2COL_MASK ", %9"
#define IM2COL_INPUTS "r"(c), "r"(pos[2]), "r"(pos[1]), "r"(n), "r"(bar), "h"(off[2]), "h"(off[1])
#elif SPATIAL == 3
#define IM2COL_DIM "5d"
#define IM2COL_OPERANDS "{%2, %3, %4, %5, %6}], [%7], {%8, %9, %10}"
#define IM2COL_MASK ", %11"
#define IM2COL_INPUTS "r"(c), "r"(pos[2]), "r"(pos[1]), "r"(pos[0]), "r"(n), "r"(bar), "h"(off[2]), "h"(off[1]), "h"(off[0])
#else
#error "SPATIAL must be 1, 2 or 3"
#endif
#define TMA_LOAD(DIM, MODE) "cp.async.bulk.tensor." DIM ".shared::cluster.global." MODE ".mbarrier::complete_tx::bytes"

template <bool MULTICAST>
__device__ __forceinline__ void load_im2col(unsigned dst, const TensorMap* map, int c, const int* pos, int n, const unsigned short* off, unsigned bar) {
    if constexpr (MULTICAST && CLUSTER > 1) {
        asm volatile(TMA_LOAD(IM2COL_DIM, "im2col") ".multicast::cluster [%0], [%1, " IM2COL_OPERANDS IM2COL_MASK ";"
                     ::"r"(dst), "l"(map), IM2COL_INPUTS, "h"(multicast_mask())
                     : "memory");
    } else {
        asm volatile(TMA_LOAD(IM2COL_DIM, "im2col") " [%0], [%1, " IM2COL_OPERANDS ";" ::"r"(dst), "l"(map), IM2COL_INPUTS : "memory");
    }
}

// A box of a 3D array by a tiled map, from (x, y, z) on, x innermost: the filter's rows x
// 64 reduction elements (x a tap's channels, y the tap, z the row), or dy's 64 pixels x 64
// channels (z 0).
template <bool MULTICAST>
__device__ __forceinline__ void load_tile(unsigned dst, const TensorMap* map, int x, int y, int z, unsigned bar) {
    if constexpr (MULTICAST && CLUSTER > 1) {
        asm volatile(TMA_LOAD("3d", "tile") ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;"
                     ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar), "h"(multicast_mask())
                     : "memory");
    } else {
        asm volatile(TMA_LOAD("3d", "tile") " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar) : "memory");
    }
}

// A box of a 4D array by a tiled map, from (x, y, z, w) on, x innermost: HALO's source
// rectangle (x its channels, y the columns, z the rows, w the image).
__device__ __forceinline__ void load_box4(unsigned dst, const TensorMap* map, int x, int y, int z, int w, unsigned bar) {
    asm volatile(TMA_LOAD("4d", "tile") " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar) : "memory");
}

// Operands in shared memory with 128-byte swizzle, as the TMA loads lay them out: rows of 128
// bytes (64 elements) in atoms of 8 rows, 1024 bytes apart (the stride byte offset). K-major
// (rows along M or N, 64 K elements each): stepping 16 elements along K adds 32 bytes, the
// leading byte offset is unused. MN-major (a row per K element, 64 M or N elements each): 16
// rows of K are 2048 bytes, and each further 64 M or N elements lie in the next 64-row tile,
// 8 KB on (the leading byte offset).
__device__ __forceinline__ unsigned long long smem_desc_k(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ unsigned long long smem_desc_mn(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((64ull * ROW_BYTES >> 4) << 16) | (64ull << 32) | (1ull << 62);
}

// wgmma m64nBN's operand list: BN / 2 accumulators per thread, then the two descriptors and
// the flag that adds to the accumulators (zero: overwrite them).
#define P10(t) "%" #t "0, %" #t "1, %" #t "2, %" #t "3, %" #t "4, %" #t "5, %" #t "6, %" #t "7, %" #t "8, %" #t "9, "
#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define ACC32(i) ACC8(i), ACC8(i + 8), ACC8(i + 16), ACC8(i + 24)
#if BN == 64
#define WGMMA_D P10() P10(1) P10(2) "%30, %31"
#define WGMMA_AB "%32, %33"
#define WGMMA_FLAG "%34"
#define WGMMA_ACC ACC32(0)
#elif BN == 128
#define WGMMA_D P10() P10(1) P10(2) P10(3) P10(4) P10(5) "%60, %61, %62, %63"
#define WGMMA_AB "%64, %65"
#define WGMMA_FLAG "%66"
#define WGMMA_ACC ACC32(0), ACC32(32)
#elif BN == 256
#define WGMMA_D P10() P10(1) P10(2) P10(3) P10(4) P10(5) P10(6) P10(7) P10(8) P10(9) P10(10) P10(11) "%120, %121, %122, %123, %124, %125, %126, %127"
#define WGMMA_AB "%128, %129"
#define WGMMA_FLAG "%130"
#define WGMMA_ACC ACC32(0), ACC32(32), ACC32(64), ACC32(96)
#else
#error "BN must be 64, 128 or 256"
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
// TA, TB: 1 for an MN-major A or B, 0 for K-major; tf32 takes K-major only and no flags.
#if defined(GCONV_TF32)
#define WGMMA_TYPES "k8.f32.tf32.tf32"
#define WGMMA_TRANSPOSE(TA, TB) ""
#elif defined(GCONV_F16)
#define WGMMA_TYPES "k16.f32.f16.f16"
#define WGMMA_TRANSPOSE(TA, TB) ", " #TA ", " #TB
#else
#define WGMMA_TYPES "k16.f32.bf16.bf16"
#define WGMMA_TRANSPOSE(TA, TB) ", " #TA ", " #TB
#endif
// wgmma m64nN on accumulators D (the operand list above), descriptors AB and the flag.
#define WGMMA_SHAPE(N, D, AB, FLAG, ACC, TA, TB)                                                                      \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, " FLAG ", 0;\n"                                                     \
                 "wgmma.mma_async.sync.aligned.m64n" STR(N) WGMMA_TYPES " {" D "}, " AB ", p, 1, 1" WGMMA_TRANSPOSE(TA, TB) "; }" \
                 : ACC                                                                                                \
                 : "l"(a), "l"(b), "r"(accumulate))
#define WGMMA(TA, TB) WGMMA_SHAPE(BN, WGMMA_D, WGMMA_AB, WGMMA_FLAG, WGMMA_ACC, TA, TB)

template <bool A_MN, bool B_MN>
__device__ __forceinline__ void wgmma(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    static_assert(B_MN || !A_MN, "no kernel reads an MN-major A with a K-major B");
    if constexpr (A_MN) {
        WGMMA(1, 1);
    } else if constexpr (B_MN) {
        WGMMA(0, 1);
    } else {
        WGMMA(0, 0);
    }
}

// DIAGONAL (forward and backward-data of a layer whose groups run blocked, as many output as
// input channels a group, 16-bit types; 0 otherwise): the filter tile is block-diagonal in
// blocks of DIAGONAL channels, so an MMA's 16 reduction channels reach DIAG_N of the tile's
// columns and it multiplies only those (m64n16 for blocks of 4 to 16, m64n32 for 32), not the
// whole tile's zeros.
#ifndef DIAGONAL
#define DIAGONAL 0
#endif
#if DIAGONAL
#if defined(GCONV_TF32) || WEIGHT || BN != 64 || 64 % DIAGONAL != 0 || DIAGONAL > 32
#error "DIAGONAL takes 16-bit forward or backward-data on 64-column tiles, blocks of 4 to 32 channels"
#endif
#if DIAGONAL <= 16
#define DIAG_N 16
#define DIAG_D "%0, %1, %2, %3, %4, %5, %6, %7"
#define DIAG_AB "%8, %9"
#define DIAG_FLAG "%10"
#define DIAG_ACC ACC8(0)
#else
#define DIAG_N 32
#define DIAG_D P10() "%10, %11, %12, %13, %14, %15"
#define DIAG_AB "%16, %17"
#define DIAG_FLAG "%18"
#define DIAG_ACC ACC8(0), ACC8(8)
#endif

template <bool B_MN>
__device__ __forceinline__ void wgmma_diagonal(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    if constexpr (B_MN) {
        WGMMA_SHAPE(DIAG_N, DIAG_D, DIAG_AB, DIAG_FLAG, DIAG_ACC, 0, 1);
    } else {
        WGMMA_SHAPE(DIAG_N, DIAG_D, DIAG_AB, DIAG_FLAG, DIAG_ACC, 0, 0);
    }
}
#endif

// Shared memory: STAGES stages of a BM-row A tile and a BN-row B tile (rows of 128 bytes,
// 1024-byte aligned as the 128-byte swizzle wants), then a full and an empty barrier per
// stage (TRANSPOSE: and a transposed one), then (PERSISTENT) the epilogue's staging area. The
// producer arrives once on a full barrier (with the bytes its CTA's stage receives: its own
// loads and its cluster partners' multicasts; FILL_FILTER: and each lane of the helper warp
// that writes its filter), each consumer warpgroup of the cluster once on an empty one (every
// CTA's producer writes into every CTA's stage), each transposer thread once on a transposed
// one.
constexpr unsigned TILE64_BYTES = 64 * ROW_BYTES, A_BYTES = HALO ? 0 : BM * ROW_BYTES, B_BYTES = BN * ROW_BYTES, STAGE_BYTES = A_BYTES + B_TILES * B_BYTES;
// What TMA writes into a stage (FILL_FILTER: the helper warps write the filter).
constexpr unsigned LOADED_BYTES = FILL_FILTER ? A_BYTES : STAGE_BYTES;
// The threads that arrive on a full barrier besides the producer's (FILL_FILTER: the lanes of
// the helper warp that writes the stage's filter).
constexpr unsigned FILLERS = FILL_FILTER ? 32 : 0;
// Backward-weight loads its MN-major tiles in panels of a row of channels x a block of pixels
// (16-bit types: 64 x 64, tf32: 32 x 32).
constexpr unsigned PANEL_ROWS_BYTES = PIXEL_BLOCK * ROW_BYTES;
constexpr int BARRIERS = 2 + TRANSPOSE;
// HALO: a full and an empty barrier per halo buffer.
constexpr int HALO_BARRIERS = HALO ? 4 : 0;
// Each CTA of a cluster loads this much of the B tile (its rows from rank x B_SHARE_ROWS on)
// and multicasts it.
constexpr unsigned B_SHARE_ROWS = BN / CLUSTER;

