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
