// cuda.pointwise: a 1x1 convolution at stride 1 without padding in a channels-last layout,
// forward or backward-data, is a GEMM of the source's pixel rows (RED channels each, the
// rows of the packed tensor one after another) with the filter: dst[pixel][n] = sum over r
// of src[pixel][r] x filter[n][r]. Where one side has few channels it is memory-bound, and
// the pixels only need streaming: a block stages the whole filter once, then walks tiles of
// PIXELS rows a grid apart, staging the next tile's rows (16-byte cp.async copies, contiguous
// in memory) while its warps multiply the current one's, MT tiles of 16 rows each by every
// column on the tensor cores (mma m16n8k16, A from the staged rows by ldmatrix, B from the
// staged filter), and store the results through a shared-memory tile of each warp's as whole
// 16-byte runs of dst's rows.
//
// Compile-time: RED (channels reduced: C forward, K backward-data; a multiple of 8), COLS
// (channels produced; a multiple of 8), WARPS, MT, BACKWARD_DATA. Sizes are run-time.

constexpr int RED_PAD = (RED + 15) / 16 * 16;  // reduced channels as the MMAs step them
// Staged rows and filter rows, in elements: 16 bytes past RED_PAD, so that ldmatrix's eight
// rows and the B fragments' eight filter rows fall in different banks.
constexpr int ROW = RED_PAD + 8;
constexpr int PIXELS = WARPS * MT * 16;
constexpr int CHUNKS = RED / 8;  // 16-byte copies per source row
// Column tiles a warp sums at once: the most, up to eight, that divide COLS / 8.
__host__ __device__ constexpr int column_group(int tiles) {
    for (int g = 8; g > 1; --g)
        if (tiles % g == 0) return g;
    return 1;
}
constexpr int GROUP = column_group(COLS / 8);
// A warp's 16 rows of a group's results, staged for the stores (16 bytes of padding a row).
constexpr int OUT_ROW = GROUP * 8 + 8;
static_assert(RED % 8 == 0 && COLS % 8 == 0, "whole 16-byte rows in and 8-column MMA tiles out");

extern "C" __global__ void __launch_bounds__(32 * WARPS) pointwise(ConvParams p, const elem_t* src, const elem_t* w, elem_t* dst) {
    extern __shared__ __align__(16) unsigned char raw[];
    elem_t* const filter = reinterpret_cast<elem_t*>(raw);  // COLS rows of ROW
    elem_t* const buffers = filter + COLS * ROW;             // two tiles of PIXELS rows of ROW
    elem_t* const results = buffers + 2 * PIXELS * ROW;      // WARPS x 16 rows of OUT_ROW
    const long long pixels = (long long)p.n * p.out[0] * p.out[1] * p.out[2];
    const int tiles = (int)((pixels + PIXELS - 1) / PIXELS);
    const int tid = threadIdx.x;
    auto stage = [&](int tile, elem_t* rows) {
        const long long first = (long long)tile * PIXELS;
        for (int i = tid; i < PIXELS * CHUNKS; i += 32 * WARPS) {
            const int row = i / CHUNKS, chunk = i % CHUNKS;
            const bool valid = first + row < pixels;
            cp_async_16(rows + row * ROW + chunk * 8, src + (valid ? (first + row) * RED + chunk * 8 : 0), valid);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    int tile = blockIdx.x;
    if (tile < tiles) stage(tile, buffers);
    // filter[n][r]: forward w[k = n][c = r], backward-data w[k = r][c = n], read in w's order
    // (consecutive threads, consecutive c); the reduction's padding up to RED_PAD multiplies
    // zeros, in the filter and in both buffers' rows.
    for (int i = tid; i < COLS * RED_PAD; i += 32 * WARPS) {
        const int n = BACKWARD_DATA ? i % COLS : i / RED_PAD, r = BACKWARD_DATA ? i / COLS : i % RED_PAD;
        filter[n * ROW + r] = r < RED ? w[BACKWARD_DATA ? offset(p.ws, r, n, 0, 0, 0) : offset(p.ws, n, r, 0, 0, 0)] : elem_t(0);
    }
    if (RED_PAD > RED)
        for (int row = tid; row < 2 * PIXELS; row += 32 * WARPS) *reinterpret_cast<uint4*>(buffers + row * ROW + RED) = make_uint4(0, 0, 0, 0);

    const int warp = tid / 32, lane = tid % 32;
    elem_t* const own_results = results + warp * 16 * OUT_ROW;
    for (int b = 0; tile < tiles; tile += gridDim.x, b ^= 1) {
        const elem_t* const staged = buffers + b * PIXELS * ROW;
        if (tile + (int)gridDim.x < tiles) stage(tile + gridDim.x, buffers + (b ^ 1) * PIXELS * ROW);
        else asm volatile("cp.async.commit_group;" ::: "memory");
        // This tile's copies have landed (all but the group just committed).
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        const long long first = (long long)tile * PIXELS;
#pragma unroll 1
        for (int mt = 0; mt < MT; ++mt) {
            const int row0 = (warp * MT + mt) * 16;
            if (first + row0 >= pixels) break;
            // Up to eight column tiles (64 channels) at a time, their A fragments loaded again
            // for each: a thread's sums stay 32 registers whatever COLS is.
#pragma unroll 1
            for (int nt0 = 0; nt0 < COLS / 8; nt0 += GROUP) {
                float acc[GROUP][4] = {};
#pragma unroll
                for (int ks = 0; ks < RED_PAD / 16; ++ks) {
                    unsigned a[4];
                    ldmatrix_x4(a, staged + (row0 + lane % 16) * ROW + ks * 16 + lane / 16 * 8);
#pragma unroll
                    for (int nt = 0; nt < GROUP; ++nt) {
                        const elem_t* bp = filter + ((nt0 + nt) * 8 + lane / 4) * ROW + ks * 16 + lane % 4 * 2;
                        const unsigned bf[2] = {*reinterpret_cast<const unsigned*>(bp), *reinterpret_cast<const unsigned*>(bp + 8)};
                        mma_m16n8k16(acc[nt], a, bf);
                    }
                }
                // Each thread holds rows lane / 4 and lane / 4 + 8 of the tile, two adjacent
                // columns a column tile: into the warp's results tile, then out 16 bytes a lane.
#pragma unroll
                for (int half = 0; half < 2; ++half)
#pragma unroll
                    for (int nt = 0; nt < GROUP; ++nt) {
                        const unsigned pair = (unsigned)from_f32(acc[nt][2 * half]) | (unsigned)from_f32(acc[nt][2 * half + 1]) << 16;
                        *reinterpret_cast<unsigned*>(own_results + (lane / 4 + half * 8) * OUT_ROW + nt * 8 + lane % 4 * 2) = pair;
                    }
                __syncwarp();
                for (int i = lane; i < 16 * GROUP; i += 32) {
                    const int row = i / GROUP, chunk = i % GROUP;
                    const long long pixel = first + row0 + row;
                    if (pixel < pixels)
                        *reinterpret_cast<uint4*>(dst + pixel * COLS + (nt0 + chunk) * 8) = *reinterpret_cast<const uint4*>(own_results + row * OUT_ROW + chunk * 8);
                }
                __syncwarp();  // the tile is free for the next group
            }
        }
        // The buffer is free for the copies two tiles on.
        __syncthreads();
    }
}
