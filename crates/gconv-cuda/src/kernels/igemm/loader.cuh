#line 2 "igemm/loader.cuh"
// cuda.igemm, loader: each thread's share of a block's A and B tiles, decoded once before the
// main loop, and the copy of the next reduction tile into a pipeline stage. Tiles are loaded
// in order, so the loader advances by one tile per load. A reduction tile never straddles two
// taps, so edges are one predicate per copied chunk, computed outside the math loop.

#define A_ROW_CHUNKS ((A_KMAJOR ? BK : BM) / CPW_A)
#define A_TILE_CHUNKS (BM * BK / CPW_A)
#define A_CHUNKS ((A_TILE_CHUNKS + THREADS - 1) / THREADS)
#define B_ROW_CHUNKS ((B_KMAJOR ? BK : BN) / CPW_B)
#define B_TILE_CHUNKS (BN * BK / CPW_B)
#define B_CHUNKS ((B_TILE_CHUNKS + THREADS - 1) / THREADS)

#if DIR != 2
#if DIR == 1
#define SRC_EXT(d) p.out[d]
#define SRC_S(i) p.ys[i]
#else
#define SRC_EXT(d) p.in[d]
#define SRC_S(i) p.xs[i]
#endif

// Forward and backward-data: A gathers pixel rows of the source (x or dy) at each tap, B reads
// the weights. The reduction runs over (tap, channel chunk).
struct Loader {
    // Each A chunk keeps its row's source offset at tap shift 0 and, per dimension, which tap
    // indices land inside the source: bit j of field d (TAP_BITS wide) is tap j along d.
    // Rows past M get no bits, so a copy is valid when the chunk's mask holds the tap's probe.
    int a_off[A_CHUNKS];
    tapmask_t a_mask[A_CHUNKS];
    // B (weights) chunks: offsets at tap 0 and reduction chunk 0.
    int b_off[B_CHUNKS];
    bool b_in[B_CHUNKS];
    // The next tile: tap indices along each dimension and the first reduced channel.
    int next_tap[3], next_k0;

    __device__ __forceinline__ void start(const ConvParams& p, const Block& blk, int tid) {
        const int a_chan = blk.group * (DIR == 0 ? p.cg : p.kg);
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            const int m = blk.m0 + q / A_ROW_CHUNKS;
            a_off[i] = 0;
            a_mask[i] = 0;
            if (q < A_TILE_CHUNKS && m < blk.M) {
                int o[3];
                const int img = decode_pixel(m, blk.rows_ext, o);
                int off = img * SRC_S(0) + a_chan + (q % A_ROW_CHUNKS) * CPW_A;
                tapmask_t mask = 0;
#pragma unroll
                for (int d = 0; d < 3; ++d) {
                    const int base = DIR == 1 ? o[d] : o[d] * p.stride[d];
                    off += base * SRC_S(2 + d);
                    for (int j = 0; j < blk.taps.count[d]; ++j) {
                        const int c = base + tap_shift(p, d, blk.taps.first[d] + j * blk.taps.step[d], blk.phase);
                        if (c >= 0 && c < SRC_EXT(d)) mask |= (tapmask_t)1 << (d * TAP_BITS + j);
                    }
                }
                a_off[i] = off;
                a_mask[i] = mask;
            }
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            const int row = q / B_ROW_CHUNKS, col = (q % B_ROW_CHUNKS) * CPW_B;
#if DIR == 0
            // w[g*Kg + n][tap][c]: rows are output channels.
            b_in[i] = q < B_TILE_CHUNKS && blk.n0 + row < blk.N;
            b_off[i] = (blk.group * p.kg + blk.n0 + row) * p.ws[0] + col;
#else
            // w[g*Kg + k][tap][n0 + col]: rows are output channels (the reduction).
            b_in[i] = q < B_TILE_CHUNKS && blk.n0 + col < blk.N;
            b_off[i] = (blk.group * p.kg + row) * p.ws[0] + blk.n0 + col;
#endif
        }
        next_tap[0] = next_tap[1] = next_tap[2] = 0;
        next_k0 = 0;
    }

    __device__ __forceinline__ void load(const ConvParams& p, const Block& blk, const elem_t* a_src, const elem_t* b_src,
                                         elem_t* as, elem_t* bs, int tid) {
        const int k0 = next_k0;
        int shift = 0, wtap = 0;
        tapmask_t probe = 0;
#pragma unroll
        for (int d = 0; d < 3; ++d) {
            const int f = blk.taps.first[d] + next_tap[d] * blk.taps.step[d];
            shift += tap_shift(p, d, f, blk.phase) * SRC_S(2 + d);
            wtap += f * p.ws[2 + d];
            probe |= (tapmask_t)1 << (d * TAP_BITS + next_tap[d]);
        }
        next_k0 += BK;
        if (next_k0 >= blk.KC) {
            next_k0 = 0;
            if (++next_tap[2] == blk.taps.count[2]) {
                next_tap[2] = 0;
                if (++next_tap[1] == blk.taps.count[1]) {
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
            const bool valid = (a_mask[i] & probe) == probe && k0 + col < blk.KC;
            copy_chunk<CPW_A>(as + row * A_LD + col, a_src + (valid ? a_off[i] + shift + k0 : 0), valid);
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            if (q >= B_TILE_CHUNKS) break;
            const int row = q / B_ROW_CHUNKS, col = (q % B_ROW_CHUNKS) * CPW_B;
#if DIR == 0
            const bool valid = b_in[i] && k0 + col < blk.KC;
            const int off = b_off[i] + k0 + wtap;
#else
            const bool valid = b_in[i] && k0 + row < blk.KC;
            const int off = b_off[i] + k0 * p.ws[0] + wtap;
#endif
            copy_chunk<CPW_B>(bs + row * B_LD + col, b_src + (valid ? off : 0), valid);
        }
    }
};
#else
// Backward-weight: A reads dy over the slice's pixels, B gathers x at each column's tap. The
// reduction runs over pixel tiles.
struct Loader {
    PixelCursor a_rows[A_CHUNKS], b_rows[B_CHUNKS];
    // Each B chunk keeps one column range for the whole loop: its channel and tap shift.
    int b_chan[B_CHUNKS], b_shift[B_CHUNKS][3];

    __device__ __forceinline__ void start(const ConvParams& p, const Block& blk, int tid) {
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) a_rows[i].start(blk.it_begin * BK + (tid + i * THREADS) / A_ROW_CHUNKS, blk.rows_ext);
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) b_rows[i].start(blk.it_begin * BK + (tid + i * THREADS) / B_ROW_CHUNKS, blk.rows_ext);
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int j = blk.n0 + ((tid + i * THREADS) % B_ROW_CHUNKS) * CPW_B;
            b_chan[i] = j < blk.N ? blk.group * p.cg + j % p.cg : -1;
            int f[3];
            tap_coords(blk.taps, min(j, blk.N - 1) / p.cg, f);
#pragma unroll
            for (int d = 0; d < 3; ++d) b_shift[i][d] = tap_shift(p, d, f[d], blk.phase);
        }
    }

    __device__ __forceinline__ void load(const ConvParams& p, const Block& blk, const elem_t* a_src, const elem_t* b_src,
                                         elem_t* as, elem_t* bs, int tid) {
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            if (q >= A_TILE_CHUNKS) break;
            const int row = q / A_ROW_CHUNKS, col = (q % A_ROW_CHUNKS) * CPW_A;
            // dy[pixel][g*Kg + m0 + col]
            PixelCursor& c = a_rows[i];
            const bool valid = c.pix < blk.pixels && blk.m0 + col < blk.M;
            const int off = c.img * p.ys[0] + c.o[0] * p.ys[2] + c.o[1] * p.ys[3] + c.o[2] * p.ys[4] + blk.group * p.kg + blk.m0 + col;
            copy_chunk<CPW_A>(as + row * A_LD + col, a_src + (valid ? off : 0), valid);
            c.advance(BK, blk.rows_ext);
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int q = tid + i * THREADS;
            if (q >= B_TILE_CHUNKS) break;
            const int row = q / B_ROW_CHUNKS, col = (q % B_ROW_CHUNKS) * CPW_B;
            // x[input position of the pixel at the column's tap][g*Cg + the column's c]
            PixelCursor& c = b_rows[i];
            bool valid = c.pix < blk.pixels && b_chan[i] >= 0;
            int off = c.img * p.xs[0] + b_chan[i];
#pragma unroll
            for (int d = 0; d < 3; ++d) {
                const int x = c.o[d] * p.stride[d] + b_shift[i][d];
                valid = valid && x >= 0 && x < p.in[d];
                off += x * p.xs[2 + d];
            }
            copy_chunk<CPW_B>(bs + row * B_LD + col, b_src + (valid ? off : 0), valid);
            c.advance(BK, blk.rows_ext);
        }
    }
};
#endif
