#line 2 "igemm/kernel.cu"
// cuda.igemm_tc and cuda.igemm_simt: implicit GEMM for channels-last tensors, one GEMM per
// group (blockIdx.z), tiles staged through shared memory by a cp.async pipeline. The kernel
// (loader set-up and tile loads, main loop, epilogue) comes after its pieces, in this order:
// layout.cuh, pipeline.cuh, geometry.cuh, math.cuh, epilogue.cuh (igemm/mod.rs joins them).
//
//   direction    GEMM M                 GEMM N          reduction K       A        B
//   forward      output pixels          Kg              taps x Cg         x        w
//   bwd-data     input pixels of phase  Cg              taps x Kg         dy       w
//   bwd-weight   Kg                     taps x Cg       output pixels     dy       x
//
// Backward-data with stride s is split into s^rank phases (sub-pixel decomposition): the input
// pixels of one phase are read by the same taps, so taps that read nothing are skipped whole
// and no row needs a divisibility test. Backward-weight splits the pixel reduction into
// `zdim` slices that add into an fp32 workspace (atomics) or write one slice each (two-stage).
// A reduction tile never straddles two taps, so edges are one predicate per copied chunk,
// computed outside the math loop.
//
// Compile-time: DIR (0 fwd, 1 bwd-data, 2 bwd-weight), BM, BN, BK (block tile), THREADS,
// STAGES (pipeline depth), CPW_A and CPW_B (elements per global->shared copy of each operand:
// 16, 8 or 4 bytes by cp.async, 2 bytes by plain loads), TC (1: mma.sync with fp32 accumulation, m16n8k16 on 16-bit
// types or m16n8k8 on TF32-rounded fp32 (GCONV_TF32), with WARPS_M x WARPS_N warps; 0: fp32
// FMA, an 8x8 outer product per thread), OUT_MODE (see Output), TAP_BITS (tap-mask bits per
// dimension) and MIN_BLOCKS (blocks per SM the registers are budgeted for).

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
    igemm(ConvParams p, const elem_t* a_src, const elem_t* b_src, elem_t* out, float* ws, int zdim) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    elem_t* const a_smem = reinterpret_cast<elem_t*>(smem_raw);
    elem_t* const b_smem = a_smem + STAGES * A_STAGE;
    const int tid = threadIdx.x;
    const int group = blockIdx.z / zdim;
    const int z = blockIdx.z % zdim;
    const int m0 = blockIdx.x * BM;

    int phase[3] = {0, 0, 0};
#if DIR == 1
    {
        int r = z;
        phase[2] = r % p.stride[2];
        r /= p.stride[2];
        phase[1] = r % p.stride[1];
        phase[0] = r / p.stride[1];
    }
#endif
    const Taps taps = taps_of(p, phase);
    const int tap_count = taps.count[0] * taps.count[1] * taps.count[2];

    // Row space of the gathered rows (A for fwd/bwd-data, the reduction for bwd-weight).
    int rows_ext[3];
#pragma unroll
    for (int d = 0; d < 3; ++d)
        rows_ext[d] = DIR == 1 ? (p.in[d] - phase[d] + p.stride[d] - 1) / p.stride[d] : p.out[d];
    const int pixels = p.n * rows_ext[0] * rows_ext[1] * rows_ext[2];

#if DIR == 0
    const int M = pixels, N = p.kg, KC = p.cg;  // KC: channels reduced per tap
    const int n0 = blockIdx.y * BN;
    const int a_chan = group * p.cg;
#elif DIR == 1
    const int M = pixels, N = p.cg, KC = p.kg;
    const int n0 = blockIdx.y * BN;
    const int a_chan = group * p.kg;
#else
    // Columns are (tap, c), c fastest: one dy tile serves every tap of the block's columns.
    const int M = p.kg, N = tap_count * p.cg;
    const int n0 = blockIdx.y * BN;
#endif
    if (m0 >= M) return;

    // Reduction iterations: (tap, channel chunk) for fwd/bwd-data, pixel tiles of the
    // block's slice for bwd-weight.
#if DIR == 2
    const int k_tiles = (pixels + BK - 1) / BK;
    const int per_slice = (k_tiles + zdim - 1) / zdim;
    const int it_begin = z * per_slice;
    const int iters = max(0, min(k_tiles, it_begin + per_slice) - it_begin);
#else
    const int iters = tap_count * ((KC + BK - 1) / BK);
#endif

    // Gathered A rows (fwd/bwd-data) are fixed for the whole loop: decode them once.
#define A_ROW_CHUNKS ((A_KMAJOR ? BK : BM) / CPW_A)
#define A_TILE_CHUNKS (BM * BK / CPW_A)
#define A_CHUNKS ((A_TILE_CHUNKS + THREADS - 1) / THREADS)
#define B_ROW_CHUNKS ((B_KMAJOR ? BK : BN) / CPW_B)
#define B_TILE_CHUNKS (BN * BK / CPW_B)
#define B_CHUNKS ((B_TILE_CHUNKS + THREADS - 1) / THREADS)
#if DIR == 1
#define SRC_EXT(d) p.out[d]
#define SRC_S(i) p.ys[i]
#else
#define SRC_EXT(d) p.in[d]
#define SRC_S(i) p.xs[i]
#endif
#if DIR != 2
    // Each A chunk keeps its row's source offset at tap shift 0 and, per dimension, which tap
    // indices land inside the source: bit j of field d (TAP_BITS wide) is tap j along d.
    // Rows past M get no bits, so a copy is valid when the chunk's mask holds the tap's probe.
    int a_off[A_CHUNKS];
    tapmask_t a_mask[A_CHUNKS];
#pragma unroll
    for (int i = 0; i < A_CHUNKS; ++i) {
        const int q = tid + i * THREADS;
        const int m = m0 + q / A_ROW_CHUNKS;
        a_off[i] = 0;
        a_mask[i] = 0;
        if (q < A_TILE_CHUNKS && m < M) {
            int o[3];
            const int img = decode_pixel(m, rows_ext, o);
            int off = img * SRC_S(0) + a_chan + (q % A_ROW_CHUNKS) * CPW_A;
            tapmask_t mask = 0;
#pragma unroll
            for (int d = 0; d < 3; ++d) {
                const int base = DIR == 1 ? o[d] : o[d] * p.stride[d];
                off += base * SRC_S(2 + d);
                for (int j = 0; j < taps.count[d]; ++j) {
                    const int c = base + tap_shift(p, d, taps.first[d] + j * taps.step[d], phase);
                    if (c >= 0 && c < SRC_EXT(d)) mask |= (tapmask_t)1 << (d * TAP_BITS + j);
                }
            }
            a_off[i] = off;
            a_mask[i] = mask;
        }
    }
    // B (weights) chunks: offsets at tap 0 and reduction chunk 0.
    int b_off[B_CHUNKS];
    bool b_in[B_CHUNKS];
#pragma unroll
    for (int i = 0; i < B_CHUNKS; ++i) {
        const int q = tid + i * THREADS;
        const int row = q / B_ROW_CHUNKS, col = (q % B_ROW_CHUNKS) * CPW_B;
#if DIR == 0
        // w[g*Kg + n][tap][c]: rows are output channels.
        b_in[i] = q < B_TILE_CHUNKS && n0 + row < N;
        b_off[i] = (group * p.kg + n0 + row) * p.ws[0] + col;
#else
        // w[g*Kg + k][tap][n0 + col]: rows are output channels (the reduction).
        b_in[i] = q < B_TILE_CHUNKS && n0 + col < N;
        b_off[i] = (group * p.kg + row) * p.ws[0] + n0 + col;
#endif
    }
    // The next tile to load: tap indices along each dimension and the first reduced channel.
    // Tiles are loaded in order, so they advance by one step per load.
    int next_tap[3] = {0, 0, 0}, next_k0 = 0;
#else
    PixelCursor a_rows[A_CHUNKS], b_rows[B_CHUNKS];
#pragma unroll
    for (int i = 0; i < A_CHUNKS; ++i) a_rows[i].start(it_begin * BK + (tid + i * THREADS) / A_ROW_CHUNKS, rows_ext);
#pragma unroll
    for (int i = 0; i < B_CHUNKS; ++i) b_rows[i].start(it_begin * BK + (tid + i * THREADS) / B_ROW_CHUNKS, rows_ext);
    // Each B chunk keeps one column range for the whole loop: its channel and tap shift.
    int b_chan[B_CHUNKS], b_shift[B_CHUNKS][3];
#pragma unroll
    for (int i = 0; i < B_CHUNKS; ++i) {
        const int j = n0 + ((tid + i * THREADS) % B_ROW_CHUNKS) * CPW_B;
        b_chan[i] = j < N ? group * p.cg + j % p.cg : -1;
        int f[3];
        tap_coords(taps, min(j, N - 1) / p.cg, f);
#pragma unroll
        for (int d = 0; d < 3; ++d) b_shift[i][d] = tap_shift(p, d, f[d], phase);
    }
#endif

    auto load_tile = [&](int stage) {
        elem_t* as = a_smem + stage * A_STAGE;
        elem_t* bs = b_smem + stage * B_STAGE;
#if DIR != 2
        const int k0 = next_k0;
        int shift = 0, wtap = 0;
        tapmask_t probe = 0;
#pragma unroll
        for (int d = 0; d < 3; ++d) {
            const int f = taps.first[d] + next_tap[d] * taps.step[d];
            shift += tap_shift(p, d, f, phase) * SRC_S(2 + d);
            wtap += f * p.ws[2 + d];
            probe |= (tapmask_t)1 << (d * TAP_BITS + next_tap[d]);
        }
        next_k0 += BK;
        if (next_k0 >= KC) {
            next_k0 = 0;
            if (++next_tap[2] == taps.count[2]) {
                next_tap[2] = 0;
                if (++next_tap[1] == taps.count[1]) {
                    next_tap[1] = 0;
                    ++next_tap[0];
                }
            }
        }
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            if (q >= A_TILE_CHUNKS) break;
            const int row = q / A_ROW_CHUNKS, col = (q % A_ROW_CHUNKS) * CPW_A;
            const bool valid = (a_mask[i] & probe) == probe && k0 + col < KC;
            copy_chunk<CPW_A>(as + row * A_LD + col, a_src + (valid ? a_off[i] + shift + k0 : 0), valid);
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            if (q >= B_TILE_CHUNKS) break;
            const int row = q / B_ROW_CHUNKS, col = (q % B_ROW_CHUNKS) * CPW_B;
#if DIR == 0
            const bool valid = b_in[i] && k0 + col < KC;
            const int off = b_off[i] + k0 + wtap;
#else
            const bool valid = b_in[i] && k0 + row < KC;
            const int off = b_off[i] + k0 * p.ws[0] + wtap;
#endif
            copy_chunk<CPW_B>(bs + row * B_LD + col, b_src + (valid ? off : 0), valid);
        }
#else
        // Tiles are loaded in order, so each chunk's pixel moves on by BK per call.
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            if (q >= A_TILE_CHUNKS) break;
            const int row = q / A_ROW_CHUNKS, col = (q % A_ROW_CHUNKS) * CPW_A;
            // dy[pixel][g*Kg + m0 + col]
            PixelCursor& c = a_rows[i];
            const bool valid = c.pix < pixels && m0 + col < M;
            const int off = c.img * p.ys[0] + c.o[0] * p.ys[2] + c.o[1] * p.ys[3] + c.o[2] * p.ys[4] + group * p.kg + m0 + col;
            copy_chunk<CPW_A>(as + row * A_LD + col, a_src + (valid ? off : 0), valid);
            c.advance(BK, rows_ext);
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            if (q >= B_TILE_CHUNKS) break;
            const int row = q / B_ROW_CHUNKS, col = (q % B_ROW_CHUNKS) * CPW_B;
            // x[input position of the pixel at the column's tap][g*Cg + the column's c]
            PixelCursor& c = b_rows[i];
            bool valid = c.pix < pixels && b_chan[i] >= 0;
            int off = c.img * p.xs[0] + b_chan[i];
#pragma unroll
            for (int d = 0; d < 3; ++d) {
                const int x = c.o[d] * p.stride[d] + b_shift[i][d];
                valid = valid && x >= 0 && x < p.in[d];
                off += x * p.xs[2 + d];
            }
            copy_chunk<CPW_B>(bs + row * B_LD + col, b_src + (valid ? off : 0), valid);
            c.advance(BK, rows_ext);
        }
#endif
    };

    float acc[ACC_I][ACC_J][ACC_E];
#pragma unroll
    for (int i = 0; i < ACC_I; ++i)
#pragma unroll
        for (int j = 0; j < ACC_J; ++j)
#pragma unroll
            for (int e = 0; e < ACC_E; ++e) acc[i][j][e] = 0.0f;

#if TC
    const int lane = tid % 32, warp = tid / 32;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
#else
    const int tx = tid % TX, ty = tid / TX;
#endif

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < iters) load_tile(s);
        commit();
    }
    for (int it = 0; it < iters; ++it) {
        wait_pending<STAGES - 2>();
        __syncthreads();
        // The stage refilled here was read in the previous iteration, which every warp has
        // finished by the barrier above.
        if (it + STAGES - 1 < iters) load_tile((it + STAGES - 1) % STAGES);
        commit();
        const elem_t* as = a_smem + (it % STAGES) * A_STAGE;
        const elem_t* bs = b_smem + (it % STAGES) * B_STAGE;
#if TC
#pragma unroll
        for (int kk = 0; kk < BK; kk += MMA_K) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) load_a(af[mi], as, wm * WM + mi * 16, kk, lane);
#pragma unroll
            for (int nj = 0; nj < NI / 2; ++nj) {
                unsigned r[4];
                load_b_pair(r, bs, wn * WN + nj * 16, kk, lane);
                bf[2 * nj][0] = r[0];
                bf[2 * nj][1] = r[1];
                bf[2 * nj + 1][0] = r[2];
                bf[2 * nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < NI; ++ni) mma(acc[mi][ni], af[mi], bf[ni]);
        }
#else
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[8], b[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) a[i] = to_f32(A_KMAJOR ? as[(ty + i * TY) * A_LD + k] : as[k * A_LD + ty + i * TY]);
#pragma unroll
            for (int j = 0; j < 8; ++j) b[j] = to_f32(B_KMAJOR ? bs[(tx + j * TX) * B_LD + k] : bs[k * B_LD + tx + j * TX]);
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j][0] += a[i] * b[j];
        }
#endif
    }
    wait_pending<0>();

    // Epilogue: each accumulator to its place, straight from registers.
    Output o;
    o.out = out;
    o.ws = ws;
    o.slice = (long long)z * p.g * p.kg * p.ws[0];
    o.col_start = n0;
    o.col_limit = N;
#if DIR == 0
    o.col_base = group * p.kg + n0;
#elif DIR == 1
    o.col_base = group * p.cg + n0;
#else
    o.col_base = n0;  // dw[k][tap][c] is contiguous over (tap, c) in channels-last
#endif
    auto row_offset = [&](int m) {
#if DIR == 2
        return (group * p.kg + m) * p.ws[0];
#else
        int c[3];
        const int img = decode_pixel(m, rows_ext, c);
        int off = 0;
#pragma unroll
        for (int d = 0; d < 3; ++d) {
#if DIR == 1
            off += (phase[d] + c[d] * p.stride[d]) * p.xs[2 + d];
#else
            off += c[d] * p.ys[2 + d];
#endif
        }
        return off + img * (DIR == 1 ? p.xs[0] : p.ys[0]);
#endif
    };
#if TC
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm * WM + mi * 16 + lane / 4 + h * 8;
            if (m >= M) continue;
            const int roff = row_offset(m);
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int col = wn * WN + ni * 8 + (lane % 4) * 2;
                const float v0 = acc[mi][ni][h * 2], v1 = acc[mi][ni][h * 2 + 1];
                const int off = roff + o.col_base + col;
                if (OUT_MODE == 0 && o.col_start + col + 1 < o.col_limit && off % 2 == 0) {
                    store_pair(out + off, v0, v1);
                } else {
                    if (o.col_start + col < o.col_limit) emit(o, off, v0);
                    if (o.col_start + col + 1 < o.col_limit) emit(o, off + 1, v1);
                }
            }
        }
#else
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + ty + i * TY;
        if (m >= M) continue;
        const int roff = row_offset(m);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int col = tx + j * TX;
            if (o.col_start + col < o.col_limit) emit(o, roff + o.col_base + col, acc[i][j][0]);
        }
    }
#endif
}

// Sums `slices` fp32 partial results of dw and rounds once into dw.
extern "C" __global__ void igemm_reduce(const float* ws, int slices, int count, elem_t* dw) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < slices; ++k) s += ws[(long long)k * count + i];
        dw[i] = from_f32(s);
    }
}
