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

__device__ Taps taps_of(const ConvParams& p, const int* phase) {
    Taps t;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
#if DIR == 1
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
    return (phase[d] + p.pad[d] - f * p.dil[d]) / p.stride[d];
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
