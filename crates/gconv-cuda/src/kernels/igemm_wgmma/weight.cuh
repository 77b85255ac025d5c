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

