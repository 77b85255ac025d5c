// cuda.gemm_blas: around its cuBLAS GEMMs, the explicit path's channels-last im2col and
// col2im, the sum of NCHW backward-weight's per-image fp32 partials into dW (sum_images), and
// copies of NCHW pixel rows to and from a padded pitch (pitch_rows). The
// column matrix has one row per output pixel (n, od, oh, ow) and, per row, G blocks of
// taps x Cg values: [pixel][g][fd][fh][fw][c]. Group g's block is then the A (or B) operand of
// a strided-batched GEMM with the weights' [k][fd][fh][fw][c] rows, exactly as a 1x1
// convolution uses x. Compile-time: VEC, channels per thread (Cg is a multiple of it).

#ifndef VEC
#define VEC 1
#endif

struct __align__(sizeof(elem_t) * VEC) vec_t {
    elem_t v[VEC];
};

// Forward and backward-weight: col[pixel][g][tap][c] = x at the pixel's input position for the
// tap, or 0 in the padding. A warp fills whole rows, its lanes 32 vectors apart: each lane keeps
// its place in the row as mixed-radix digits (channel vector, fw, fh, fd, g) and adds 32 in that
// radix per step, so no element pays for a division (they made this kernel ALU-bound).
extern "C" __global__ void im2col(ConvParams p, const elem_t* x, elem_t* col) {
    const int radix[5] = {p.cg / VEC, p.fil[2], p.fil[1], p.fil[0], p.g};
    const int row = radix[0] * radix[1] * radix[2] * radix[3] * radix[4];
    const int lane = threadIdx.x % 32;
    int start[5], step[5];
    {
        int at = lane, by = 32;
#pragma unroll
        for (int d = 0; d < 5; ++d) {
            start[d] = at % radix[d];
            at /= radix[d];
            step[d] = by % radix[d];
            by /= radix[d];
        }
    }
    const int per_image = p.out[0] * p.out[1] * p.out[2];
    const long long pixels = (long long)p.n * per_image;
    const int warps_per_block = blockDim.x / 32;
    for (long long pix = (long long)blockIdx.x * warps_per_block + threadIdx.x / 32; pix < pixels;
         pix += (long long)gridDim.x * warps_per_block) {
        const int n = (int)(pix / per_image);
        int o = (int)(pix - (long long)n * per_image);
        const int ow = o % p.out[2];
        o /= p.out[2];
        const int oh = o % p.out[1];
        const int od = o / p.out[1];
        const int bd = od * p.stride[0] - p.pad[0], bh = oh * p.stride[1] - p.pad[1], bw = ow * p.stride[2] - p.pad[2];
        vec_t* dst = reinterpret_cast<vec_t*>(col) + pix * row;
        int digit[5];
#pragma unroll
        for (int d = 0; d < 5; ++d) digit[d] = start[d];
        for (int j = lane; j < row; j += 32) {
            const int id = bd + digit[3] * p.dil[0], ih = bh + digit[2] * p.dil[1], iw = bw + digit[1] * p.dil[2];
            vec_t v;
            if (id >= 0 && id < p.in[0] && ih >= 0 && ih < p.in[1] && iw >= 0 && iw < p.in[2]) {
                v = *reinterpret_cast<const vec_t*>(x + offset(p.xs, n, digit[4] * p.cg + digit[0] * VEC, id, ih, iw));
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) v.v[i] = from_f32(0.0f);
            }
            dst[j] = v;
            int carry = 0;
#pragma unroll
            for (int d = 0; d < 5; ++d) {
                digit[d] += step[d] + carry;
                carry = digit[d] >= radix[d];
                if (carry) digit[d] -= radix[d];
            }
        }
    }
}

// Backward-data: dx[n][id][ih][iw][g*Cg + c] = sum over the taps that read it of the fp32
// column values the GEMM wrote for (output pixel, g, tap, c); rounded once.
extern "C" __global__ void col2im(ConvParams p, const float* col, elem_t* dx) {
    const int lanes = p.cg / VEC;
    const int taps = p.fil[0] * p.fil[1] * p.fil[2];
    const long long total = (long long)p.n * p.in[0] * p.in[1] * p.in[2] * p.g * lanes;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx;
        const int c = (int)(r % lanes) * VEC; r /= lanes;
        const int g = (int)(r % p.g); r /= p.g;
        const int iw = (int)(r % p.in[2]); r /= p.in[2];
        const int ih = (int)(r % p.in[1]); r /= p.in[1];
        const int id = (int)(r % p.in[0]);
        const int n = (int)(r / p.in[0]);
        float acc[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
        for (int fd = 0; fd < p.fil[0]; ++fd) {
            const int od = src_coord(id, fd, p.stride[0], p.pad[0], p.dil[0], p.out[0], true);
            if (od < 0) continue;
            for (int fh = 0; fh < p.fil[1]; ++fh) {
                const int oh = src_coord(ih, fh, p.stride[1], p.pad[1], p.dil[1], p.out[1], true);
                if (oh < 0) continue;
                for (int fw = 0; fw < p.fil[2]; ++fw) {
                    const int ow = src_coord(iw, fw, p.stride[2], p.pad[2], p.dil[2], p.out[2], true);
                    if (ow < 0) continue;
                    const long long pixel = (((long long)n * p.out[0] + od) * p.out[1] + oh) * p.out[2] + ow;
                    const int tap = (fd * p.fil[1] + fh) * p.fil[2] + fw;
                    const float* src = col + ((pixel * p.g + g) * taps + tap) * p.cg + c;
#pragma unroll
                    for (int i = 0; i < VEC; ++i) acc[i] += src[i];
                }
            }
        }
        vec_t v;
#pragma unroll
        for (int i = 0; i < VEC; ++i) v.v[i] = from_f32(acc[i]);
        *reinterpret_cast<vec_t*>(dx + offset(p.xs, n, g * p.cg + c, id, ih, iw)) = v;
    }
}

// NCHW backward-weight over several images: a batched GEMM writes each (image, group) product
// of a chunk of `images` images as an fp32 partial dW of the weights' own layout [k][c][taps],
// one image's after another. This adds them to the running sum (started by the first chunk)
// and, after the last chunk, rounds each weight to elem_t once.
extern "C" __global__ void sum_images(ConvParams p, const float* partials, float* sum, elem_t* dw, int images,
                                      int first, int last) {
    const long long total = (long long)p.g * p.kg * p.cg * p.fil[0] * p.fil[1] * p.fil[2];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float s = first ? 0.0f : sum[i];
        for (int image = 0; image < images; ++image) s += partials[image * total + i];
        if (last) {
            dw[i] = from_f32(s);
        } else {
            sum[i] = s;
        }
    }
}

// `rows` rows of `width` elements from rows `from_ld` apart to rows `to_ld` apart: channels-first
// pixel rows into a copy padded so cuBLAS's operands are 16-byte aligned, or back out of one.
// The padding is neither written nor read.
extern "C" __global__ void pitch_rows(ConvParams p, const elem_t* from, elem_t* to, int rows, int width, int from_ld,
                                      int to_ld) {
    const long long total = (long long)rows * width;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / width;
        const long long at = i - row * width;
        to[row * to_ld + at] = from[row * from_ld + at];
    }
}
