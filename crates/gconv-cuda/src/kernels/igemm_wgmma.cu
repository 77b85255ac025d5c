// cuda.igemm_wgmma (sm_90a): implicit GEMM over channels-last 1D, 2D or 3D tensors, on the
// warpgroup MMA fed by the tensor memory accelerator, fp32 accumulators.
//
// Forward and backward-data (igemm_wgmma): per group g, GEMM rows are the destination's pixels
// (M = images x depth x height x width), columns its channels of the group, and the reduction
// runs over taps x source channels of the group in blocks of 64 channels of one tap (a dense
// layer's last block of a tap may run past its channels: both maps read zeros there); both
// tiles K-major, except the filter's where backward-data reads it from w in place (FILTER_MN).
// Forward reads x with the filter; backward-data is the same product over dy with the filter
// flipped and transposed (16-bit types: w's taps mapped by TapMap; tf32: the copy flip_filter
// below writes), once per sub-pixel phase of a strided convolution (the destination pixels
// one residue class of taps reaches, written with the stride: the host passes the offset of
// the phase's first pixel in dx and its strides multiplied by the convolution's), up to
// MAX_PRODUCTS phases in one launch. A product without taps (a phase no tap reaches) stores
// zeros.
//
// Backward-weight (igemm_wgmma_weight): per group and tap, rows are output channels, columns
// input channels, and the reduction runs over (a slice of) the pixels; both tiles MN-major
// (16-bit types), or transposed to K-major in shared memory (tf32).
//
// One producer warpgroup (one elected thread) issues, per reduction block, the TMA loads of
// both tiles (im2col for the activation: the tap as the im2col offset, the padding zero-filled
// by the TMA unit; tiled for the filter or dy), 128-byte swizzled, onto the stage's full
// barrier. CONSUMERS warpgroups each multiply MR 64-row slices of the tile with wgmma m64nBN
// (4 per block and slice: 64 16-bit or 32 tf32 reduction elements), keep one block's MMAs in
// flight and release the stage before it on its empty barrier. The epilogue rounds the fp32
// accumulators; forward and backward-data stage them in shared memory and store whole rows.
//
// Work goes out in units: CLUSTER row tiles (of the destination pixels, or of backward-weight's
// output channels) that share the other operand's tile, one per CTA of a cluster, each CTA's
// producer loading its share of that tile and multicasting it to every CTA of the cluster. A
// grid of a unit per cluster takes each once; a PERSISTENT grid (a cluster per SM or pair of
// SMs) walks them, its pipeline running on from one unit into the next while the consumers
// store the last, through a staging area of their own.
//
// Compile-time: WEIGHT (1: the backward-weight kernel; 0: the other directions' kernels, so a
// build compiles only what it runs), SPATIAL (1, 2, 3: the im2col map's rank less two), BN (64,
// 128, 256), CONSUMERS (1, 2), MR (1; 2 in forward and backward-data), STAGES, CLUSTER (1, 2),
// PERSISTENT (0, 1), SPLIT (the output mode; over 0 compiles the epilogue of fp32 partial sums,
// for configs that split through the workspace, and only it), KSPLIT (1; 2 or 4 slices of the
// reduction summed in the cluster), TAPS (backward-weight: the filter taps a unit sums at once,
// sharing each block of dy), SRC_TILED (1: the source, x or backward-data's dy, read as a
// matrix of pixels x channels by tiled loads, where the filter is 1x1 at stride 1 without
// padding, so that a destination pixel's window is the source pixel of its index: the im2col
// unit's per-pixel work cost small layers up to 1.2 us), HALO (1: the source staged as a
// rectangle with its halo, see below) and the data type (bf16, fp16, or fp32 multiplied as tf32:
// GCONV_TF32), MAX_PRODUCTS and PRODUCTS.
// Run-time: the problem (for igemm_wgmma per product as a forward convolution of src into dst:
// for backward-data dy's extents as the input's, the phase's dx pixels as the output, the
// groups' channel counts swapped and the phase's taps, padding and dilation) and the tensor
// maps, made on the host.

// Tiles are rows of 128 bytes: BK reduction elements of a K-major row (64 16-bit values, 32
// fp32 for tf32), or 64 M or N elements of an MN-major row (16-bit only). One MMA takes
// MMA_K reduction elements, 32 bytes of a K-major row.
#define ROW_BYTES 128
#define BK (ROW_BYTES / (int)sizeof(elem_t))
#define MMA_K (32 / (int)sizeof(elem_t))
// Backward-weight's reduction block: a row of K, as many pixels as a row holds.
#define PIXEL_BLOCK BK
// Backward-weight in tf32 (see TRANSPOSE below): its tiles land MN-major and the producer
// warpgroup's other three warps turn them K-major in place before the consumers multiply them.
#if WEIGHT && defined(GCONV_TF32)
#define TRANSPOSE 1
#else
#define TRANSPOSE 0
#endif
// The producer warpgroup's warps besides the loads' one: they transpose (TRANSPOSE) or write
// the filter (FILL_FILTER).
#define HELPER_WARPS 3
// FILL_FILTER (16-bit forward of a layer whose groups run blocked four or more to a block of
// 64 channels, see group_packing, and its backward-data with HALO's stages held; its value: a
// group's channels): the helper warps write each stage's block-diagonal filter from w (see
// fill_block), the producer loading the source only. Packing the filter by a kernel before
// the products cost ResNeXt's layers 3.5-4.4 us under Nsight Compute on the H100, TMA boxes of
// one group's rows (FilterBlocks) more than that from four groups a block on.
#ifndef FILL_FILTER
#define FILL_FILTER 0
#endif
// FILTER_GROUPS (1: a blocked layer's forward or backward-data whose producer reads the
// block-diagonal filter from w in boxes of a group's rows, see FilterBlocks).
#ifndef FILTER_GROUPS
#define FILTER_GROUPS 0
#endif
#if FILTER_GROUPS && (FILL_FILTER || WEIGHT)
#error "FILTER_GROUPS: the producer's filter boxes, where no helper warps write the filter"
#endif
#if FILL_FILTER && (WEIGHT || defined(GCONV_TF32))
#error "FILL_FILTER takes 16-bit forward and backward-data"
#endif
// HALO (forward, and backward-data at unit stride: one product; 2D, 16-bit types, persistent,
// one CTA a cluster, unsplit): a unit is a block of whole destination rows of one image, its
// rows laid out on the source's padded width (the pitch), so that every tap's A tile is the
// same rows of one staged source rectangle shifted by the tap's offset. The producer loads the
// rectangle with its halo once per chunk of channels (a tiled box of rows x pitch pixels x a
// 128-byte row of channels, TMA's zeros in the padding) into one of two halo buffers, and the
// stages carry the filter only: im2col reads each source pixel once per tap from L2 (ResNeXt's
// c128 g32 56x56 forward: 289 MB into the SMs for 26 MB of x; 106 MB with HALO, in about the
// same time, until the filter's stages were held across a CTA's units (HeldFilter) and the MMAs
// skipped the blocked filter's zeros (DIAGONAL): 0.84x).
#ifndef HALO
#define HALO 0
#endif
#if FILL_FILTER && FILTER_MN && (!HALO || BN != 64)
#error "backward-data's filter is written with HALO, on 64-column tiles"
#endif
#if HALO && (WEIGHT || SPATIAL != 2 || !PERSISTENT || CLUSTER != 1 || KSPLIT != 1 || SPLIT || SRC_TILED || PRODUCTS != 1 || defined(GCONV_TF32))
#error "HALO takes 16-bit 2D forward or unit-stride backward-data, persistent, one CTA a cluster, unsplit"
#endif
// Each consumer warpgroup multiplies MR slices of 64 rows (forward and backward-data: 2 makes
// 256 x BN tiles of two consumers, halving the filter's loads per MMA where BN is at most 128).
#define BM (64 * CONSUMERS * MR)
#if MR != 1 && (MR != 2 || WEIGHT)
#error "MR must be 1, or 2 in the forward and backward-data kernels"
#endif
// The B tiles of a stage: backward-weight's x at each of the unit's TAPS taps, one otherwise.
#if WEIGHT
#define B_TILES TAPS
#else
#define B_TILES 1
#endif
// A consumer thread's accumulators: BN / 2 per 64-row slice and B tile.
#define ACCUMULATORS (MR * B_TILES * BN / 2)
#define THREADS (128 * (CONSUMERS + 1))
#if CLUSTER != 1 && CLUSTER != 2
#error "CLUSTER must be 1 or 2"
#endif
// KSPLIT slices of the reduction in one cluster, CLUSTER CTAs each (a slice's CTAs share
// loads), summing their tiles through shared memory (see the cluster's sums below); 1: none.
#if KSPLIT != 1 && (KSPLIT != 2 && KSPLIT != 4 || PERSISTENT)
#error "KSPLIT must be 1, or 2 or 4 without PERSISTENT"
#endif
#define CLUSTER_CTAS (CLUSTER * KSPLIT)
#if CLUSTER_CTAS > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER_CTAS, 1, 1)
#else
#define CLUSTER_DIMS
#endif

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

struct Pipeline {
    unsigned base, bars;
    // HALO: the two halo buffers, from `halo` on, `halo_bytes` each.
    unsigned halo, halo_bytes;
    __device__ unsigned halo_buffer(int h) const { return halo + h * halo_bytes; }
    __device__ unsigned halo_full(int h) const { return bars + 8 * (BARRIERS * STAGES + h); }
    __device__ unsigned halo_empty(int h) const { return bars + 8 * (BARRIERS * STAGES + 2 + h); }
    __device__ unsigned stage(int s) const { return base + s * STAGE_BYTES; }
    __device__ unsigned full(int s) const { return bars + 8 * s; }
    __device__ unsigned empty(int s) const { return bars + 8 * (STAGES + s); }
    __device__ unsigned transposed(int s) const { return bars + 8 * (2 * STAGES + s); }
    // What the consumers wait for: the loads, or their transposition.
    __device__ unsigned ready(int s) const { return TRANSPOSE ? transposed(s) : full(s); }
    // 1024-byte aligned: a TMA store reads it with the 128-byte swizzle.
    __device__ unsigned staging() const { return (bars + 8 * (BARRIERS * STAGES + HALO_BARRIERS) + 1023) & ~1023u; }
};

__device__ __forceinline__ Pipeline pipeline_init(unsigned char* raw, unsigned halo_bytes = 0) {
    Pipeline pl;
    pl.base = (smem_addr(raw) + 1023) & ~1023u;
    pl.bars = pl.base + STAGES * STAGE_BYTES;
    // HALO: the halo buffers past the staging, whose place stays a constant.
    pl.halo = pl.staging() + BM * BN * sizeof(elem_t);
    pl.halo_bytes = halo_bytes;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(pl.full(s), 1 + FILLERS);
            mbar_init(pl.empty(s), CONSUMERS * CLUSTER);
            if (TRANSPOSE) mbar_init(pl.transposed(s), HELPER_WARPS * 32);
        }
        for (int h = 0; HALO && h < 2; ++h) {
            mbar_init(pl.halo_full(h), 1);
            mbar_init(pl.halo_empty(h), CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    cluster_sync();
    return pl;
}

// The producer's turn at reduction block `it` (counted over all its units): wait until the
// cluster's consumers have released its stage's previous block, announce the bytes the stage
// will receive, and return the stage.
__device__ __forceinline__ unsigned produce(const Pipeline& pl, int it) {
    const int s = it % STAGES;
    if (it >= STAGES) mbar_wait(pl.empty(s), (it / STAGES - 1) & 1);
    mbar_expect_tx(pl.full(s), LOADED_BYTES);
    return s;
}

// A turn at block `it` whose stage still holds the tile it needs (HALO with a stage per block
// of a unit: the unit before had the same filter tiles): wait until the consumers release it,
// then arrive on its full barrier as a load would, with nothing to load.
__device__ __forceinline__ void hold_stage(const Pipeline& pl, int it) {
    const int s = it % STAGES;
    mbar_wait(pl.empty(s), (it / STAGES - 1) & 1);
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(pl.full(s)) : "memory");
}

__device__ __forceinline__ void zero(float* d) {
#pragma unroll
    for (int i = 0; i < ACCUMULATORS; ++i) d[i] = 0.0f;
}

// Step kk (16 elements along K) of a 64-row slice's A against the B tile at b: the whole tile,
// or (DIAGONAL) the columns the step's channels reach. `first`: the unit's first block, whose
// first MMA on each column overwrites the accumulators.
template <bool A_MN, bool B_MN>
__device__ __forceinline__ void mma_step(float* d, unsigned long long a_desc, unsigned b, int kk, bool first) {
#if DIAGONAL
    const int n0 = kk * MMA_K / DIAG_N * DIAG_N;
    const unsigned long long b_desc = B_MN ? smem_desc_mn(b + kk * 16 * ROW_BYTES + n0 * sizeof(elem_t)) : smem_desc_k(b + n0 * ROW_BYTES + kk * 32);
    wgmma_diagonal<B_MN>(d + n0 / 2, a_desc, b_desc, !first || kk * MMA_K % DIAG_N != 0);
#else
    const unsigned long long b_desc = B_MN ? smem_desc_mn(b + kk * 16 * ROW_BYTES) : smem_desc_k(b + kk * 32);
    wgmma<A_MN, B_MN>(d, a_desc, b_desc, !first || kk > 0);
#endif
}

// A consumer warpgroup's main loop over one unit's `blocks` reduction blocks, the pipeline's
// blocks `first` on, into d (zeros when there are none): each of its MR 64-row slices of the
// A tile against each whole B tile (into d's tile of BN / 2 accumulators for the pair), four
// MMAs per block, slice and B tile (MN-major: 16 rows of K each), one block kept in flight,
// the stage before it released, and the last one's when all are done.
template <bool A_MN, bool B_MN>
__device__ __forceinline__ void consume(const Pipeline& pl, int first, int blocks, int slice, float* d) {
    if (blocks == 0) {
        zero(d);
        return;
    }
    const bool releases = threadIdx.x % 128 == 0;
    for (int i = 0; i < blocks; ++i) {
        const int it = first + i, s = it % STAGES;
        mbar_wait(pl.ready(s), (it / STAGES) & 1);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int t = 0; t < B_TILES; ++t) {
            const unsigned b = pl.stage(s) + A_BYTES + t * B_BYTES;
#pragma unroll
            for (int kk = 0; kk < BK / MMA_K; ++kk) {
#pragma unroll
                for (int mr = 0; mr < MR; ++mr) {
                    const unsigned a = pl.stage(s) + (slice * MR + mr) * TILE64_BYTES;
                    const unsigned long long a_desc = A_MN ? smem_desc_mn(a + kk * 16 * ROW_BYTES) : smem_desc_k(a + kk * 32);
                    mma_step<A_MN, B_MN>(d + (t * MR + mr) * (BN / 2), a_desc, b, kk, i == 0);
                }
            }
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        // This block's MMAs stay in flight; the previous block's are done, so its stage is free.
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (i > 0 && releases) mbar_arrive_cluster(pl.empty((it - 1) % STAGES));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (releases) mbar_arrive_cluster(pl.empty((first + blocks - 1) % STAGES));
}

#if HALO
// HALO's geometry for a product p (the host sizes the halo buffers by the same rules): the
// pitch (the source's padded width: the destination's width plus the filter's reach), the
// destination rows a unit takes (as many whole rows as BM holds), the source rows it loads,
// and units per image.
struct HaloTile {
    int pitch, rows, loaded, per_image;
};

__device__ __forceinline__ HaloTile halo_tile(const ConvParams& p) {
    HaloTile h;
    h.pitch = p.out[2] + (p.fil[2] - 1) * p.dil[2];
    h.rows = min(BM / h.pitch, p.out[1]);
    h.loaded = h.rows + (p.fil[1] - 1) * p.dil[1];
    h.per_image = (p.out[1] + h.rows - 1) / h.rows;
    return h;
}

// The image and first destination row of the unit whose tile starts at row m0.
struct HaloUnit {
    int image, first_row;
};

__device__ __forceinline__ HaloUnit halo_unit(const HaloTile& ht, int m0) {
    const int row_tile = m0 / BM, image = row_tile / ht.per_image;
    return {image, (row_tile - image * ht.per_image) * ht.rows};
}

// consume for HALO: per chunk of channels, the halo buffer's rectangle against each tap's filter
// tile (a stage each), the A tile the rectangle's rows from the tap's offset on; the last
// stage and the halo buffer released when the chunk's MMAs are done. `hit` counts halo loads.
__device__ __forceinline__ void consume_halo(const Pipeline& pl, int& it, int& hit, int chunks, const ConvParams& p, const HaloTile& ht, int slice, float* d) {
    const bool releases = threadIdx.x % 128 == 0;
    const int taps = p.fil[1] * p.fil[2];
    for (int chunk = 0; chunk < chunks; ++chunk, ++hit) {
        const int h = hit % 2;
        mbar_wait(pl.halo_full(h), (hit / 2) & 1);
        for (int tap = 0; tap < taps; ++tap, ++it) {
            const int s = it % STAGES, fh = tap / p.fil[2], fw = tap - fh * p.fil[2];
            const int shift = fh * p.dil[1] * ht.pitch + fw * p.dil[2];
            mbar_wait(pl.full(s), (it / STAGES) & 1);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            const unsigned b = pl.stage(s);
#pragma unroll
            for (int kk = 0; kk < BK / MMA_K; ++kk) {
#pragma unroll
                for (int mr = 0; mr < MR; ++mr) {
                    // Every slice multiplies, rows past the unit's too: a branch among the
                    // MMAs made ptxas serialize them (1.5x the time on the H100).
                    const int row = (slice * MR + mr) * 64;
                    // From any row: the swizzle follows the address's bits, as the TMA wrote it
                    // (as for the 32-byte steps along K).
                    const unsigned long long a_desc = smem_desc_k(pl.halo_buffer(h) + (row + shift) * ROW_BYTES + kk * 32);
                    mma_step<false, FILTER_MN>(d + mr * (BN / 2), a_desc, b, kk, chunk == 0 && tap == 0);
                }
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            if (tap > 0 && releases) mbar_arrive_cluster(pl.empty((it - 1) % STAGES));
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (releases) {
            mbar_arrive_cluster(pl.empty((it - 1) % STAGES));
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(pl.halo_empty(h)) : "memory");
        }
    }
}
#endif

// The first of the two rows a thread holds in for_each_pair (the other is 8 on).
__device__ __forceinline__ int pair_first_row() { return threadIdx.x % 128 / 32 * 16 + threadIdx.x % 32 / 4; }

// store(row, column, v0, v1) for each pair of adjacent columns of the accumulators a thread
// holds, rows and columns within its warpgroup's 64 x BN. The layout of m64nN: warp w holds
// rows 16w + lane/4 and + 8; register 4j + {0, 1} columns 8j + 2 (lane % 4) + {0, 1} of the
// first row, + {2, 3} of the second.
template <class Store>
__device__ __forceinline__ void for_each_pair(const float* d, Store&& store) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) store(pair_first_row() + half_row * 8, j * 8 + (lane % 4) * 2, d[4 * j + 2 * half_row], d[4 * j + 2 * half_row + 1]);
    }
}

// Division by a divisor fixed for a kernel's run, as a multiply-high, an add and a shift
// (Granlund and Montgomery's method; exact for dividends below 2^31, as the kernels' indices
// are): a 32-bit division by a run-time value is some 20 dependent instructions.
struct FastDiv {
    int d;
    unsigned m, s;
};

__device__ __forceinline__ FastDiv fast_div(int d) {
    FastDiv f;
    f.d = d;
    f.s = 32 - __clz(d - 1);  // ceil(log2 d)
    // m = floor(2^32 (2^s - d) / d) + 1, by d's float reciprocal: one product, one more on its
    // remainder, then a step of one at most. No division: a 64-bit integer one is a subroutine
    // of some 300 cycles (five before a consumer's first MMA slowed 4-5 us 1x1 layers up to
    // 1.25x on the H100), and a double's reciprocal brings a slow path that ptxas compiles in
    // every build.
    const long long a = (long long)((1ull << f.s) - d) << 32;
    const float inv = 1.0f / d;
    long long q = (long long)((float)a * inv);
    q += (long long)((float)(a - q * d) * inv);
    const long long e = a - q * d;
    q += e < 0 ? -1 : e >= d ? 1 : 0;
    f.m = (unsigned)(q + 1);
    return f;
}

__device__ __forceinline__ int quotient(int n, const FastDiv& f) { return (__umulhi((unsigned)n, f.m) + (unsigned)n) >> f.s; }

// A destination pixel: its image n and position (d, h, w) in p.out.
struct PixelCursor {
    int n, o[3];
};

// The divisors that take a pixel index apart: an image's pixels, a plane's, a row's.
struct PixelDivs {
    FastDiv image, plane, row;
};

__device__ __forceinline__ PixelDivs pixel_divs(const ConvParams& p) {
    return {fast_div(p.out[0] * p.out[1] * p.out[2]), fast_div(p.out[1] * p.out[2]), fast_div(p.out[2])};
}

// Pixel `index` of all images' pixels.
__device__ __forceinline__ PixelCursor pixel_cursor(const PixelDivs& divs, int index) {
    PixelCursor c;
    c.n = quotient(index, divs.image);
    const int pixel = index - c.n * divs.image.d;
    c.o[0] = quotient(pixel, divs.plane);
    const int in_plane = pixel - c.o[0] * divs.plane.d;
    c.o[1] = quotient(in_plane, divs.row);
    c.o[2] = in_plane - c.o[1] * divs.row.d;
    return c;
}

// Moves c on by `step` pixels, given as pixel_cursor(divs, step): each part of the step
// is below its extent, so one carry per dimension, and no divisions. (A producer's divisions
// per block were most of its work: three 32-bit divisions, some 80 of a block's 127
// instructions in one thread, in the H100 SASS of backward-weight and forward.)
__device__ __forceinline__ void advance(PixelCursor& c, const PixelCursor& step, const ConvParams& p) {
    c.n += step.n;
#pragma unroll
    for (int i = 0; i < 3; ++i) c.o[i] += step.o[i];
    if (c.o[2] >= p.out[2]) {
        c.o[2] -= p.out[2];
        ++c.o[1];
    }
    if (c.o[1] >= p.out[1]) {
        c.o[1] -= p.out[1];
        ++c.o[0];
    }
    if (c.o[0] >= p.out[0]) {
        c.o[0] -= p.out[0];
        ++c.n;
    }
}

// Where the im2col window of the destination pixel at position o starts in the source: the
// position times the stride, less the pad.
__device__ __forceinline__ void window_at(const ConvParams& p, const int* o, int* pos) {
#pragma unroll
    for (int i = 0; i < 3; ++i) pos[i] = o[i] * p.stride[i] - p.pad[i];
}

__device__ __forceinline__ void tap_position(const ConvParams& p, int tap, int* f) {
    f[0] = tap / (p.fil[1] * p.fil[2]);
    f[1] = tap / p.fil[2] % p.fil[1];
    f[2] = tap % p.fil[2];
}

// The tap after f, the last dimension fastest (as tap_position numbers them).
__device__ __forceinline__ void next_tap(const ConvParams& p, int* f) {
    if (++f[2] < p.fil[2]) return;
    f[2] = 0;
    if (++f[1] < p.fil[1]) return;
    f[1] = 0;
    ++f[0];
}

// The im2col offsets of a tap: its position times the dilation.
__device__ __forceinline__ void tap_offsets(const ConvParams& p, const int* f, unsigned short* off) {
#pragma unroll
    for (int i = 0; i < 3; ++i) off[i] = (unsigned short)(f[i] * p.dil[i]);
}

// Registers per thread of each warpgroup: a block starts with ptxas's count for every thread
// (168 at 384 threads), and the consumers can take only what the producer gives up (a
// setmaxnreg.inc beyond that waits forever): 2 x (208 - 168) <= 168 - 80 where the producer's
// warpgroup transposes (ptxas spilled its transposition at 72) and two consumers multiply.
// FILL_FILTER's helpers take as many as the consumers leave (ptxas spilled 4-28 bytes of them
// at 64).
#if TRANSPOSE
#define PRODUCER_REGISTERS 80
#elif FILL_FILTER && CONSUMERS == 2
#define PRODUCER_REGISTERS 72
#elif FILL_FILTER
#define PRODUCER_REGISTERS 80
#else
#define PRODUCER_REGISTERS 40
#endif
#if TRANSPOSE && CONSUMERS == 2
#define CONSUMER_REGISTERS 208
#elif FILL_FILTER && CONSUMERS == 2
#define CONSUMER_REGISTERS 216
#else
#define CONSUMER_REGISTERS 232
#endif

// The producer warpgroup gives up registers to the consumers; one elected thread stays on (true
// for it), and (TRANSPOSE) warps 1 to 3 transpose.
__device__ __forceinline__ bool producer_start() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 " STR(PRODUCER_REGISTERS) ";");
    return threadIdx.x == 0;
}

__device__ __forceinline__ void prefetch_map(const TensorMap* map) { asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory"); }

// A consumer warpgroup takes the registers the producer gave up and zeroes its accumulators.
__device__ __forceinline__ void consumer_start(float* d) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 " STR(CONSUMER_REGISTERS) ";");
    zero(d);
}

// Barriers among the consumer warpgroups (id 1) and within one of them (2 + its slice); the
// producer warpgroup takes no part.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"r"(CONSUMERS * 128) : "memory"); }
__device__ __forceinline__ void warpgroup_sync(int slice) { asm volatile("bar.sync %0, 128;" ::"r"(2 + slice) : "memory"); }

// The forward epilogue's staging of a consumer's 64 MR x BN results, laid out as a TMA store of
// them reads it: panels of PANEL_COLUMNS columns, a 128-byte row each, 64 MR rows a panel,
// swizzled in 128 bytes as the loads' tiles are (so a warp's fragment writes, 8 rows at a time,
// and its 16-byte reads spread over the banks). Without PERSISTENT in the stages' memory (free
// once the last unit's loads have landed), with it in an area of its own (the producer is
// loading the next unit into the stages meanwhile).
constexpr int PANEL_COLUMNS = ROW_BYTES / sizeof(elem_t);
constexpr unsigned PANEL_BYTES = 64 * MR * ROW_BYTES, STAGED_BYTES = BM * BN * sizeof(elem_t);
static_assert(PERSISTENT || STAGED_BYTES <= STAGES * STAGE_BYTES, "the staged results must fit in the stages");

// The byte of element (row, column) in a consumer's staged results.
__device__ __forceinline__ unsigned staged_at(int row, int column) {
    const unsigned byte = column % PANEL_COLUMNS * sizeof(elem_t);
    return column / PANEL_COLUMNS * PANEL_BYTES + row * ROW_BYTES + ((byte / 16 ^ row % 8) * 16) + byte % 16;
}

// The units a cluster takes: the one its place in the grid names, and (PERSISTENT) every one a
// grid's worth of clusters on from there. Without PERSISTENT the grid has a cluster per unit.
#if PERSISTENT && HALO
// HALO: a run of consecutive units a CTA (u_end past its last), so that a unit's filter tiles
// are mostly its predecessor's (see hold_stage).
__device__ __forceinline__ int run_start(int units, int cta) { return (int)((long long)units * cta / gridDim.x); }
#define FOR_EACH_UNIT(u, units) for (int u = run_start(units, blockIdx.x), u##_end = run_start(units, blockIdx.x + 1); u < u##_end; ++u)
#elif PERSISTENT
#define FOR_EACH_UNIT(u, units) for (int u = blockIdx.x / CLUSTER_CTAS; u < (units); u += gridDim.x / CLUSTER_CTAS)
#else
#define FOR_EACH_UNIT(u, units) if (const int u = blockIdx.x / CLUSTER_CTAS; u < (units))
#endif

// The cluster's sums (KSPLIT over 1): the slices' CTAs of a row tile each hold the tile's
// partial sums over their share of the reduction, and slice s stores the tile's rows from
// s x OWNED_ROWS on. A fragment (a warp's 16 rows of a 64-row slice: per thread BN / 2
// accumulators per B tile) that another slice stores goes into the CTA's own shared memory
// after its last unit (every load landed and read), past forward's staged results, as float4s
// with a warp's 32 lanes contiguous; after a barrier of the cluster, each CTA adds the other
// slices' fragments of its rows, read from theirs. One launch, no workspace, no atomics.
constexpr int OWNED_ROWS = BM / KSPLIT, OWNED_FRAGMENTS = OWNED_ROWS / 16;
constexpr unsigned FRAGMENT_BYTES = 32 * 16 * (B_TILES * BN / 8);
#if WEIGHT
constexpr unsigned SUMS_START = 0;
#else
constexpr unsigned SUMS_START = STAGED_BYTES;
#endif
#if KSPLIT > 1
static_assert(OWNED_ROWS % 16 == 0, "a slice stores whole fragments");
static_assert(SUMS_START + (BM / 16 - OWNED_FRAGMENTS) * FRAGMENT_BYTES <= STAGES * STAGE_BYTES, "the kept fragments must fit in the stages");
#endif

// The fragment of warp `warp` of consumer warpgroup `consumer` in its 64-row slice `mr`: f, the
// tile's rows from 16 f on.
__device__ __forceinline__ int fragment_index(int consumer, int mr, int warp) { return (consumer * MR + mr) * 4 + warp; }

// Whether this CTA stores fragment f.
__device__ __forceinline__ bool stores_fragment(int f) { return KSPLIT == 1 || f / OWNED_FRAGMENTS == cluster_slice(); }

// Where slice s keeps fragment f (one another slice stores), among those it keeps.
__device__ __forceinline__ unsigned kept_at(int f, int s) { return SUMS_START + (f < s * OWNED_FRAGMENTS ? f : f - OWNED_FRAGMENTS) * FRAGMENT_BYTES; }

// A consumer warpgroup's first step, once every consumer is done with the stages (at shared
// address `stages`): keep the fragments other slices store.
__device__ __forceinline__ void keep_others_fragments(const float* d, int consumer, unsigned stages) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x % 128 / 32;
#pragma unroll
    for (int mr = 0; mr < MR; ++mr) {
        const int f = fragment_index(consumer, mr, warp);
        if (stores_fragment(f)) continue;
        const unsigned at = stages + kept_at(f, cluster_slice()) + lane * 16;
#pragma unroll
        for (int v = 0; v < B_TILES * BN / 8; ++v) {
            const float* x = d + (v / (BN / 8) * MR + mr) * (BN / 2) + v % (BN / 8) * 4;
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(at + v * 512), "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3]) : "memory");
        }
    }
}

// Its second, after the cluster's barrier: add the other slices' fragments of its rows.
__device__ __forceinline__ void add_others_fragments(float* d, int consumer, unsigned stages) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x % 128 / 32;
#pragma unroll
    for (int mr = 0; mr < MR; ++mr) {
        const int f = fragment_index(consumer, mr, warp);
        if (!stores_fragment(f)) continue;
#pragma unroll
        for (int other = 0; other < KSPLIT; ++other) {
            if (other == cluster_slice()) continue;
            unsigned at;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(at) : "r"(stages + kept_at(f, other) + lane * 16), "r"(other * CLUSTER + cluster_rank() % CLUSTER));
#pragma unroll
            for (int v = 0; v < B_TILES * BN / 8; ++v) {
                float* x = d + (v / (BN / 8) * MR + mr) * (BN / 2) + v % (BN / 8) * 4;
                float4 y;
                asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(y.x), "=f"(y.y), "=f"(y.z), "=f"(y.w) : "r"(at + v * 512) : "memory");
                x[0] += y.x;
                x[1] += y.y;
                x[2] += y.z;
                x[3] += y.w;
            }
        }
    }
}

// The cluster's sums, where it has KSPLIT slices: after this, d holds the whole reduction's
// sums in the fragments this CTA stores. The producer warpgroup joins the cluster's barrier
// with producer_joins_sums.
__device__ __forceinline__ void cluster_sums(float* d, int consumer, unsigned stages) {
#if KSPLIT > 1
    consumers_sync();
    keep_others_fragments(d, consumer, stages);
    cluster_sync();
    add_others_fragments(d, consumer, stages);
#endif
}

__device__ __forceinline__ void producer_joins_sums() {
#if KSPLIT > 1
    cluster_sync();
#endif
}

// A box of a 3D array from shared memory (x innermost), by a tiled map, in a bulk group of the
// thread's; bulk_wait_read: until the thread's groups have read their shared memory (their
// writes complete on their own).
__device__ __forceinline__ void store_tile(const TensorMap* map, unsigned src, int x, int y) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(map), "r"(x), "r"(y), "r"(0), "r"(src) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

__device__ __forceinline__ void store_pair(elem_t* at, float v0, float v1) {
    if constexpr (sizeof(elem_t) == 4) {
        *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
    } else {
        elem_t pair[2] = {from_f32(v0), from_f32(v1)};
        *reinterpret_cast<unsigned*>(at) = *reinterpret_cast<unsigned*>(pair);
    }
}

#if WEIGHT
// Backward-weight: per group, tap and slice of the pixels, dw[k][tap][c] sums dy[q][k] x[q's
// window moved by the tap][c] over the slice's pixels q: rows k by BM, columns c by BN, the
// reduction in blocks of PIXEL_BLOCK pixels. A unit: CLUSTER row tiles of one column tile,
// TAPS consecutive taps, slice and group (row tiles innermost, then columns, taps, slices,
// groups), sharing x's tiles, of which each CTA loads PIXEL_BLOCK / CLUSTER pixel rows. Both
// tiles land with a pixel per row, in panels of a row of channels x PIXEL_BLOCK pixels: dy's by
// tiled loads, once per block for all the unit's taps, x's by im2col loads at each tap's
// offsets. 16-bit types multiply them so (MN-major operands); tf32 wgmma takes K-major ones
// only, so the producer warpgroup's other three warps first turn each panel into a channel per
// row (TRANSPOSE).
// ConvParams as the forward convolution's. The output mode is SPLIT's: 0 stores into dw; 1
// adds into the fp32 workspace (zeroed before); 2 stores the slice's own fp32 copy of the
// weights into it; 3 is stream-K (below). With KSPLIT the slices are the cluster's CTAs, and
// SPLIT is 0.
// group_kg and group_cg: the layer's kg and cg; or, for a layer of blocked groups (see
// group_packing.rs), the user's groups', whose diagonal blocks of the blocked gradient are
// all it keeps (the other blocks sum across groups), stored straight into the user's filter
// (p.ws its strides, and the workspace as it lies).
struct WeightUnit {
    int index, k0, c0, tap0, slice, g;
};

#if TRANSPOSE
__device__ __forceinline__ float4 load_shared(unsigned at) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(at) : "memory");
    return v;
}

__device__ __forceinline__ void store_shared(unsigned at, float x, float y, float z, float w) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(at), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}

// Transposes a stage's panels in place: each 32 pixel rows x 32 channels becomes 32 channel
// rows x 32 pixels, 128-byte swizzled as loaded (a K-major tile's layout). Transposer warp w
// (0 to 2) takes whole panels w, w + 3, ..., reading one into registers before writing it
// back. A lane moves blocks of 4 pixels x 4 channels; the 8 lanes of a quarter-warp take a
// diagonal of the panel's 8 x 8 blocks (lane t: pixels from 4t, channels from 4 (t ^ 4 (t & 1)
// ^ d), d by quarter and block), so that the swizzle spreads both their 16-byte reads (chunk
// t ^ d ^ i of pixel row 4t + i) and their writes (chunk t ^ 4 ((t ^ d) & 1) ^ e of channel
// row 4 (..) + e) over all 32 banks.
constexpr int PANELS = STAGE_BYTES / PANEL_ROWS_BYTES;
static_assert(PIXEL_BLOCK == 32 && PANEL_ROWS_BYTES == 4096, "tf32 panels are 32 x 32");

__device__ __forceinline__ void transpose_stage(unsigned stage, int warp) {
    const int lane = threadIdx.x % 32, t = lane % 8;
    int chunk[2];
#pragma unroll
    for (int b = 0; b < 2; ++b) chunk[b] = t ^ (t & 1) * 4 ^ (lane / 8 * 2 + b);
    for (int panel = warp; panel < PANELS; panel += HELPER_WARPS) {
        const unsigned base = stage + panel * PANEL_ROWS_BYTES;
        float4 v[2][4];
#pragma unroll
        for (int b = 0; b < 2; ++b)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = 4 * t + i;
                v[b][i] = load_shared(base + row * ROW_BYTES + (chunk[b] ^ row % 8) * 16);
            }
        __syncwarp();
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const int row = 4 * chunk[b];
            store_shared(base + row * ROW_BYTES + (t ^ row % 8) * 16, v[b][0].x, v[b][1].x, v[b][2].x, v[b][3].x);
            store_shared(base + (row + 1) * ROW_BYTES + (t ^ (row + 1) % 8) * 16, v[b][0].y, v[b][1].y, v[b][2].y, v[b][3].y);
            store_shared(base + (row + 2) * ROW_BYTES + (t ^ (row + 2) % 8) * 16, v[b][0].z, v[b][1].z, v[b][2].z, v[b][3].z);
            store_shared(base + (row + 3) * ROW_BYTES + (t ^ (row + 3) % 8) * 16, v[b][0].w, v[b][1].w, v[b][2].w, v[b][3].w);
        }
    }
}

// A transposer warp's turn at block `it`: transposes its panels as they land and hands them to
// the consumers (its writes made visible to the MMAs, which read through the async proxy).
__device__ __forceinline__ void transpose_block(const Pipeline& pl, int it, int warp) {
    const int s = it % STAGES;
    mbar_wait(pl.full(s), (it / STAGES) & 1);
    transpose_stage(pl.stage(s), warp);
    asm volatile("fence.proxy.async.shared::cta;\nmbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(pl.transposed(s)) : "memory");
}
#endif

// Stream-K (SPLIT 3): with few tiles over a long reduction (1x1 layers of 7x7 pixels: 72 tiles
// of 25 blocks on 132 SMs), whole-tile units leave SMs idle and every split of the pixels costs
// a second wave or atomics. Instead each CTA of a grid of at most one per SM takes an even
// share of all units' blocks, in order: the tail of one unit, whole units, the head of
// another. A unit cut between CTAs is finished by the CTA that takes its head, its last
// segment: the CTAs after it that took the rest wrote their partial sums into the workspace at
// their start (a CTA's first segment is the only one that can lack a unit's head), so the
// finisher seldom waits. The workspace: a flag per CTA and consumer warpgroup (zeroed before
// the launch), then each one's partial sums, a thread's accumulators as float4s with a
// warpgroup's 128 threads contiguous. The grid never exceeds what the GPU holds at once and is
// launched cooperatively, so all its CTAs are resident together even beside other streams'
// kernels, and the waits cannot deadlock.
#if SPLIT == 3
#if CLUSTER_CTAS != 1 || PERSISTENT
#error "stream-K runs lone CTAs on a grid of its own"
#endif
constexpr int STREAM_FLAG_FLOATS = 64;  // the flags' area: a multiple of 256 bytes, per 64 flags
__device__ __forceinline__ int stream_flags(int ctas) { return (ctas * CONSUMERS + STREAM_FLAG_FLOATS - 1) / STREAM_FLAG_FLOATS * STREAM_FLAG_FLOATS; }

// CTA b's first block of all units' `total`: an even share, the first total % ctas one more.
__device__ __forceinline__ int stream_start(int total, int b) {
    const int ctas = gridDim.x, q = total / ctas;
    return b * q + min(b, total - q * ctas);
}

__device__ __forceinline__ unsigned* stream_flag(float* ws, int cta, int consumer) { return reinterpret_cast<unsigned*>(ws) + cta * CONSUMERS + consumer; }

__device__ __forceinline__ float4* stream_partial(float* ws, int cta, int consumer) {
    return reinterpret_cast<float4*>(ws + stream_flags(gridDim.x) + (cta * CONSUMERS + consumer) * 128 * ACCUMULATORS) + threadIdx.x % 128;
}

// A consumer warpgroup hands its partial sums to the unit's finisher.
__device__ __forceinline__ void stream_keep(const float* d, float* ws, int consumer) {
    float4* at = stream_partial(ws, blockIdx.x, consumer);
#pragma unroll
    for (int v = 0; v < ACCUMULATORS / 4; ++v) __stcg(at + v * 128, make_float4(d[4 * v], d[4 * v + 1], d[4 * v + 2], d[4 * v + 3]));
    warpgroup_sync(consumer);
    // Every thread's stores come before the flag: the barrier orders them before the fence.
    if (threadIdx.x % 128 == 0) asm volatile("fence.acq_rel.gpu;\nred.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(stream_flag(ws, blockIdx.x, consumer)) : "memory");
}

// The finisher adds the partial sums of CTAs [from, to).
__device__ __forceinline__ void stream_add(float* d, float* ws, int consumer, int from, int to) {
    for (int cta = from; cta < to; ++cta) {
        if (threadIdx.x % 128 == 0) {
            unsigned ready;
            do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(ready) : "l"(stream_flag(ws, cta, consumer)) : "memory");
            while (!ready);
        }
        warpgroup_sync(consumer);
        const float4* at = stream_partial(ws, cta, consumer);
#pragma unroll
        for (int v = 0; v < ACCUMULATORS / 4; ++v) {
            const float4 y = __ldcg(at + v * 128);
            d[4 * v] += y.x;
            d[4 * v + 1] += y.y;
            d[4 * v + 2] += y.z;
            d[4 * v + 3] += y.w;
        }
    }
}
#endif

// visit(t, first, end) for each of `units` units t (unit_at(u) names them) the CTA takes, with
// its blocks [first, end) of the `all_blocks` blocks of 64 pixels: stream-K's share, or each
// unit's slice of `slices` (from the slice's first block to the next slice's).
template <class UnitAt, class Visit>
__device__ __forceinline__ void for_each_segment(int units, int all_blocks, int slices, const UnitAt& unit_at, const Visit& visit) {
#if SPLIT == 3
    const FastDiv blocks_div = fast_div(all_blocks);
    const int start = stream_start(units * all_blocks, blockIdx.x), stop = stream_start(units * all_blocks, blockIdx.x + 1);
    int u = quotient(start, blocks_div), first = start - u * all_blocks;
    for (int at = start; at < stop; ++u, first = 0) {
        const int end = min(all_blocks, stop - u * all_blocks);
        visit(unit_at(u), first, end);
        at += end - first;
    }
#else
    FOR_EACH_UNIT(u, units) {
        const WeightUnit t = unit_at(u);
        visit(t, (int)((long long)all_blocks * t.slice / slices), (int)((long long)all_blocks * (t.slice + 1) / slices));
    }
#endif
}

extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(THREADS, 1)
    igemm_wgmma_weight(const __grid_constant__ TensorMap dy_map, const __grid_constant__ TensorMap x_map, ConvParams p, elem_t* dw, float* ws, int splits, int group_kg, int group_cg) {
    extern __shared__ unsigned char raw[];
    const Pipeline pl = pipeline_init(raw);
    const int rank = cluster_rank() % CLUSTER;
    // Slices within a cluster (KSPLIT) are the cluster's CTAs, not units of their own.
    const int unit_splits = KSPLIT > 1 ? 1 : splits, slices = KSPLIT > 1 ? KSPLIT : splits;
    const int row_groups = ((p.kg + BM - 1) / BM + CLUSTER - 1) / CLUSTER, column_tiles = (p.cg + BN - 1) / BN;
    const int taps = p.fil[0] * p.fil[1] * p.fil[2], tap_groups = taps / TAPS;
    const int units = row_groups * column_tiles * tap_groups * unit_splits * p.g;
    const int pixels = p.out[0] * p.out[1] * p.out[2];
    const int all_blocks = (p.n * pixels + PIXEL_BLOCK - 1) / PIXEL_BLOCK;
    auto unit_at = [&](int u) {
        WeightUnit t;
        t.index = u;
        t.k0 = (u % row_groups * CLUSTER + rank) * BM;
        u /= row_groups;
        t.c0 = u % column_tiles * BN;
        u /= column_tiles;
        t.tap0 = u % tap_groups * TAPS;
        u /= tap_groups;
        t.slice = KSPLIT > 1 ? cluster_slice() : u % unit_splits;
        t.g = u / unit_splits;
        return t;
    };
    constexpr int SHARE_PIXELS = PIXEL_BLOCK / CLUSTER;
    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        if (producer_start()) {
            prefetch_map(&dy_map);
            prefetch_map(&x_map);
            const PixelDivs divs = pixel_divs(p);
            const PixelCursor block_step = pixel_cursor(divs, PIXEL_BLOCK);
            int it = 0;
            for_each_segment(units, all_blocks, slices, unit_at, [&](const WeightUnit& t, int first, int end) {
                unsigned short off[TAPS][3];
#pragma unroll
                for (int j = 0; j < TAPS; ++j) {
                    int f[3];
                    tap_position(p, t.tap0 + j, f);
                    tap_offsets(p, f, off[j]);
                }
                // The first pixel of this CTA's share of each block, moved on a block at a time.
                PixelCursor share = pixel_cursor(divs, first * PIXEL_BLOCK + rank * SHARE_PIXELS);
                for (int block = first; block < end; ++block, ++it, advance(share, block_step, p)) {
                    const int s = produce(pl, it);
#pragma unroll
                    for (int j = 0; j < BM / BK; ++j) load_tile<false>(pl.stage(s) + j * PANEL_ROWS_BYTES, &dy_map, t.g * p.kg + t.k0 + BK * j, block * PIXEL_BLOCK, 0, pl.full(s));
#if SRC_TILED
#pragma unroll
                    for (int j = 0; j < BN / BK; ++j) {
                        const unsigned dst = pl.stage(s) + A_BYTES + j * PANEL_ROWS_BYTES + rank * SHARE_PIXELS * ROW_BYTES;
                        load_tile<true>(dst, &x_map, t.g * p.cg + t.c0 + BK * j, block * PIXEL_BLOCK + rank * SHARE_PIXELS, 0, pl.full(s));
                    }
#else
                    int pos[3];
                    window_at(p, share.o, pos);
#pragma unroll
                    for (int tap = 0; tap < TAPS; ++tap)
#pragma unroll
                        for (int j = 0; j < BN / BK; ++j) {
                            const unsigned dst = pl.stage(s) + A_BYTES + tap * B_BYTES + j * PANEL_ROWS_BYTES + rank * SHARE_PIXELS * ROW_BYTES;
                            load_im2col<true>(dst, &x_map, t.g * p.cg + t.c0 + BK * j, pos, share.n, off[tap], pl.full(s));
                        }
#endif
                }
            });
        }
#if TRANSPOSE
        else if (threadIdx.x >= 32) {
            int it = 0;
            for_each_segment(units, all_blocks, slices, unit_at, [&](const WeightUnit&, int first, int end) {
                for (int block = first; block < end; ++block) transpose_block(pl, it++, threadIdx.x / 32 - 1);
            });
        }
#endif
        producer_joins_sums();
    } else {
        float d[ACCUMULATORS];
        consumer_start(d);
        const int slice = wg - 1;
#if SPLIT == 2
        const long long weights = (long long)p.g * p.kg * group_cg * taps;
#endif
        const bool blocked = group_cg < p.cg;
        const FastDiv group_kg_div = fast_div(group_kg);
        int it = 0;
        for_each_segment(units, all_blocks, slices, unit_at, [&](const WeightUnit& t, int first, int end) {
            consume<!TRANSPOSE, !TRANSPOSE>(pl, it, end - first, slice, d);
            it += end - first;
#if SPLIT == 3
            if (first > 0) {
                stream_keep(d, ws, slice);
                zero(d);
                return;
            }
            if (end < all_blocks) {
                // The CTAs after this one that start inside the unit took the rest of it.
                const int unit_end = (t.index + 1) * all_blocks;
                int last = blockIdx.x + 1;
                while (last < (int)gridDim.x && stream_start(units * all_blocks, last) < unit_end) ++last;
                stream_add(d, ws, slice, blockIdx.x + 1, last);
            }
#endif
            cluster_sums(d, slice, pl.base);
            // The first column of the group of each of the thread's two rows (see group_kg; 0
            // where not blocked): a pair's column is kept below group_cg past it.
            const int row0 = t.k0 + slice * 64 + pair_first_row();
            const int first0 = blocked ? quotient(row0, group_kg_div) * group_cg : 0;
            const int first8 = blocked ? quotient(row0 + 8, group_kg_div) * group_cg : 0;
#pragma unroll
            for (int tap = 0; tap < TAPS; ++tap) {
                int f[3];
                tap_position(p, t.tap0 + tap, f);
                if (!stores_fragment(fragment_index(slice, 0, threadIdx.x % 128 / 32))) continue;
                for_each_pair(d + tap * (BN / 2), [&](int row, int column, float v0, float v1) {
                    // Pairs never straddle two groups: group_cg is even.
                    const int k = t.k0 + slice * 64 + row, c = t.c0 + column - (row == pair_first_row() ? first0 : first8);
                    if (k >= p.kg || (unsigned)c >= (unsigned)group_cg) return;
                    const int i = offset(p.ws, t.g * p.kg + k, c, f[0], f[1], f[2]);
#if SPLIT == 1
                    // One 8-byte atomic per pair: channels-last filters of even channel
                    // counts (a multiple of 8, or a blocked layer's groups of 4 or more) put
                    // every pair on an even element.
                    atomicAdd(reinterpret_cast<float2*>(ws + i), make_float2(v0, v1));
#elif SPLIT == 2
                    *reinterpret_cast<float2*>(ws + t.slice * weights + i) = make_float2(v0, v1);
#else
                    store_pair(dw + i, v0, v1);
#endif
                });
            }
            zero(d);  // as in the forward epilogue: the accumulators die here
        });
    }
    cluster_sync();
}

#else

// Forward and backward-data (see the top): per group, destination pixels by BM, its channels
// by BN; the reduction runs over taps x BK-channel chunks of the source, split into `splits`
// slices of its blocks. A unit: CLUSTER row tiles of one column tile, slice and group (columns
// innermost, so that clusters running together read the same pixels, then rows, slices,
// groups), sharing the filter's tile, of which each CTA loads its share (BN / CLUSTER rows,
// or with FILTER_MN 64 / CLUSTER of the block's 64 rows of k). mode 0 stores into dst; 1 adds
// into the fp32 workspace ws (zeroed before); 2 stores the slice's fp32 copy of the
// destination (slice_elements apart) into ws. ws lies as dst does. With KSPLIT the slices are
// the cluster's CTAs, and mode is 0.
//
// One launch runs forward's product, or up to MAX_PRODUCTS of backward-data's sub-pixel phases
// (their units one after another: a persistent grid fills the GPU with all of them, where a
// launch per phase left a partial wave each). Per product: its source and filter maps, its
// problem as a forward convolution, its taps' map into w, and where its destination's first
// pixel lies in dst (and in ws), in elements. The products share the channels and groups.
//
// FILTER_MN (backward-data in 16-bit types): the filter is read straight from w, its rows of
// c channels at tap and output channel k being B MN-major (rows along the reduction), in
// boxes of 64 c x 64 k; the product's tap t reads w's tap as TapMap says.
struct Unit {
    int product, m0, n0, slice, g;
};

#if HALO
// Whether a CTA's stages still hold a unit's filter tiles: where the unit has a block per stage
// and the CTA's unit before had the same group and column tile (stage s then always holds the
// same tap's tile), on layers of one chunk of channels a group as ResNeXt's blocked ones.
struct HeldFilter {
    int g = -1, n0 = -1;
    __device__ __forceinline__ bool next(const Unit& t, int blocks) {
        const bool same = blocks == STAGES && t.g == g && t.n0 == n0;
        g = t.g;
        n0 = t.n0;
        return same;
    }
};
#endif

// How the producer loads the filter's rows of a block: `rows` at a time (the box of its map).
// A layer whose groups run blocked (see group_packing) reads its block-diagonal filter from w
// itself: each box holds rows of one group, `group_rows` output channels of `channels` each,
// and starts `channels` elements before the last group's for each group it lies past, so
// that w's channels land in the group's columns and the box's other columns fall outside w's
// rows, where TMA reads zeros (FILTER_GROUPS: 1 in the builds that read so, whose loop and
// division per block cost the others' producer up to 1 us on 5 us layers on the H100).
// Unblocked: a box of the CTA's share of the rows. FILL_FILTER: the helper warps read w itself.
struct FilterBlocks {
    unsigned rows;
    int group_rows, channels;
    const elem_t* w;
};

// Which filter tap a product's tap reads: per dimension f = origin + step * t (see TapMap in
// params.rs), and the filter's own extents.
struct TapMap {
    int origin[3], step[3], fil[3];
};

// The filter tap (of w's) that a product's tap at position f reads.
__device__ __forceinline__ int filter_tap(const TapMap& taps, const int* f) {
    return ((taps.origin[0] + taps.step[0] * f[0]) * taps.fil[1] + taps.origin[1] + taps.step[1] * f[1]) * taps.fil[2] + taps.origin[2] + taps.step[2] * f[2];
}

#if FILTER_MN && defined(GCONV_TF32)
#error "tf32 wgmma takes K-major operands only"
#endif

// MAX_PRODUCTS: as params.rs has it.
struct Products {
    TensorMap src[MAX_PRODUCTS], filter[MAX_PRODUCTS];
    ConvParams p[MAX_PRODUCTS];
    TapMap taps[MAX_PRODUCTS];
    long long dst_offset[MAX_PRODUCTS];
    int count;
};

// PRODUCTS: 1 where the problem has one product (forward, backward-data at unit stride): the
// kernel takes its maps, problem and taps as parameters of their own, and the product's index
// folds away, and with them a map of the destination as a matrix (rows of channels) that its
// results may be stored by (dst_tiled); else MAX_PRODUCTS, from a Products struct.
#if PRODUCTS == 1
#define PRODUCT_PARAMETERS \
    const __grid_constant__ TensorMap src_map, const __grid_constant__ TensorMap filter_map, const __grid_constant__ TensorMap dst_map, ConvParams product, TapMap product_taps
#define PRODUCT_COUNT 1
#define PRODUCT(q) product
#define PRODUCT_TAPS(q) product_taps
#define PRODUCT_SRC(q) (&src_map)
#define PRODUCT_FILTER(q) (&filter_map)
#define PRODUCT_OFFSET(q) 0
#define DST_MAP (&dst_map)
#else
#define PRODUCT_PARAMETERS const __grid_constant__ Products products
#define PRODUCT_COUNT products.count
#define PRODUCT(q) products.p[q]
#define PRODUCT_TAPS(q) products.taps[q]
#define PRODUCT_SRC(q) (&products.src[q])
#define PRODUCT_FILTER(q) (&products.filter[q])
#define PRODUCT_OFFSET(q) products.dst_offset[q]
#define DST_MAP ((const TensorMap*)nullptr)
#endif

__device__ __forceinline__ int product_pixels(const ConvParams& p) { return p.out[0] * p.out[1] * p.out[2]; }

// A product's destination as the consumers' stores want it, worked out when a CTA's units move
// on to the product, not per unit (per unit, it cost 1x1 layers of short reductions up to 1.13x
// the time on the H100).
struct Destination {
    int rows;
    // Packed in pixel order (forward; backward-data at stride 1): row m lies at m times the
    // pixel stride, no divisions per row.
    bool packed;
    // Else each row's pixel is taken apart.
    PixelDivs divs;
};

__device__ __forceinline__ Destination destination(const ConvParams& p) {
    Destination out;
    const int pixels = product_pixels(p);
    out.rows = p.n * pixels;
    out.divs = pixel_divs(p);
    out.packed = (p.out[1] == 1 || p.ys[3] == p.out[2] * p.ys[4]) && (p.out[0] == 1 || p.ys[2] == p.out[1] * p.out[2] * p.ys[4]) && (p.n == 1 || p.ys[0] == pixels * p.ys[4]);
    return out;
}

#if FILL_FILTER
// FILL_FILTER: the producer warpgroup's warps 1 to 3 take the blocks in turn (all three on
// every block ran behind the MMAs: a block's loads, wait and writes take longer than its
// MMAs, so three go at once), each lane whole rows of the block's filter: a group's channels
// from w (FILL_ROW_BYTES, in FILL_PIECES pieces of 16 bytes, or one of 8 for groups of 4
// channels) in the row's group's columns, zeros in the others (the group, and so the columns,
// of a stage's row differ between blocks where a group's filter rows span more than a block).
#if FILL_FILTER == 4
typedef uint2 fill_t;
#else
typedef uint4 fill_t;
#endif
constexpr int FILL_ROW_BYTES = FILL_FILTER * (int)sizeof(elem_t), FILL_PIECES = FILL_ROW_BYTES < 16 ? 1 : FILL_ROW_BYTES / 16;
// A stage's filter rows: the column tile's output channels.
constexpr int FILL_ROWS_PER_LANE = BN / 32;
// The rows a lane loads before the stage is free, so that they land while the consumers still
// multiply it (more would spill the producer warpgroup's registers: wider tiles load the rest
// after).
constexpr int FILL_AHEAD = FILL_ROWS_PER_LANE < 2 ? FILL_ROWS_PER_LANE : 2;

__device__ __forceinline__ void store_chunk(unsigned at, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// The 16-byte chunk q of a filter row whose group's channels `v` start at byte `at` of it.
__device__ __forceinline__ uint4 row_chunk(const uint4* v, int at, int q) {
    uint4 chunk = make_uint4(0, 0, 0, 0);
    // Selected, not indexed: v stays in registers.
#pragma unroll
    for (int k = 0; k < FILL_PIECES; ++k)
        if (q == at / 16 + k) chunk = v[k];
    return chunk;
}
__device__ __forceinline__ uint4 row_chunk(const uint2* v, int at, int q) {
    if (q != at / 16) return make_uint4(0, 0, 0, 0);
    return at % 16 ? make_uint4(0, 0, v->x, v->y) : make_uint4(v->x, v->y, 0, 0);
}

// A helper lane's rows of block `it`'s filter: stage rows from `first` on of the packed
// group's `limit` rows (w's rows from group_row on; rows past `limit` zero), each row of w
// holding `taps` taps of a group's channels. The writes reach the MMAs through the async proxy.
// (Backward-data's filter rows, a block of its reduction, ran 0.99-1.04x the time of the packed
// filter this way on ResNeXt's layers on the H100, where forward ran 0.93-0.99x.)
__device__ __forceinline__ void fill_block(const Pipeline& pl, int it, int lane, const FilterBlocks& blocks, long long group_row, int first, int limit, int taps, int tap) {
    fill_t v[FILL_AHEAD][FILL_PIECES];
    auto load = [&](int from) {
#pragma unroll
        for (int i = 0; i < FILL_AHEAD; ++i) {
            const int local = first + lane + (from + i) * 32;
            if (local < limit) {
                const fill_t* run = (const fill_t*)(blocks.w + ((group_row + local) * taps + tap) * FILL_FILTER);
#pragma unroll
                for (int k = 0; k < FILL_PIECES; ++k) v[i][k] = __ldg(run + k);
            }
        }
    };
    const unsigned stage = pl.stage(it % STAGES) + A_BYTES;
    auto store = [&](int from) {
#pragma unroll
        for (int i = 0; i < FILL_AHEAD; ++i) {
            const int row = lane + (from + i) * 32, local = first + row;
            const int at = local < limit ? local / blocks.group_rows * FILL_ROW_BYTES : ROW_BYTES;
#pragma unroll
            for (int q = 0; q < ROW_BYTES / 16; ++q) store_chunk(stage + row * ROW_BYTES + (q ^ row % 8) * 16, row_chunk(v[i], at, q));
        }
    };
    load(0);
    if (it >= STAGES) mbar_wait(pl.empty(it % STAGES), (it / STAGES - 1) & 1);
    store(0);
#pragma unroll 1
    for (int from = FILL_AHEAD; from < FILL_ROWS_PER_LANE; from += FILL_AHEAD) {
        load(from);
        store(from);
    }
    asm volatile("fence.proxy.async.shared::cta;\nmbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(pl.full(it % STAGES)) : "memory");
}
#endif

extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(THREADS, 1)
    igemm_wgmma(PRODUCT_PARAMETERS, elem_t* dst, float* ws, int split_arg, int mode, int slice_elements, int dst_tiled, FilterBlocks blocks) {
    // Unsplit builds fold the slice arithmetic away: with one block per unit (1x1 layers of 64
    // channels) its divisions cost as much as the unit's MMAs.
    const int splits = SPLIT ? split_arg : 1;
    // Slices within a cluster (KSPLIT) are the cluster's CTAs, not units of their own.
    const int slices = KSPLIT > 1 ? KSPLIT : splits;
    extern __shared__ unsigned char raw[];
#if HALO
    const HaloTile ht = halo_tile(PRODUCT(0));
    // The rows the tile's MMAs read at the furthest tap (past the loaded ones, for rows past
    // the unit's).
    const unsigned halo_rows = BM + (PRODUCT(0).fil[1] - 1) * PRODUCT(0).dil[1] * ht.pitch + (PRODUCT(0).fil[2] - 1) * PRODUCT(0).dil[2];
    const Pipeline pl = pipeline_init(raw, (halo_rows * ROW_BYTES + 1023) & ~1023u);
#else
    const Pipeline pl = pipeline_init(raw);
#endif
    const int rank = cluster_rank() % CLUSTER;
    // A dense layer's last chunk may run past its channels: TMA reads zeros there.
    const int chunks = (PRODUCT(0).cg + BK - 1) / BK, column_tiles = (PRODUCT(0).kg + BN - 1) / BN;
    const int per_row_group = column_tiles * splits * PRODUCT(0).g;
#if HALO
    auto row_groups = [&](int q) { return PRODUCT(q).n * ht.per_image; };
#else
    auto row_groups = [&](int q) { return ((PRODUCT(q).n * product_pixels(PRODUCT(q)) + BM - 1) / BM + CLUSTER - 1) / CLUSTER; };
#endif
    int units = 0;
    for (int q = 0; q < PRODUCT_COUNT; ++q) units += row_groups(q) * per_row_group;
    const int first_rows = row_groups(0);
    // Units are taken apart per unit, on every warpgroup: by multiplies where the divisors are
    // the run's (one block per unit on 1x1 layers of 64 channels makes them per-block work).
    const FastDiv columns_div = fast_div(column_tiles), first_rows_div = fast_div(first_rows), splits_div = fast_div(splits);
    auto unit_at = [&](int u) {
        Unit t;
        t.product = 0;
        int rows = first_rows;
        while (t.product + 1 < PRODUCT_COUNT && u >= rows * per_row_group) {
            u -= rows * per_row_group;
            rows = row_groups(++t.product);
        }
        const int column_unit = quotient(u, columns_div);
        t.n0 = (u - column_unit * column_tiles) * BN;
        u = column_unit;
        // A later product's rows (backward-data's phases) divide as they are.
        const int row_unit = t.product == 0 ? quotient(u, first_rows_div) : u / rows;
        t.m0 = ((u - row_unit * rows) * CLUSTER + rank) * BM;
        u = row_unit;
        const int group = SPLIT ? quotient(u, splits_div) : u;
        t.slice = KSPLIT > 1 ? cluster_slice() : u - group * splits;
        t.g = group;
        return t;
    };
    // A slice's reduction blocks (of its product's) run from its first block to the next slice's.
    auto first_block = [&](const ConvParams& p, int slice) { return p.fil[0] * p.fil[1] * p.fil[2] * chunks * slice / slices; };
    // The producer's filter loads for unit t's block at tap (at position f) and channel c0, into
    // stage s (FILL_FILTER: none, the helper warps write the filter).
    auto load_filter = [&](const Unit& t, int tap, const int* f, int c0, int s) {
#if !FILL_FILTER
        const ConvParams& p = PRODUCT(t.product);
        const TensorMap* filter = PRODUCT_FILTER(t.product);
#if FILTER_MN
        const int w_tap = filter_tap(PRODUCT_TAPS(t.product), f);
        const unsigned share = rank * (64 / CLUSTER);
#if FILTER_GROUPS
        for (unsigned r = 0; r < 64 / CLUSTER; r += blocks.rows) {
            const int k = c0 + share + r, skip = k / blocks.group_rows * blocks.channels;
#else
        {
            constexpr int r = 0, skip = 0;
            const int k = c0 + share;
#endif
#pragma unroll
            for (int j = 0; j < BN / 64; ++j) {
                const unsigned at = pl.stage(s) + A_BYTES + j * TILE64_BYTES + (share + r) * ROW_BYTES;
                load_tile<true>(at, filter, t.n0 + 64 * j - skip, w_tap, t.g * p.cg + k, pl.full(s));
            }
        }
#else
        const unsigned share = rank * B_SHARE_ROWS;
#if FILTER_GROUPS
        for (unsigned r = 0; r < B_SHARE_ROWS; r += blocks.rows) {
            const int n = t.n0 + share + r;
            load_tile<true>(pl.stage(s) + A_BYTES + (share + r) * ROW_BYTES, filter, c0 - n / blocks.group_rows * blocks.channels, tap, t.g * p.kg + n, pl.full(s));
        }
#else
        load_tile<true>(pl.stage(s) + A_BYTES + share * ROW_BYTES, filter, c0, tap, t.g * p.kg + t.n0 + share, pl.full(s));
#endif
#endif
#endif
    };
    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        if (producer_start()) {
            for (int q = 0; q < PRODUCT_COUNT; ++q) {
                prefetch_map(PRODUCT_SRC(q));
                prefetch_map(PRODUCT_FILTER(q));
            }
#if HALO
            // Halo loads go out one ahead: the next one as soon as this one's first stages of
            // the filter are out (its buffer is free once the consumers finish the one before
            // this), so that it lands while the consumers multiply this one.
            auto load_halo = [&](int u, int chunk, int hit) {
                const Unit t = unit_at(u);
                const ConvParams& p = PRODUCT(0);
                const HaloUnit at = halo_unit(ht, t.m0);
                const int h = hit % 2;
                if (hit >= 2) mbar_wait(pl.halo_empty(h), (hit / 2 - 1) & 1);
                mbar_expect_tx(pl.halo_full(h), ht.loaded * ht.pitch * ROW_BYTES);
                load_box4(pl.halo_buffer(h), PRODUCT_SRC(0), t.g * p.cg + chunk * BK, -p.pad[2], at.first_row - p.pad[1], at.image, pl.halo_full(h));
            };
            int it = 0, hit = 0;
            const int taps = PRODUCT(0).fil[1] * PRODUCT(0).fil[2], ahead = min(taps, STAGES) - 1;
            HeldFilter held;
            FOR_EACH_UNIT(u, units) {
                const Unit t = unit_at(u);
                const bool holds = held.next(t, taps * chunks);
                for (int chunk = 0; chunk < chunks; ++chunk, ++hit) {
                    if (hit == 0) load_halo(u, chunk, hit);
                    int f[3] = {0, 0, 0};
                    for (int tap = 0; tap < taps; ++tap, ++it) {
                        if (holds) {
                            hold_stage(pl, it);
                        } else {
                            load_filter(t, tap, f, chunk * BK, produce(pl, it));
                        }
                        next_tap(PRODUCT(0), f);
                        if (tap != ahead) continue;
                        if (chunk + 1 < chunks) {
                            load_halo(u, chunk + 1, hit + 1);
                        } else if (u + 1 < u_end) {
                            load_halo(u + 1, 0, hit + 1);
                        }
                    }
                }
            }
#else
            const FastDiv chunks_div = fast_div(chunks);
            int it = 0, current = 0;
            PixelDivs divs = pixel_divs(PRODUCT(0));
            FOR_EACH_UNIT(u, units) {
                const Unit t = unit_at(u);
                if (t.product != current) {
                    current = t.product;
                    divs = pixel_divs(PRODUCT(current));
                }
                const ConvParams& p = PRODUCT(t.product);
                const TensorMap* src = PRODUCT_SRC(t.product);
                // The tile's first pixel, as the source position its first tap starts from.
                const PixelCursor first_pixel = pixel_cursor(divs, t.m0);
                int pos[3];
                window_at(p, first_pixel.o, pos);
                const int first = first_block(p, t.slice), end = first_block(p, t.slice + 1);
                // The block's tap (and its position f) and chunk of channels, moved on a block at
                // a time: no divisions per block (see advance).
                int tap = quotient(first, chunks_div), chunk = first - tap * chunks;
                int f[3];
                tap_position(p, tap, f);
                for (int block = first; block < end; ++block, ++it) {
                    const int s = produce(pl, it);
                    const int c0 = chunk * BK;
                    unsigned short off[3];
                    tap_offsets(p, f, off);
#if SRC_TILED
                    load_tile<false>(pl.stage(s), src, t.g * p.cg + c0, t.m0, 0, pl.full(s));
#else
                    load_im2col<false>(pl.stage(s), src, t.g * p.cg + c0, pos, first_pixel.n, off, pl.full(s));
#endif
                    load_filter(t, tap, f, c0, s);
                    if (++chunk == chunks) {
                        chunk = 0;
                        ++tap;
                        next_tap(p, f);
                    }
                }
            }
#endif
        }
#if FILL_FILTER
        else if (threadIdx.x >= 32) {
            // The blocks in the producer's order (see above).
            const int warp = threadIdx.x / 32 - 1, lane = threadIdx.x % 32;
            const ConvParams& p = PRODUCT(0);
            const int volume = p.fil[0] * p.fil[1] * p.fil[2];
            // Forward: the block's rows are the column tile's output channels, at `tap`.
            auto fill = [&](const Unit& t, int tap, int it) { fill_block(pl, it, lane, blocks, (long long)t.g * p.kg, t.n0, p.kg, volume, tap); };
            int it = 0;
#if HALO
            HeldFilter held;
#endif
            FOR_EACH_UNIT(u, units) {
                const Unit t = unit_at(u);
#if HALO
                const bool holds = held.next(t, p.fil[1] * p.fil[2] * chunks);
                for (int chunk = 0; chunk < chunks; ++chunk) {
                    int f[3] = {0, 0, 0};
                    for (int tap = 0; tap < p.fil[1] * p.fil[2]; ++tap, ++it, next_tap(p, f)) {
                        if (it % HELPER_WARPS != warp) continue;
                        if (holds) {
                            hold_stage(pl, it);
                        } else if (FILTER_MN) {
                            // Backward-data: the block's rows are its reduction's (w's output
                            // channels), at the tap of w the product's tap reads.
                            fill_block(pl, it, lane, blocks, (long long)t.g * p.cg, chunk * BK, p.cg, volume, filter_tap(PRODUCT_TAPS(0), f));
                        } else {
                            fill(t, tap, it);
                        }
                    }
                }
#else
                for (int block = first_block(p, t.slice); block < first_block(p, t.slice + 1); ++block, ++it)
                    if (it % HELPER_WARPS == warp) fill(t, block / chunks, it);
#endif
            }
        }
#endif
        producer_joins_sums();
    } else {
        float d[ACCUMULATORS];
        consumer_start(d);
        const int slice = wg - 1;
        constexpr int CHUNK = 16 / (int)sizeof(elem_t), CHUNKS = BN / CHUNK;
        // The results leave by TMA stores of the staged panels, each warp its own 16 rows (those
        // of its fragments: no barrier of the warpgroup), where the host made a map of the
        // destination and the CTA stores whole tiles.
        const bool tiled_store = PRODUCTS == 1 && KSPLIT == 1 && !HALO && dst_tiled;
        const unsigned staged_base = (PERSISTENT ? pl.staging() : pl.base) + slice * PANEL_BYTES * (BN / PANEL_COLUMNS);
        unsigned char* staged = raw + (staged_base - smem_addr(raw));
        int it = 0, current = 0;
#if HALO
        int hit = 0;
        const FastDiv pitch_div = fast_div(ht.pitch);
#endif
        Destination out = destination(PRODUCT(0));
        FOR_EACH_UNIT(u, units) {
            const Unit t = unit_at(u);
            if (t.product != current) {
                current = t.product;
                out = destination(PRODUCT(current));
            }
            const ConvParams& p = PRODUCT(t.product);
#if !HALO
            const int m_total = out.rows;
#endif
            auto dst_index = [&](int m, int channel) {
                const auto at = PRODUCT_OFFSET(t.product);
                if (out.packed) return at + m * p.ys[4] + channel * p.ys[1];
                const PixelCursor c = pixel_cursor(out.divs, m);
                return at + offset(p.ys, c.n, channel, c.o[0], c.o[1], c.o[2]);
            };
#if HALO
            consume_halo(pl, it, hit, chunks, p, ht, slice, d);
            const HaloUnit unit = halo_unit(ht, t.m0);
#else
            const int first = first_block(p, t.slice), blocks = first_block(p, t.slice + 1) - first;
            consume<false, FILTER_MN>(pl, it, blocks, slice, d);
            it += blocks;
#endif
            cluster_sums(d, slice, pl.base);
#if SPLIT
            if (mode != 0) {
                // fp32 partial sums, two channels at a time (channels-last: adjacent), the
                // accumulators as for_each_pair lays them out: the thread's two rows' indices
                // (in each of its MR slices) once, then every pair of columns in them.
                const int lane = threadIdx.x % 32, warp = threadIdx.x % 128 / 32;
#pragma unroll
                for (int half_row = 0; half_row < 2 * MR; ++half_row) {
                    const int m = t.m0 + slice * 64 * MR + half_row / 2 * 64 + warp * 16 + lane / 4 + half_row % 2 * 8;
                    if (m >= m_total) continue;
                    float* row = ws + (mode == 2 ? (long long)t.slice * slice_elements : 0) + dst_index(m, t.g * p.kg + t.n0);
                    const float* acc = d + half_row / 2 * (BN / 2);
#pragma unroll
                    for (int j = 0; j < BN / 8; ++j) {
                        const int column = j * 8 + (lane % 4) * 2;
                        if (t.n0 + column >= p.kg) continue;
                        const float2 pair = make_float2(acc[4 * j + 2 * (half_row % 2)], acc[4 * j + 2 * (half_row % 2) + 1]);
                        if (mode == 1) {
                            atomicAdd(reinterpret_cast<float2*>(row + column), pair);
                        } else {
                            *reinterpret_cast<float2*>(row + column) = pair;
                        }
                    }
                }
                zero(d);
            } else
#endif
            {
                // The results leave through shared memory, so that each destination row goes in
                // 16-byte chunks, a warp's stores contiguous.
#if PERSISTENT
                if (tiled_store) {
                    if (threadIdx.x % 32 == 0) bulk_wait_read();
                    __syncwarp();  // the warp's rows of the unit before have left
                } else {
                    warpgroup_sync(slice);  // its rows of the unit before have left
                }
#else
                consumers_sync();  // every consumer is done with the stages (their loads all landed)
#endif
#pragma unroll
                for (int mr = 0; mr < MR; ++mr) {
                    if (!stores_fragment(fragment_index(slice, mr, threadIdx.x % 128 / 32))) continue;
                    for_each_pair(d + mr * (BN / 2), [&](int row, int column, float v0, float v1) { store_pair(reinterpret_cast<elem_t*>(staged + staged_at(mr * 64 + row, column)), v0, v1); });
                }
                // The MMAs read the accumulators: zeros let them die here, not live on through
                // the stores into the next unit.
                zero(d);
                if (tiled_store) {
                    // The staged results, written through the generic proxy, made visible to the
                    // TMA's (async) proxy before it reads them.
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                    __syncwarp();
                    if (threadIdx.x % 32 == 0) {
                        const int warp_row = threadIdx.x % 128 / 32 * 16;
#pragma unroll
                        for (int mr = 0; mr < MR; ++mr)
#pragma unroll
                            for (int q = 0; q < BN / PANEL_COLUMNS; ++q) {
                                const int row = mr * 64 + warp_row;
                                store_tile(DST_MAP, staged_base + q * PANEL_BYTES + row * ROW_BYTES, t.g * p.kg + t.n0 + q * PANEL_COLUMNS, t.m0 + slice * 64 * MR + row);
                            }
                        bulk_commit();
                    }
                } else {
                    warpgroup_sync(slice);
                    // The consumer's rows this CTA stores: all of them, or with KSPLIT its slice's.
                    const int owned = cluster_slice() * OWNED_ROWS - slice * 64 * MR;
                    const int first_row = KSPLIT == 1 ? 0 : max(owned, 0), end_row = KSPLIT == 1 ? 64 * MR : min(owned + OWNED_ROWS, 64 * MR);
                    for (int i = first_row * CHUNKS + threadIdx.x % 128; i < end_row * CHUNKS; i += 128) {
                        const int row = i / CHUNKS, column = i % CHUNKS * CHUNK;
                        const int n = t.n0 + column;
#if HALO
                        // The row's place on the pitch: rows past the destination's width, or past
                        // the unit's rows, are the tile's padding.
                        const int local = slice * 64 * MR + row, r = quotient(local, pitch_div), x = local - r * ht.pitch;
                        if (r >= ht.rows || unit.first_row + r >= p.out[1] || x >= p.out[2] || n >= p.kg) continue;
                        const auto at = PRODUCT_OFFSET(0) + offset(p.ys, unit.image, t.g * p.kg + n, 0, unit.first_row + r, x);
#else
                        const int m = t.m0 + slice * 64 * MR + row;
                        if (m >= m_total || n >= p.kg) continue;
                        const auto at = dst_index(m, t.g * p.kg + n);
#endif
                        *reinterpret_cast<uint4*>(dst + at) = *reinterpret_cast<const uint4*>(staged + staged_at(row, column));
                    }
                }
            }
        }
        // The stores read the staging (without PERSISTENT, the stages) until they are done.
        if (tiled_store && threadIdx.x % 32 == 0) bulk_wait_read();
    }
    cluster_sync();
}

// FLIP_FILTER (backward-data in tf32, whose filter is read as a flipped copy: see flip_filter;
// 0 otherwise): the copy's kernel is compiled only into the builds that launch it (its ptxas
// time was a tenth of every other build's).
#ifndef FLIP_FILTER
#define FLIP_FILTER 0
#endif
#if FLIP_FILTER
// Where backward-data puts tap f of one dimension: dx positions h take the taps whose
// f * dil = h + pad (mod stride), so the taps fall into phases by f * dil % stride. `before`:
// the taps of the phases before f's; `count`: the taps of f's phase; `flipped`: f's place in
// its phase counted from the last (the product walks them in reverse).
struct PhaseTap {
    int before, count, flipped;
};

__device__ __forceinline__ PhaseTap phase_tap(int f, int taps, int dil, int stride) {
    const int phase = f * dil % stride;
    PhaseTap t = {0, 0, 0};
    for (int i = 0; i < taps; ++i) {
        const int other = i * dil % stride;
        t.before += other < phase;
        t.count += other == phase;
        t.flipped += other == phase && i > f;
    }
    return t;
}

// Backward-data's filter: w[g * K/G + k][c][tap] (as its strides say) to each phase's
// forward filter, wt[g][c][tap'][k] with tap' the phase's taps flipped; the phases follow one
// another in the order of their residues (depth, height, width), each G x C/G x its taps x
// K/G. A 32 x 32 tile of (k, c) per block and tap, through shared memory so both sides are
// read and written along rows. p: the convolution's own parameters.
extern "C" __global__ void flip_filter(const elem_t* w, elem_t* wt, ConvParams p) {
    __shared__ elem_t tile[32][33];
    const int taps = p.fil[0] * p.fil[1] * p.fil[2];
    const int g = blockIdx.z / taps, tap = blockIdx.z % taps;
    const int kg = p.kg, cg = p.cg;
    const int c0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
    int f[3];
    tap_position(p, tap, f);
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        const int k = k0 + i, c = c0 + threadIdx.x;
        if (k < kg && c < cg) tile[i][threadIdx.x] = w[offset(p.ws, g * kg + k, c, f[0], f[1], f[2])];
    }
    PhaseTap t[3];
#pragma unroll
    for (int i = 0; i < 3; ++i) t[i] = phase_tap(f[i], p.fil[i], p.dil[i], p.stride[i]);
    const long long phase_start = (long long)(t[0].before * p.fil[1] * p.fil[2] + t[0].count * (t[1].before * p.fil[2] + t[1].count * t[2].before)) * p.g * cg * kg;
    const int phase_taps = t[0].count * t[1].count * t[2].count;
    const int flipped = (t[0].flipped * t[1].count + t[1].flipped) * t[2].count + t[2].flipped;
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        const int c = c0 + i, k = k0 + threadIdx.x;
        if (k < kg && c < cg) wt[phase_start + ((long long)(g * cg + c) * phase_taps + flipped) * kg + k] = tile[threadIdx.x][i];
    }
}
#endif
#endif
