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

