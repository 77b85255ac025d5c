
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
