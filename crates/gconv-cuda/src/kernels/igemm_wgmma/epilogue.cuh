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

