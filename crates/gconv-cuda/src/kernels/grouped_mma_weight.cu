#line 2 "grouped_mma_weight.cu"
// cuda.grouped_mma, backward-weight: for each group g, dw_g[k][c, tap] = sum over images and
// output pixels of dy[pixel][k] x[pixel * stride - pad + tap * dil][c], on the tensor cores
// (mma.sync m16n8k16, fp32 accumulators), channels-last 1D, 2D or 3D.
//
// Per group it is a GEMM whose rows are the filter's (tap, c) columns, whose columns are the
// group's KG output channels and whose reduction runs over output pixels. A block owns GB
// groups x MB tiles of 16 rows (grid.y: the row chunk and the depth tap, grid.z: the groups)
// and walks units of the reduction, a unit being a TH x TW tile of output pixels of one image
// and depth plane (grid.x: every gridDim.x-th unit). Per unit it stages the tile's dy and the
// x window the tile reads (with its halo; zeros outside the tensor) in shared memory, double
// buffered by cp.async. Its warps own GB x MB / WARPS row tiles and multiply them over the
// unit's pixels in steps of 16: x^T by ldmatrix.trans from the window, each lane's row
// address the window pixel of its output pixel plus its row's tap offset (the im2col gather),
// and dy by ldmatrix.trans from the tile. At the end a block adds its sums into the fp32
// workspace, laid out as dw, once; weight_store.cuh rounds it into dw.
//
// Compile-time: CG, KG (channels per group of x and of dy, multiples of 8 up to 64), GB, MB,
// TH, TW, and the 16-bit type.

#define PIXELS (TH * TW)
#define ITEMS (GB * MB)
#define ITEMS_PER_WARP (ITEMS / WARPS)
#define N_TILES (KG / 8)
// A pixel's row in shared memory, 16 bytes more than its channels so that the 8 rows of an
// ldmatrix spread over the banks.
#define X_BYTES (GB * CG * 2 + 16)
#define DY_BYTES (GB * KG * 2 + 16)
static_assert(PIXELS % 16 == 0 && ITEMS % WARPS == 0, "the tile must be whole steps of 16 pixels, the row tiles whole per warp");
static_assert(CG % 8 == 0 && KG % 8 == 0 && CG <= 64 && KG <= 64, "channels per group: multiples of 8 up to 64");

extern "C" __global__ void __launch_bounds__(THREADS, 4)
    grouped_mma_weight(ConvParams p, const elem_t* x, const elem_t* dy, float* ws) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int fd = blockIdx.y % p.fil[0], chunk = blockIdx.y / p.fil[0];
    const int g0 = blockIdx.z * GB;
    const int taps = p.fil[1] * p.fil[2];
    const int tiles_w = (p.out[2] + TW - 1) / TW, tiles = (p.out[1] + TH - 1) / TH * tiles_w;
    const int units = p.n * p.out[0] * tiles;
    // The window's size is the same for every tile.
    const int wy_size = window_dim<false>(0, TH, p.fil[1], p.stride[1], p.pad[1], p.dil[1]).size;
    const int wx_size = window_dim<false>(0, TW, p.fil[2], p.stride[2], p.pad[2], p.dil[2]).size;
    const int stage_bytes = wy_size * wx_size * X_BYTES + PIXELS * DY_BYTES;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    // The source depth plane of unit u, or -1 where its tap reads none.
    auto source_plane = [&](int u) { return src_coord(u / tiles % p.out[0], fd, p.stride[0], p.pad[0], p.dil[0], p.in[0], false); };
    auto stage = [&](int u, int buffer) {
        const int tile = u % tiles, od = u / tiles % p.out[0], n = u / tiles / p.out[0];
        const int oy0 = tile / tiles_w * TH, ox0 = tile % tiles_w * TW;
        unsigned char* window = smem + buffer * stage_bytes;
        const WindowDim wy = window_dim<false>(oy0, TH, p.fil[1], p.stride[1], p.pad[1], p.dil[1]);
        const WindowDim wx = window_dim<false>(ox0, TW, p.fil[2], p.stride[2], p.pad[2], p.dil[2]);
        stage_pixels<GB * CG / 8>(window, X_BYTES, x, p.xs, p.in, n, source_plane(u), wy, wx, g0 * CG, p.g * CG);
        stage_pixels<GB * KG / 8>(window + wy_size * wx_size * X_BYTES, DY_BYTES, dy, p.ys, p.out, n, od, {oy0, TH}, {ox0, TW}, g0 * KG, p.g * KG);
    };

    // Per item (group gi, row tile mt of the group): this lane's ldmatrix row of x^T is 8
    // consecutive rows (tap, c) of the tile, a byte offset into a window pixel's row. Rows past
    // the last tap read tap 0: their sums are never stored.
    int x_columns[ITEMS_PER_WARP];
#pragma unroll
    for (int it = 0; it < ITEMS_PER_WARP; ++it) {
        const int item = warp * ITEMS_PER_WARP + it, gi = item / MB, mt = chunk * MB + item % MB;
        const int row = mt * 16 + (lane / 8) % 2 * 8;
        const int tap = row / CG < taps ? row / CG : 0, c = row % CG;
        const int tap_offset = tap / p.fil[2] * p.dil[1] * wx_size + tap % p.fil[2] * p.dil[2];
        x_columns[it] = tap_offset * X_BYTES + (gi * CG + c) * 2;
    }
    // The pixel (of a step's 16) whose row this lane addresses: x^T's matrices 2 and 3 and
    // dy's matrices 1 and 3 hold pixels 8 .. 15.
    const int x_pixel = lane / 16 * 8 + lane % 8, dy_pixel = (lane / 8) % 2 * 8 + lane % 8;
    const int dy_channel_bytes = lane / 16 * 16;

    float acc[ITEMS_PER_WARP][N_TILES][4];
#pragma unroll
    for (int it = 0; it < ITEMS_PER_WARP; ++it)
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[it][nt][e] = 0.0f;

    int buffer = 0;
    if (blockIdx.x < units && source_plane(blockIdx.x) >= 0) stage(blockIdx.x, 0);
    asm volatile("cp.async.commit_group;" ::: "memory");
    for (int u = blockIdx.x; u < units; u += gridDim.x, buffer ^= 1) {
        const int next = u + gridDim.x;
        if (next < units && source_plane(next) >= 0) stage(next, buffer ^ 1);
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        if (source_plane(u) >= 0) {
            const unsigned window = smem_addr(smem + buffer * stage_bytes);
            const unsigned dy_tile = window + wy_size * wx_size * X_BYTES;
#pragma unroll 2
            for (int step = 0; step < PIXELS / 16; ++step) {
                const int pixel = step * 16 + x_pixel;
                const unsigned x_row = window + (pixel / TW * p.stride[1] * wx_size + pixel % TW * p.stride[2]) * X_BYTES;
                const unsigned dy_row = dy_tile + (step * 16 + dy_pixel) * DY_BYTES + dy_channel_bytes;
                unsigned b[N_TILES * 2];
#pragma unroll
                for (int it = 0; it < ITEMS_PER_WARP; ++it) {
                    const int item = warp * ITEMS_PER_WARP + it, gi = item / MB;
                    // dy's fragments for the item's group, loaded again only where the group changes.
                    if (it == 0 || item % MB == 0) {
#pragma unroll
                        for (int nt = 0; nt < N_TILES; nt += 2) {
                            const unsigned at = dy_row + (gi * KG + nt * 8) * 2;
                            if (nt + 1 < N_TILES) {
                                ldmatrix_x4_trans(b + nt * 2, at);
                            } else {
                                ldmatrix_x2_trans(b + nt * 2, at);
                            }
                        }
                    }
                    unsigned a[4];
                    ldmatrix_x4_trans(a, x_row + x_columns[it]);
#pragma unroll
                    for (int nt = 0; nt < N_TILES; ++nt) mma_m16n8k16(acc[it][nt], a, b + nt * 2);
                }
            }
        }
        __syncthreads();  // the buffer is read before the next iteration stages into it
    }

    // Accumulator e of tile (it, nt): row lane / 4 (+ 8 for e >= 2) of the item's 16, output
    // channel nt * 8 + 2 (lane % 4) + e % 2.
#pragma unroll
    for (int it = 0; it < ITEMS_PER_WARP; ++it) {
        const int item = warp * ITEMS_PER_WARP + it, g = g0 + item / MB, mt = chunk * MB + item % MB;
        if (g >= p.g) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = mt * 16 + lane / 4 + half * 8, tap = row / CG, c = row % CG;
            if (tap >= taps) continue;
            float* at = ws + offset(p.ws, g * KG + (lane % 4) * 2, c, fd, tap / p.fil[2], tap % p.fil[2]);
#pragma unroll
            for (int nt = 0; nt < N_TILES; ++nt) {
                atomicAdd(at + nt * 8 * p.ws[0], acc[it][nt][2 * half]);
                atomicAdd(at + (nt * 8 + 1) * p.ws[0], acc[it][nt][2 * half + 1]);
            }
        }
    }
}
