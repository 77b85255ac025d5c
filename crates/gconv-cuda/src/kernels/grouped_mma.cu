#line 2 "grouped_mma.cu"
// cuda.grouped_mma: direct convolution on the tensor cores (mma.sync m16n8k16, fp32
// accumulators) for grouped layers with few channels per group, channels-last 1D, 2D or 3D,
// forward and backward-data at any stride, dilation and padding.
//
// A block computes a TH x TW tile of destination pixels of one image and depth plane, for GB
// groups at once. The source window the tile reads (with its halo; zeros outside the tensor)
// sits in shared memory, a pixel per row of GB x RC channels, and so do the groups' filters,
// a row of taps x RC per destination channel. Each warp multiplies pairs of 16-pixel rows of
// the tile with one group's filter: the reduction runs over taps x source channels in steps of
// 16 (one tap's 16 channels, or two taps' 8), and ldmatrix takes each lane's row address from
// a table of offsets per half step (8 elements: a tap's channels), which is the im2col gather;
// a (pixel, tap) that reads nothing (a tap past the last, or in backward-data one the stride
// does not divide) points at a zero row. Depth taps run as an outer loop, the window reloaded per source plane.
//
// Forward reads x at pixel * stride - pad + tap * dil. Backward-data gathers: dx pixel h
// takes dy at (h + pad - tap * dil) / stride where that divides, with the filter transposed
// (its staged rows are the reduction's, tap and k, each the WC channels c of w[k][c], and
// ldmatrix.trans reads them); h + pad = a * stride + r puts h in phase r, whose taps and their
// offsets from a lane's base row a come from the table of phase r.
//
// Compile-time: BACKWARD_DATA, RC (channels per group the product reduces: 8, 16, 32, 64), WC
// (channels per group it writes, a multiple of 8 up to 64), GB, TH, TW, and the 16-bit type.

#define PIXELS (TH * TW)
#define M_TILES (PIXELS / 16)
// A warp's unit of work: two 16-pixel rows of the tile against one group's filter.
#define PAIRS (M_TILES / 2)
#define ITEMS (PAIRS * GB)
#define ITEMS_PER_WARP (ITEMS / WARPS)
#define N_TILES (WC / 8)
// Source channels a block reads, and a window pixel's row in shared memory: 16 bytes more
// than its channels, so that the 8 rows of an ldmatrix spread over the banks.
#define SLAB (GB * RC)
#define PIXEL_BYTES (SLAB * 2 + 16)
static_assert(PIXELS % 32 == 0 && ITEMS % WARPS == 0, "the tile must give every warp whole pairs of rows");
static_assert(RC == 8 || RC == 16 || RC == 32 || RC == 64, "reduced channels per group: 8, 16, 32 or 64");
static_assert(WC % 8 == 0 && WC <= 64, "written channels per group: a multiple of 8 up to 64");
// Backward-data's filter row in bytes: an odd number of 16-byte units, so that the 8 rows of
// an ldmatrix spread over the banks.
#define FILTER_PITCH (((WC / 8) | 1) * 16)

// A tap table entry for a (phase, tap) that reads nothing; backward-data's offsets from a
// lane's base pixel are negative too.
#define NO_TAP (-0x7fffffff - 1)

// The tap steps of the reduction: 16 elements of taps x RC each, the last padded.
__device__ __forceinline__ int steps(int taps) { return (taps * RC + 15) / 16; }

extern "C" __global__ void __launch_bounds__(THREADS, 4)
    grouped_mma(ConvParams p, const elem_t* src, const elem_t* w, elem_t* dst) {
    extern __shared__ __align__(16) unsigned char smem[];
#if BACKWARD_DATA
    const int* src_ext = p.out;
    const int* dst_ext = p.in;
    const int* ss = p.ys;
    const int* ds = p.xs;
#else
    const int* src_ext = p.in;
    const int* dst_ext = p.out;
    const int* ss = p.xs;
    const int* ds = p.ys;
#endif
    const int tiles_w = (dst_ext[2] + TW - 1) / TW;
    const int oy0 = blockIdx.x / tiles_w * TH, ox0 = blockIdx.x % tiles_w * TW;
    const int n = blockIdx.y / dst_ext[0], od = blockIdx.y % dst_ext[0];
    const int g0 = blockIdx.z * GB;
    const WindowDim wy = window_dim<BACKWARD_DATA>(oy0, TH, p.fil[1], p.stride[1], p.pad[1], p.dil[1]);
    const WindowDim wx = window_dim<BACKWARD_DATA>(ox0, TW, p.fil[2], p.stride[2], p.pad[2], p.dil[2]);
    const int taps = p.fil[1] * p.fil[2], half_steps = steps(taps) * 2;
#if BACKWARD_DATA
    const int phases_y = p.stride[1], phases_x = p.stride[2];
#else
    const int phases_y = 1, phases_x = 1;
#endif

    // Shared memory: the window, the filters, a zero row, the tap table (per phase and half
    // step, the byte offset of the half step's 8 elements from a lane's base pixel row, or
    // NO_TAP), and forward's offset in w per filter column (tap and channel), -1 past the
    // taps. All but the tables in multiples of 16 bytes, as ldmatrix wants its rows.
    const int row_steps = steps(taps) * 16;
#if BACKWARD_DATA
    // Per group and depth tap, row_steps rows of FILTER_PITCH bytes.
    const int filter_bytes = GB * p.fil[0] * row_steps * FILTER_PITCH;
#else
    // A row per group and destination channel: depth taps x row_steps elements, and 8.
    const int k_row = p.fil[0] * row_steps + 8;
    const int filter_bytes = GB * WC * k_row * 2;
#endif
    unsigned char* window = smem;
    unsigned char* filter = window + wy.size * wx.size * PIXEL_BYTES;
    unsigned char* zero_row = filter + filter_bytes;
    int* table = reinterpret_cast<int*>(zero_row + 16);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    if (tid < 4) reinterpret_cast<unsigned*>(zero_row)[tid] = 0;
    for (int i = tid; i < phases_y * phases_x * half_steps; i += THREADS) {
        const int tap = i % half_steps * 8 / RC, rc = i % half_steps * 8 % RC;
        int offset = NO_TAP;
        if (tap < taps) {
            const int fh = tap / p.fil[2], fw = tap % p.fil[2];
#if BACKWARD_DATA
            // h + pad = a * stride + r reads dy at a + (r - fh * dil) / stride where that divides.
            const int phase = i / half_steps;
            const int ry = phase / phases_x - fh * p.dil[1], rx = phase % phases_x - fw * p.dil[2];
            if (ry % p.stride[1] == 0 && rx % p.stride[2] == 0) offset = (ry / p.stride[1] * wx.size + rx / p.stride[2]) * PIXEL_BYTES + rc * 2;
#else
            offset = (fh * p.dil[1] * wx.size + fw * p.dil[2]) * PIXEL_BYTES + rc * 2;
#endif
        }
        table[i] = offset;
    }
#if BACKWARD_DATA
    // The filters: row (group, depth tap, reduction index kk: tap kk / RC and output channel
    // kk % RC), the WC channels c of w[k][c] at that tap, zero past the taps and the last
    // group. Where c is innermost they are 16-byte copies, in flight with the first window's.
    const bool rows_contiguous = p.ws[1] == 1 && (p.ws[0] | p.ws[2] | p.ws[3] | p.ws[4]) % 8 == 0;
    for (int i = tid; i < GB * p.fil[0] * row_steps * (WC / 8); i += THREADS) {
        const int row = i / (WC / 8), c0 = i % (WC / 8) * 8;
        const int kk = row % row_steps, fd = row / row_steps % p.fil[0], g = g0 + row / row_steps / p.fil[0];
        const int tap = kk / RC;
        const bool valid = g < p.g && tap < taps;
        const int at = valid ? (g * p.kg + kk % RC) * p.ws[0] + c0 * p.ws[1] + fd * p.ws[2] + tap / p.fil[2] * p.ws[3] + tap % p.fil[2] * p.ws[4] : 0;
        unsigned char* to = filter + row * FILTER_PITCH + c0 * 2;
        if (rows_contiguous) {
            cp_async_16(to, w + at, valid);
        } else {
            for (int e = 0; e < 8; ++e) reinterpret_cast<elem_t*>(to)[e] = valid ? w[at + e * p.ws[1]] : from_f32(0.0f);
        }
    }
#else
    // The filters: row (group, destination channel), element (depth tap, step x 16 + e) for the
    // tap and source channel (taps x RC) e indexes, zero past them and past the last group.
    int* column_offsets = table + half_steps;
    for (int kk = tid; kk < row_steps; kk += THREADS) {
        const int tap = kk / RC;
        column_offsets[kk] = tap < taps ? kk % RC * p.ws[1] + tap / p.fil[2] * p.ws[3] + tap % p.fil[2] * p.ws[4] : -1;
    }
    __syncthreads();
    // The rows are w's own where the filter is channels-last (k, taps, channels innermost):
    // then they are 16-byte copies, in flight together with the first window's.
    const bool rows_contiguous = p.ws[1] == 1 && p.ws[4] == RC && p.ws[3] == p.fil[2] * RC && p.ws[2] == taps * RC;
    elem_t* filter_elems = reinterpret_cast<elem_t*>(filter);
    if (rows_contiguous) {
        const int chunks = row_steps / 8;
        for (int i = tid; i < GB * WC * p.fil[0] * chunks; i += THREADS) {
            const int row = i / chunks, chunk = i % chunks;
            const int fd = row % p.fil[0], wc = row / p.fil[0] % WC, g = g0 + row / p.fil[0] / WC;
            const bool valid = g < p.g && chunk * 8 < taps * RC;
            const elem_t* from = valid ? w + (g * p.kg + wc) * p.ws[0] + fd * p.ws[2] + chunk * 8 : w;
            cp_async_16(filter_elems + (row / p.fil[0]) * k_row + fd * row_steps + chunk * 8, from, valid);
        }
    } else {
        for (int row = warp; row < GB * WC * p.fil[0]; row += WARPS) {
            const int fd = row % p.fil[0], wc = row / p.fil[0] % WC, g = g0 + row / p.fil[0] / WC;
            const int across = (g * p.kg + wc) * p.ws[0] + fd * p.ws[2];
            elem_t* to = filter_elems + (row / p.fil[0]) * k_row + fd * row_steps;
            for (int kk = lane; kk < row_steps; kk += 32) {
                const int along = column_offsets[kk];
                to[kk] = g < p.g && along >= 0 ? w[across + along] : from_f32(0.0f);
            }
        }
    }
#endif

    // The window pixel a lane's ldmatrix row (destination pixel `pixel` of the tile) reads
    // from at tap offset zero, and its phase's row of the tap table.
    auto lane_row = [&](int pixel, int& base, int& phase) {
        const int oy = oy0 + pixel / TW, ox = ox0 + pixel % TW;
#if BACKWARD_DATA
        base = ((oy + p.pad[1]) / p.stride[1] - wy.start) * wx.size + (ox + p.pad[2]) / p.stride[2] - wx.start;
        phase = ((oy + p.pad[1]) % p.stride[1] * phases_x + (ox + p.pad[2]) % p.stride[2]) * half_steps;
#else
        base = (oy - oy0) * p.stride[1] * wx.size + (ox - ox0) * p.stride[2];
        phase = 0;
#endif
    };

    const unsigned window_addr = smem_addr(window), zero_addr = smem_addr(zero_row);
    float acc[ITEMS_PER_WARP][2][N_TILES][4];
#pragma unroll
    for (int it = 0; it < ITEMS_PER_WARP; ++it)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < N_TILES; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[it][mt][nt][e] = 0.0f;

    for (int fd = 0; fd < p.fil[0]; ++fd) {
        const int sd = src_coord(od, fd, p.stride[0], p.pad[0], p.dil[0], src_ext[0], BACKWARD_DATA);
        if (sd < 0) continue;
        __syncthreads();  // the previous plane's reads are done (and the tables written)
        stage_pixels<SLAB / 8>(window, PIXEL_BYTES, src, ss, src_ext, n, sd, wy, wx, g0 * RC, p.g * RC);
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        __syncthreads();
#pragma unroll
        for (int it = 0; it < ITEMS_PER_WARP; ++it) {
            const int item = warp * ITEMS_PER_WARP + it, gi = item / PAIRS;
            // Per 16-pixel row: this lane's row address at tap offset zero (its group's channels
            // in the window pixel) and its row of the tap table (the half step it takes: lanes
            // 16 .. 31 the second 8 elements of each step).
            unsigned row_base[2];
            int row_table[2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                int base, phase;
                lane_row((item % PAIRS * 2 + mt) * 16 + lane % 16, base, phase);
                row_base[mt] = window_addr + base * PIXEL_BYTES + gi * RC * 2;
                row_table[mt] = phase + lane / 16;
            }
            // This lane's B row for ldmatrix x4: matrices (k 0-7, n 0-7), (k 8-15, n 0-7),
            // (k 0-7, n 8-15), (k 8-15, n 8-15) of a step's 16 x 16, n a pair of N tiles.
#if BACKWARD_DATA
            const unsigned filter_row = smem_addr(filter) + ((gi * p.fil[0] + fd) * row_steps + (lane / 8) % 2 * 8 + lane % 8) * FILTER_PITCH + lane / 16 * 16;
            const int b_step = 16 * FILTER_PITCH, b_pair = 32;
#else
            const unsigned filter_row = smem_addr(filter_elems + (gi * WC + lane % 8 + (lane / 16) * 8) * k_row + fd * row_steps + ((lane / 8) % 2) * 8);
            const int b_step = 32, b_pair = 32 * k_row;
#endif
#pragma unroll 2
            for (int step = 0; step < steps(taps); ++step) {
                unsigned a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    const int off = table[row_table[mt] + step * 2];
                    ldmatrix_x4(a[mt], off == NO_TAP ? zero_addr : row_base[mt] + off);
                }
#pragma unroll
                for (int nt = 0; nt < N_TILES; nt += 2) {
                    unsigned b[4];
                    const unsigned at = filter_row + nt / 2 * b_pair + step * b_step;
#if BACKWARD_DATA
                    if (nt + 1 < N_TILES) {
                        ldmatrix_x4_trans(b, at);
                    } else {
                        ldmatrix_x2_trans(b, at);
                    }
#else
                    if (nt + 1 < N_TILES) {
                        ldmatrix_x4(b, at);
                    } else {
                        ldmatrix_x2(b, at);
                    }
#endif
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt) {
                        mma_m16n8k16(acc[it][mt][nt], a[mt], b);
                        if (nt + 1 < N_TILES) mma_m16n8k16(acc[it][mt][nt + 1], a[mt], b + 2);
                    }
                }
            }
        }
    }

    // A block no depth tap reaches still has its filter copies in flight.
    asm volatile("cp.async.wait_all;" ::: "memory");

    // Each accumulator pair: destination pixel row lane / 4 (and + 8) of its 16-pixel row,
    // channels 2 (lane % 4) + {0, 1} of its 8.
#pragma unroll
    for (int it = 0; it < ITEMS_PER_WARP; ++it) {
        const int item = warp * ITEMS_PER_WARP + it, pair = item % PAIRS, g = g0 + item / PAIRS;
        if (g >= p.g) continue;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int pixel = (pair * 2 + mt) * 16 + lane / 4 + half * 8;
                const int oy = oy0 + pixel / TW, ox = ox0 + pixel % TW;
                if (oy >= dst_ext[1] || ox >= dst_ext[2]) continue;
#pragma unroll
                for (int nt = 0; nt < N_TILES; ++nt) {
                    const elem_t pair_values[2] = {from_f32(acc[it][mt][nt][2 * half]), from_f32(acc[it][mt][nt][2 * half + 1])};
                    elem_t* at = dst + offset(ds, n, g * WC + nt * 8 + (lane % 4) * 2, od, oy, ox);
                    *reinterpret_cast<unsigned*>(at) = *reinterpret_cast<const unsigned*>(pair_values);
                }
            }
        }
    }
}
