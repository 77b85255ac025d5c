// cuda.depthwise_tiled: G = C = K in the channels-last layouts, and forward and backward-data
// of groups of GC = 2 or 4 channels in and out (C = K = G x GC). Forward and stride-1
// backward-data: a block computes a tile of TH x RH destination rows x TW columns for 32 x CPT
// channels of one image and depth; the source rows and columns it reads (its halo included)
// are staged once in shared memory, channels innermost, so each lane reads its own CPT
// channels without bank conflicts and every global load and store is a warp-wide contiguous
// run. Each thread keeps its channels' weights of one depth tap in registers and sums RH rows
// x TW columns of destinations in fp32; a group wider than a lane's CPT channels takes the
// rest of each source value from its other lanes by shuffles. Backward-weight stages the same x rectangle and the dy
// tile it meets, each thread sums its RH x TW dy values times x into per-tap sums, a block
// walks many tiles (with two BUFFERS staging the next while it multiplies one), and only then
// are its warps' sums reduced in shared memory and added to the fp32 workspace once per block. With TAP_ROWS the warps split the filter's rows instead
// (warp fh of FH, each over the whole tile): a thread then keeps FW x CPT sums, not
// FH x FW x CPT (250 registers at 7x7), and adds them to the workspace itself.
//
// Compile-time: FH, FW (filter height and width), CPT (channels per thread: 2 for 16-bit
// types, 1 for fp32), TH (warps per block, each a band of RH rows), RH (rows per thread), TW
// (columns per thread), COPY (bytes per staging copy: 16 where C is a multiple of a 16-byte
// vector, else 4), UNIT (dilation 1 along H and W, the strides SH and SW compiled in: each
// staged source value a thread needs is loaded once and serves every tap and row it
// reaches), BACKWARD_DATA (backward-data: at stride 1 a forward pass over dy with the taps
// flipped; with PHASED, strided, see phased_products), TAP_ROWS (backward-weight: FH warps,
// one per row of taps; TH x RH is then the tile's rows), BUFFERS (backward-weight's staging
// buffers, 1 or 2) and GC (channels per group, 1 depthwise). Sizes, pads and the depth are
// run-time.

#ifndef GC
#define GC 1
#endif
// Source values a lane multiplies per staged pixel: its own CPT channels, or its group's GC
// (GC / CPT lanes' worth). A destination channel v of the lane reads its group's from
// GROUP_FIRST(v) on.
#if GC > CPT
#define IN GC
#define GROUP_FIRST(v) 0
#else
#define IN CPT
#define GROUP_FIRST(v) ((v) / GC * GC)
#endif

#ifndef PHASED
#define PHASED 0
#endif

#if TAP_ROWS
#define BLOCK_WARPS FH
#else
#define BLOCK_WARPS TH
#endif

#if CPT == 2
struct __align__(2 * sizeof(elem_t)) pair_t {
    elem_t v[2];
};
typedef pair_t chunk_t;
__device__ __forceinline__ void unpack(chunk_t c, float* out) {
    out[0] = to_f32(c.v[0]);
    out[1] = to_f32(c.v[1]);
}
__device__ __forceinline__ chunk_t pack(const float* in) {
    chunk_t c;
    c.v[0] = from_f32(in[0]);
    c.v[1] = from_f32(in[1]);
    return c;
}
#else
typedef elem_t chunk_t;
__device__ __forceinline__ void unpack(chunk_t c, float* out) { out[0] = to_f32(c); }
__device__ __forceinline__ chunk_t pack(const float* in) { return from_f32(in[0]); }
#endif
static_assert(sizeof(chunk_t) == 4, "a lane's channels are one 4-byte chunk");

// The IN source values the lane multiplies from its chunk of a staged pixel: its own, or with
// a wider group its group's lanes' chunks (every lane of the warp takes part).
__device__ __forceinline__ void group_values(chunk_t own, float* out) {
#if GC > CPT
    constexpr int LANES = GC / CPT;
    const unsigned bits = *reinterpret_cast<const unsigned*>(&own);
    const int first = threadIdx.x & ~(LANES - 1);
#pragma unroll
    for (int l = 0; l < LANES; ++l) {
        const unsigned theirs = __shfl_sync(0xffffffffu, bits, first + l);
        unpack(*reinterpret_cast<const chunk_t*>(&theirs), out + l * CPT);
    }
#else
    unpack(own, out);
#endif
}

// Stages rows x cols pixels of one (image n, depth d) plane of `src`, from row h0 and column w0
// on, into `tile`, 128 bytes (32 chunks) per pixel: COPY-byte cp.async copies, 128 / COPY lanes
// to a pixel, so a warp moves whole consecutive pixels. cp.async zero-fills what lies outside
// the tensor (the padding), so every copy is in flight before any is waited on. A pixel's row
// comes from a float reciprocal, exact for the few hundred pixels a tile has, where an integer
// division would cost more than the copy. The caller waits (cp.async.wait_all) and syncs.
__device__ __forceinline__ void stage(const elem_t* src, const int* strides, const int* extents, int C, int n, int d, int h0, int w0,
                                      int rows, int cols, chunk_t* tile) {
    constexpr int LANES_PER_PIXEL = 128 / COPY, PIXELS_PER_STEP = 32 / LANES_PER_PIXEL;
    constexpr int COPY_CHANNELS = COPY / sizeof(elem_t);
    const int lane = threadIdx.x;
    const int part = lane % LANES_PER_PIXEL;
    const int ch = blockIdx.y * 32 * CPT + part * COPY_CHANNELS;
    const bool channels_in = ch < C;
    const elem_t* plane = src + n * strides[0] + d * strides[2] + (channels_in ? ch : 0) * strides[1];
    const float per_row = 1.0f / cols;
    const unsigned tile_at = smem_addr(tile) + part * COPY;
#pragma unroll 4
    for (int pix = threadIdx.y * PIXELS_PER_STEP + lane / LANES_PER_PIXEL; pix < rows * cols; pix += BLOCK_WARPS * PIXELS_PER_STEP) {
        const int r = static_cast<int>((pix + 0.5f) * per_row);
        const int y = h0 + r, x = w0 + pix - r * cols;
        const bool inside = channels_in && y >= 0 && y < extents[1] && x >= 0 && x < extents[2];
        const elem_t* from = inside ? plane + y * strides[3] + x * strides[4] : src;
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(tile_at + pix * 128), "l"(from), "n"(COPY), "r"(inside ? COPY : 0));
    }
}

// Source pixels along one dimension that `outputs` destinations read through `taps` taps.
__device__ __forceinline__ int staged_span(int outputs, int taps, int stride, int dil) { return (outputs - 1) * stride + (taps - 1) * dil + 1; }

__device__ __forceinline__ void staged_wait() {
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
}

// Calls f(r, t, fh, fw, x) for each destination row r < RH and column t < TW of the thread's
// band and each tap (fh, fw), x being the IN staged source values they meet (see
// group_values; tile: the staged rectangle, cols_in pixels wide, the band at row
// threadIdx.y * RH).
template <class F>
__device__ __forceinline__ void for_each_product(const chunk_t* tile, int cols_in, int sh, int sw, int dh, int dw, F&& f) {
    const chunk_t* band = tile + threadIdx.y * RH * sh * cols_in * 32 + threadIdx.x;
#if UNIT
    // Dilation 1: the thread's (RH - 1) x SH + FH source rows, (TW - 1) x SW + FW values of
    // each loaded once; source row j meets destination row r through tap row j - r x SH, and
    // its value k column t through tap column k - t x SW.
#pragma unroll
    for (int j = 0; j < (RH - 1) * SH + FH; ++j) {
        float xs[(TW - 1) * SW + FW][IN];
#pragma unroll
        for (int k = 0; k < (TW - 1) * SW + FW; ++k) group_values(band[(j * cols_in + k) * 32], xs[k]);
#pragma unroll
        for (int r = 0; r < RH; ++r) {
            const int fh = j - r * SH;
            if (fh < 0 || fh >= FH) continue;
#pragma unroll
            for (int t = 0; t < TW; ++t)
#pragma unroll
                for (int fw = 0; fw < FW; ++fw) f(r, t, fh, fw, xs[t * SW + fw]);
        }
    }
#else
#pragma unroll
    for (int r = 0; r < RH; ++r)
#pragma unroll
        for (int fh = 0; fh < FH; ++fh) {
            const chunk_t* row = band + ((r * sh + fh * dh) * cols_in) * 32;
#pragma unroll
            for (int t = 0; t < TW; ++t)
#pragma unroll
                for (int fw = 0; fw < FW; ++fw) {
                    float xv[IN];
                    group_values(row[(t * sw + fw * dw) * 32], xv);
                    f(r, t, fh, fw, xv);
                }
        }
#endif
}

#if PHASED
// Strided backward-data (dilation 1 along H and W): destination pixel (row i, column k) of dx
// takes dy at ((i + pad - fh) / SH, (k + pad - fw) / SW) for the taps the strides divide, so
// which taps reach a destination depends only on its phase, (i + pad) mod SH along H. The
// thread's rows start at phase PH and its columns at PW (the block's first column a multiple
// of TW); given those, every tap's staged row and column offset is a compile-time constant,
// the taps no stride divides are never visited, and each staged dy value the thread needs is
// loaded once. A thread's phase is the same for all its lanes (they are channels), so the
// dispatch on it does not diverge. `rows`/`cols`: the staged rectangle's row and column of
// the thread's phase-aligned first dy pixel.
template <int PH, int PW, class F>
__device__ __forceinline__ void phased_products(const chunk_t* tile, int cols_in, int row, int col, F&& f) {
    // dy rows j (relative) that destination row r meets through tap fh: r + PH - fh = j x SH.
    constexpr int J0 = floor_div(PH - (FH - 1), SH), J1 = floor_div(PH + RH - 1, SH);
    constexpr int K0 = floor_div(PW - (FW - 1), SW), K1 = floor_div(PW + TW - 1, SW);
    const chunk_t* band = tile + ((row + J0) * cols_in + col + K0) * 32 + threadIdx.x;
#pragma unroll
    for (int j = J0; j <= J1; ++j) {
        float xs[K1 - K0 + 1][IN];
#pragma unroll
        for (int k = K0; k <= K1; ++k) group_values(band[((j - J0) * cols_in + k - K0) * 32], xs[k - K0]);
#pragma unroll
        for (int r = 0; r < RH; ++r) {
            const int fh = r + PH - j * SH;
            if (fh < 0 || fh >= FH) continue;
#pragma unroll
            for (int t = 0; t < TW; ++t)
#pragma unroll
                for (int fw = 0; fw < FW; ++fw) {
                    const int step = t + PW - fw;
                    if (floor_div(step, SW) * SW != step) continue;
                    f(r, t, fh, fw, xs[floor_div(step, SW) - K0]);
                }
        }
    }
}

// Runs phased_products for the thread's phase, phase = PH x SW + PW.
template <int PHASE = 0, class F>
__device__ __forceinline__ void for_each_phased_product(int phase, const chunk_t* tile, int cols_in, int row, int col, F&& f) {
    if (phase == PHASE) phased_products<PHASE / SW, PHASE % SW>(tile, cols_in, row, col, f);
    else if constexpr (PHASE + 1 < SH * SW) for_each_phased_product<PHASE + 1>(phase, tile, cols_in, row, col, f);
}
#endif

extern "C" __global__ void __launch_bounds__(32 * TH) dw_tiled(ConvParams p, const elem_t* src, const elem_t* w, elem_t* dst) {
    extern __shared__ unsigned char staged[];
    chunk_t* tile = reinterpret_cast<chunk_t*>(staged);
    const int C = p.g * GC;
    // Destination and source extents and strides; below, the pads in source coordinates: at
    // stride 1 backward-data reads dy at dst + pad - tap * dil, which is a forward read with
    // the tap flipped and the pad (filter span - 1 - pad).
#if BACKWARD_DATA
    const int* de = p.in;
    const int* se = p.out;
    const int* ds = p.xs;
    const int* ss = p.ys;
#else
    const int* de = p.out;
    const int* se = p.in;
    const int* ds = p.ys;
    const int* ss = p.xs;
#endif
    // blockIdx.x: the tile's row block and column block; y: the channel block; z: image and
    // destination depth.
    const int col_tiles = (de[2] + TW - 1) / TW;
    const int row0 = (blockIdx.x / col_tiles) * (TH * RH);
    const int col0 = (blockIdx.x % col_tiles) * TW;
    const int n = blockIdx.z / de[0];
    const int od = blockIdx.z % de[0];
    const int c = (blockIdx.y * 32 + threadIdx.x) * CPT;
    const bool live = c < C;
#if PHASED
    // The dy rectangle the tile's taps reach, and the thread's phase and first staged dy pixel.
    const int h0 = floor_div(row0 + p.pad[1] - (FH - 1), SH), w0 = floor_div(col0 + p.pad[2] - (FW - 1), SW);
    const int rows_in = floor_div(row0 + TH * RH - 1 + p.pad[1], SH) - h0 + 1;
    const int cols_in = floor_div(col0 + TW - 1 + p.pad[2], SW) - w0 + 1;
    const int band_row = row0 + threadIdx.y * RH + p.pad[1];
    const int phase = band_row % SH * SW + (col0 + p.pad[2]) % SW;
    const int staged_row = band_row / SH - h0, staged_col = (col0 + p.pad[2]) / SW - w0;
#else
#if BACKWARD_DATA
    const int pad_d = (p.fil[0] - 1) * p.dil[0] - p.pad[0];
    const int pad_h = (FH - 1) * p.dil[1] - p.pad[1];
    const int pad_w = (FW - 1) * p.dil[2] - p.pad[2];
#else
    const int pad_d = p.pad[0], pad_h = p.pad[1], pad_w = p.pad[2];
#endif
    const int sh = p.stride[1], sw = p.stride[2], dh = p.dil[1], dw = p.dil[2];
    // The staged source rectangle: rows and columns the tile's taps read.
    const int rows_in = staged_span(TH * RH, FH, sh, dh), cols_in = staged_span(TW, FW, sw, dw);
    const int h0 = row0 * sh - pad_h, w0 = col0 * sw - pad_w;
#endif
    float acc[RH][TW][CPT] = {};
    for (int fd = 0; fd < p.fil[0]; ++fd) {
#if PHASED
        const int sd = src_coord(od, fd, p.stride[0], p.pad[0], p.dil[0], se[0], true);
        if (sd < 0) continue;  // the same for every thread of the block
#else
        const int sd = od * p.stride[0] + fd * p.dil[0] - pad_d;
        if (sd < 0 || sd >= se[0]) continue;  // the same for every thread of the block
#endif
        stage(src, ss, se, C, n, sd, h0, w0, rows_in, cols_in, tile);
        staged_wait();
        // This depth tap's weights for the thread's channels (K x GC x filter): destination
        // channel c + v from its group's source channel u. Backward-data's destination is a
        // channel of x, its sources the group's channels of dy: w[group's u][c + v's place],
        // the taps flipped at stride 1.
        constexpr bool FLIP = BACKWARD_DATA && !PHASED;
        const int wd = FLIP ? p.fil[0] - 1 - fd : fd;
        float wv[FH][FW][CPT][GC];
#pragma unroll
        for (int fh = 0; fh < FH; ++fh)
#pragma unroll
            for (int fw = 0; fw < FW; ++fw)
#pragma unroll
                for (int v = 0; v < CPT; ++v)
#pragma unroll
                    for (int u = 0; u < GC; ++u) {
                        const int k = BACKWARD_DATA ? (c + v) / GC * GC + u : c + v, in_group = BACKWARD_DATA ? (c + v) % GC : u;
                        wv[fh][fw][v][u] = live ? to_f32(w[offset(p.ws, k, in_group, wd, FLIP ? FH - 1 - fh : fh, FLIP ? FW - 1 - fw : fw)]) : 0.0f;
                    }
        auto product = [&](int r, int t, int fh, int fw, const float* x) {
#pragma unroll
            for (int v = 0; v < CPT; ++v)
#pragma unroll
                for (int u = 0; u < GC; ++u) acc[r][t][v] += x[GROUP_FIRST(v) + u] * wv[fh][fw][v][u];
        };
#if PHASED
        for_each_phased_product(phase, tile, cols_in, staged_row, staged_col, product);
#else
        for_each_product(tile, cols_in, sh, sw, dh, dw, product);
#endif
        __syncthreads();
    }
    if (!live) return;
#pragma unroll
    for (int r = 0; r < RH; ++r) {
        const int oh = row0 + threadIdx.y * RH + r;
        if (oh >= de[1]) return;
        elem_t* row = dst + offset(ds, n, c, od, oh, col0);
#pragma unroll
        for (int t = 0; t < TW; ++t)
            if (col0 + t < de[2]) *reinterpret_cast<chunk_t*>(row + t * ds[4]) = pack(acc[r][t]);
    }
}

// Backward-weight, stage 1, for depth tap blockIdx.z: blocks stride over the tiles (image,
// output depth, row block, column block) of dy; each stages the tile's dy values and the x
// rectangle they meet, and each thread adds dy x x into its per-tap sums. With two BUFFERS
// the next tile's copies are in flight while the block multiplies the current one, so a block
// streams its tiles without waiting on each. At the end the block's warps reduce their sums
// in shared memory and the block adds them into the fp32 workspace [fd][fh][fw][C]: one
// atomic per tap and channel per block.
extern "C" __global__ void __launch_bounds__(32 * BLOCK_WARPS) dw_tiled_bwd_weight(ConvParams p, const elem_t* x, const elem_t* dy, float* ws) {
    extern __shared__ unsigned char staged[];
    const int C = p.g;
    const int sh = p.stride[1], sw = p.stride[2], dh = p.dil[1], dw = p.dil[2];
    const int rows_in = staged_span(TH * RH, FH, sh, dh), cols_in = staged_span(TW, FW, sw, dw);
    const int x_chunks = rows_in * cols_in * 32, buffer_chunks = x_chunks + TH * RH * TW * 32;
    chunk_t* const buffers = reinterpret_cast<chunk_t*>(staged);
    const int fd = blockIdx.z;
    const int col_tiles = (p.out[2] + TW - 1) / TW, row_tiles = (p.out[1] + TH * RH - 1) / (TH * RH);
    const int tiles = p.n * p.out[0] * row_tiles * col_tiles;
    // The source depth tile t meets through tap fd (outside x for some output depths).
    auto source_depth = [&](int t) { return t / (col_tiles * row_tiles) % p.out[0] * p.stride[0] + fd * p.dil[0] - p.pad[0]; };
    // This block's first tile from t on whose source depth lies inside x (tiles if none).
    auto live_from = [&](int t) {
        for (; t < tiles; t += gridDim.x) {
            const int sd = source_depth(t);
            if (sd >= 0 && sd < p.in[0]) return t;
        }
        return tiles;
    };
    auto stage_tile = [&](int t, chunk_t* buffer) {
        const int col0 = (t % col_tiles) * TW, row0 = (t / col_tiles % row_tiles) * (TH * RH);
        const int od = t / (col_tiles * row_tiles) % p.out[0], n = t / (col_tiles * row_tiles * p.out[0]);
        stage(x, p.xs, p.in, C, n, source_depth(t), row0 * sh - p.pad[1], col0 * sw - p.pad[2], rows_in, cols_in, buffer);
        stage(dy, p.ys, p.out, C, n, od, row0, col0, TH * RH, TW, buffer + x_chunks);
    };
#if TAP_ROWS
    const int fh = threadIdx.y;
    float acc[FW][CPT] = {};
#else
    float acc[FH][FW][CPT] = {};
#endif
    int tile = live_from(blockIdx.x);
    if (BUFFERS == 2 && tile < tiles) {
        stage_tile(tile, buffers);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int b = 0; tile < tiles; b ^= BUFFERS - 1) {
        const int next = live_from(tile + gridDim.x);
        if (BUFFERS == 1) stage_tile(tile, buffers);
        else if (next < tiles) stage_tile(next, buffers + (b ^ 1) * buffer_chunks);
        asm volatile("cp.async.commit_group;" ::: "memory");
        // This tile's copies have landed (with two buffers: all but the group just committed).
        asm volatile("cp.async.wait_group %0;" ::"n"(BUFFERS - 1) : "memory");
        __syncthreads();
        const chunk_t* x_tile = buffers + b * buffer_chunks;
        const chunk_t* dy_tile = x_tile + x_chunks;
        // Outside dy the staged values are zeros: they add nothing.
#if TAP_ROWS
        // Row r of dy meets source row r * sh + fh * dh; a row's source values, each loaded
        // once at dilation 1, serve every column and tap they meet.
        for (int r = 0; r < TH * RH; ++r) {
            const chunk_t* row = x_tile + (r * sh + fh * dh) * cols_in * 32 + threadIdx.x;
            float g[TW][CPT];
#pragma unroll
            for (int t = 0; t < TW; ++t) unpack(dy_tile[(r * TW + t) * 32 + threadIdx.x], g[t]);
#if UNIT
            float xs[(TW - 1) * SW + FW][CPT];
#pragma unroll
            for (int k = 0; k < (TW - 1) * SW + FW; ++k) unpack(row[k * 32], xs[k]);
#endif
#pragma unroll
            for (int t = 0; t < TW; ++t)
#pragma unroll
                for (int fw = 0; fw < FW; ++fw) {
#if UNIT
                    const float* xv = xs[t * SW + fw];
#else
                    float xv[CPT];
                    unpack(row[(t * sw + fw * dw) * 32], xv);
#endif
#pragma unroll
                    for (int v = 0; v < CPT; ++v) acc[fw][v] += xv[v] * g[t][v];
                }
        }
#else
        float g[RH][TW][CPT];
#pragma unroll
        for (int r = 0; r < RH; ++r)
#pragma unroll
            for (int t = 0; t < TW; ++t) unpack(dy_tile[((threadIdx.y * RH + r) * TW + t) * 32 + threadIdx.x], g[r][t]);
        for_each_product(x_tile, cols_in, sh, sw, dh, dw, [&](int r, int t, int fh, int fw, const float* xv) {
#pragma unroll
            for (int v = 0; v < CPT; ++v) acc[fh][fw][v] += xv[v] * g[r][t][v];
        });
#endif
        // The buffer is free for the next copies into it.
        __syncthreads();
        tile = next;
    }
#if TAP_ROWS
    // Each warp holds its own row of taps: no other warp's sums to meet.
    const int c = (blockIdx.y * 32 + threadIdx.x) * CPT;
#pragma unroll
    for (int fw = 0; fw < FW; ++fw)
#pragma unroll
        for (int v = 0; v < CPT; ++v)
            if (c + v < C) atomicAdd(&ws[((fd * FH + fh) * FW + fw) * C + c + v], acc[fw][v]);
#else
    float* sums = reinterpret_cast<float*>(buffers + BUFFERS * buffer_chunks);
    const int tid = threadIdx.y * 32 + threadIdx.x;
    constexpr int SUMS = FH * FW * 32 * CPT;
    for (int i = tid; i < SUMS; i += 32 * TH) sums[i] = 0.0f;
    __syncthreads();
#pragma unroll
    for (int fh = 0; fh < FH; ++fh)
#pragma unroll
        for (int fw = 0; fw < FW; ++fw)
#pragma unroll
            for (int v = 0; v < CPT; ++v) atomicAdd(&sums[((fh * FW + fw) * 32 + threadIdx.x) * CPT + v], acc[fh][fw][v]);
    __syncthreads();
    for (int i = tid; i < SUMS; i += 32 * TH) {
        const int tap = i / (32 * CPT), c = blockIdx.y * 32 * CPT + i % (32 * CPT);
        if (c < C) atomicAdd(&ws[(fd * FH * FW + tap) * C + c], sums[i]);
    }
#endif
}
