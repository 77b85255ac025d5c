#line 2 "igemm/geometry.cuh"
// cuda.igemm, geometry: which filter taps a tile row space uses, where they move the
// gathered operand, and pixel numbers decoded or advanced into coordinates.

// The taps of one tile row space. Forward and backward-weight use every tap; a backward-data
// phase only the taps f with (phase + pad - f * dil) divisible by the stride, which form an
// arithmetic progression per dimension.
struct Taps {
    int first[3], step[3], count[3];
};

__device__ __forceinline__ int gcd(int a, int b) {
    while (b) {
        const int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// Backward-data's stride along d as its phases see it: 1 in a build for unit strides (STRIDED 0),
// where the phase and tap arithmetic then folds away (dividing by strides of 1 made one-pixel
// layers' kernels 1.7x as long on the H100).
__device__ __forceinline__ int phase_stride(const ConvParams& p, int d) { return STRIDED ? p.stride[d] : 1; }

__device__ Taps taps_of(const ConvParams& p, const int* phase) {
    Taps t;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
#if DIR == 1 && STRIDED
        const int s = p.stride[d];
        const int step = s / gcd(s, p.dil[d]);
        int first = -1;
        for (int f = 0; f < step && f < p.fil[d]; ++f)
            if ((phase[d] + p.pad[d] - f * p.dil[d]) % s == 0) {
                first = f;
                break;
            }
        t.first[d] = first < 0 ? 0 : first;
        t.step[d] = step;
        t.count[d] = first < 0 ? 0 : (p.fil[d] - first + step - 1) / step;
#else
        t.first[d] = 0;
        t.step[d] = 1;
        t.count[d] = p.fil[d];
#endif
    }
    return t;
}

// Tap number -> filter coordinates.
__device__ __forceinline__ void tap_coords(const Taps& t, int tap, int* f) {
    f[2] = t.first[2] + (tap % t.count[2]) * t.step[2];
    tap /= t.count[2];
    f[1] = t.first[1] + (tap % t.count[1]) * t.step[1];
    f[0] = t.first[0] + (tap / t.count[1]) * t.step[0];
}

// How far a tap moves the gathered operand from a row's base coordinate: forward and
// backward-weight read x at o * s - pad + f * dil, a backward-data phase reads dy at
// q + (phase + pad - f * dil) / s (exact by the choice of taps).
__device__ __forceinline__ int tap_shift(const ConvParams& p, int d, int f, const int* phase) {
#if DIR == 1
    return (phase[d] + p.pad[d] - f * p.dil[d]) / phase_stride(p, d);
#else
    return f * p.dil[d] - p.pad[d];
#endif
}

// Pixel number -> (image, coordinates) over the given extents.
__device__ __forceinline__ int decode_pixel(int m, const int* ext, int* o) {
    o[2] = m % ext[2];
    m /= ext[2];
    o[1] = m % ext[1];
    m /= ext[1];
    o[0] = m % ext[0];
    return m / ext[0];
}

// A pixel number and its (image, coordinates), moved forward without dividing in the common
// case.
struct PixelCursor {
    int pix, img, o[3];

    __device__ __forceinline__ void start(int m, const int* ext) {
        pix = m;
        img = decode_pixel(m, ext, o);
    }

    __device__ __forceinline__ void advance(int by, const int* ext) {
        pix += by;
        o[2] += by;
        if (o[2] < ext[2]) return;
        int q = o[2] / ext[2];
        o[2] -= q * ext[2];
        o[1] += q;
        if (o[1] < ext[1]) return;
        q = o[1] / ext[1];
        o[1] -= q * ext[1];
        o[0] += q;
        if (o[0] < ext[0]) return;
        q = o[0] / ext[0];
        o[0] -= q * ext[0];
        img += q;
    }
};

// One block's GEMM (blockIdx.z = group x zdim slices): its group, its slice (a backward-data
// phase, or a backward-weight share of the pixel reduction), its first row and column, the
// taps and the row space it gathers, and its reduction iterations.
//
//   direction    GEMM M                 GEMM N          reduction K       A        B
//   forward      output pixels          Kg              taps x Cg         x        w
//   bwd-data     input pixels of phase  Cg              taps x Kg         dy       w
//   bwd-weight   Kg                     taps x Cg       output pixels     dy       x
struct Block {
    int group, z, m0, n0;
    int phase[3];
    Taps taps;
    int tap_count;
    int rows_ext[3];  // the gathered rows' extents (A for fwd/bwd-data, the reduction for bwd-weight)
    int pixels;
    int M, N;
    int KC;        // fwd/bwd-data: channels reduced per tap
    int iters;     // reduction tiles this block loads
    int it_begin;  // bwd-weight: the slice's first pixel tile
};

__device__ __forceinline__ Block block_of(const ConvParams& p, int zdim) {
    Block b;
    b.group = blockIdx.z / zdim;
    b.z = blockIdx.z % zdim;
    b.m0 = blockIdx.x * BM;
    b.n0 = blockIdx.y * BN;
    b.phase[0] = b.phase[1] = b.phase[2] = 0;
#if DIR == 1 && STRIDED
    {
        int r = b.z;
        b.phase[2] = r % p.stride[2];
        r /= p.stride[2];
        b.phase[1] = r % p.stride[1];
        b.phase[0] = r / p.stride[1];
    }
#endif
    b.taps = taps_of(p, b.phase);
    b.tap_count = b.taps.count[0] * b.taps.count[1] * b.taps.count[2];
#pragma unroll
    for (int d = 0; d < 3; ++d)
        b.rows_ext[d] = DIR == 1 ? (p.in[d] - b.phase[d] + phase_stride(p, d) - 1) / phase_stride(p, d) : p.out[d];
    b.pixels = p.n * b.rows_ext[0] * b.rows_ext[1] * b.rows_ext[2];
#if DIR == 2
    // Columns are (tap, c), c fastest: one dy tile serves every tap of the block's columns.
    b.M = p.kg;
    b.N = b.tap_count * p.cg;
    b.KC = 0;
    const int k_tiles = (b.pixels + BK - 1) / BK;
    const int per_slice = (k_tiles + zdim - 1) / zdim;
    b.it_begin = b.z * per_slice;
    b.iters = max(0, min(k_tiles, b.it_begin + per_slice) - b.it_begin);
#else
    b.M = b.pixels;
    b.N = DIR == 0 ? p.kg : p.cg;
    b.KC = DIR == 0 ? p.cg : p.kg;
    b.iters = b.tap_count * ((b.KC + BK - 1) / BK);
    b.it_begin = 0;
#endif
    return b;
}
