__device__ __forceinline__ int pair_first_row() { return threadIdx.x % 128 / 32 * 16 + threadIdx.x % 32 / 4; }

// store(row, column, v0, v1) for each pair of adjacent columns of the accumulators a thread
// holds, rows and columns within its warpgroup's 64 x BN. The layout of m64nN: warp w holds
// rows 16w + lane/4 and + 8; register 4j + {0, 1} columns 8j + 2 (lane % 4) + {0, 1} of the
// first row, + {2, 3} of the second.
template <class Store>
__device__ __forceinline__ void for_each_pair(const float* d, Store&& store) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) store(pair_first_row() + half_row * 8, j * 8 + (lane % 4) * 2, d[4 * j + 2 * half_row], d[4 * j + 2 * half_row + 1]);
    }
}

// Division by a divisor fixed for a kernel's run, as a multiply-high, an add and a shift
// (Granlund and Montgomery's method; exact for dividends below 2^31, as the kernels' indices
// are): a 32-bit division by a run-time value is some 20 dependent instructions.
struct FastDiv {
    int d;
    unsigned m, s;
};

__device__ __forceinline__ FastDiv fast_div(int d) {
    FastDiv f;
    f.d = d;
    f.s = 32 - __clz(d - 1);  // ceil(log2 d)
    // m = floor(2^32 (2^s - d) / d) + 1, by d's float reciprocal: one product, one more on its
    // remainder, then a step of one at most. No division: a 64-bit integer one is a subroutine
    // of some 300 cycles (five before a consumer's first MMA slowed 4-5 us 1x1 layers up to
    // 1.25x on the H100), and a double's reciprocal brings a slow path that ptxas compiles in
    // every build.
    const long long a = (long long)((1ull << f.s) - d) << 32;
    const float inv = 1.0f / d;
    long long q = (long long)((float)a * inv);
    q += (long long)((float)(a - q * d) * inv);
    const long long e = a - q * d;
    q += e < 0 ? -1 : e >= d ? 1 : 0;
    f.m = (unsigned)(q + 1);
    return f;
}

__device__ __forceinline__ int quotient(int n, const FastDiv& f) { return (__umulhi((unsigned)n, f.m) + (unsigned)n) >> f.s; }

// A destination pixel: its image n and position (d, h, w) in p.out.
struct PixelCursor {
    int n, o[3];
};

// The divisors that take a pixel index apart: an image's pixels, a plane's, a row's.
struct PixelDivs {
    FastDiv image, plane, row;
};

__device__ __forceinline__ PixelDivs pixel_divs(const ConvParams& p) {
    return {fast_div(p.out[0] * p.out[1] * p.out[2]), fast_div(p.out[1] * p.out[2]), fast_div(p.out[2])};
}

// Pixel `index` of all images' pixels.
__device__ __forceinline__ PixelCursor pixel_cursor(const PixelDivs& divs, int index) {
    PixelCursor c;
    c.n = quotient(index, divs.image);
    const int pixel = index - c.n * divs.image.d;
    c.o[0] = quotient(pixel, divs.plane);
    const int in_plane = pixel - c.o[0] * divs.plane.d;
    c.o[1] = quotient(in_plane, divs.row);
    c.o[2] = in_plane - c.o[1] * divs.row.d;
    return c;
}

// Moves c on by `step` pixels, given as pixel_cursor(divs, step): each part of the step
// is below its extent, so one carry per dimension, and no divisions. (A producer's divisions
// per block were most of its work: three 32-bit divisions, some 80 of a block's 127
// instructions in one thread, in the H100 SASS of backward-weight and forward.)
__device__ __forceinline__ void advance(PixelCursor& c, const PixelCursor& step, const ConvParams& p) {
    c.n += step.n;
#pragma unroll
    for (int i = 0; i < 3; ++i) c.o[i] += step.o[i];
    if (c.o[2] >= p.out[2]) {
        c.o[2] -= p.out[2];
        ++c.o[1];
    }
    if (c.o[1] >= p.out[1]) {
        c.o[1] -= p.out[1];
        ++c.o[0];
    }
    if (c.o[0] >= p.out[0]) {
        c.o[0] -= p.out[0];
        ++c.n;
    }
}

// Where the im2col window of the destination pixel at position o starts in the source: the
// position times the stride, less the pad.
__device__ __forceinline__ void window_at(const ConvParams& p, const int* o, int* pos) {
#pragma unroll
    for (int i = 0; i < 3; ++i) pos[i] = o[i] * p.stride[i] - p.pad[i];
}

__device__ __forceinline__ void tap_position(const ConvParams& p, int tap, int* f) {
    f[0] = tap / (p.fil[1] * p.fil[2]);
    f[1] = tap / p.fil[2] % p.fil[1];
    f[2] = tap % p.fil[2];
}

// The tap after f, the last dimension fastest (as tap_position numbers them).
__device__ __forceinline__ void next_tap(const ConvParams& p, int* f) {
    if (++f[2] < p.fil[2]) return;
    f[2] = 0;
    if (++f[1] < p.fil[1]) return;
    f[1] = 0;
    ++f[0];
}

// The im2col offsets of a tap: its position times the dilation.
__device__ __forceinline__ void tap_offsets(const ConvParams& p, const int* f, unsigned short* off) {
#pragma unroll
    for (int i = 0; i < 3; ++i) off[i] = (unsigned short)(f[i] * p.dil[i]);
}

// Registers per thread of each warpgroup: a block starts with ptxas's count for every thread
// (168 at 384 threads), and the consumers can take only what the producer gives up (a
// setmaxnreg.inc beyond that waits forever): 2 x (208 - 168) <= 168 - 80 where the producer's
// warpgroup transposes (ptxas spilled its transposition at 72) and two consumers multiply.
// FILL_FILTER's helpers take as many as the consumers leave (ptxas spilled 4-28 bytes of them
// at 64).
#if TRANSPOSE
#define PRODUCER_REGISTERS 80
#elif FILL_FILTER && CONSUMERS == 2
#define PRODUCER_REGISTERS 72
#elif FILL_FILTER
#define PRODUCER_REGISTERS 80
#else
#define PRODUCER_REGISTERS 40
#endif
#if TRANSPOSE && CONSUMERS == 2
#define CONSUMER_REGISTERS 208
#elif FILL_FILTER && CONSUMERS == 2
#define CONSUMER_REGISTERS 216
#else
#define CONSUMER_REGISTERS 232
#endif

// The producer warpgroup gives up registers to the consumers; one elected thread stays on (true
// for it), and (TRANSPOSE) warps 1 to 3 transpose.
