// cuda.depthwise: G = C = K, one filter per channel. Compile-time: FH, FW (filter height and
// width; depth stays a run-time loop), VEC (channels per thread, NHWC only: one 4- to
// 16-byte load per tap), TW (output columns per thread, which share the weights held in
// registers) and GCONV_NHWC (layout). Sizes, strides, pads and dilations are run-time.

#ifndef VEC
#define VEC 1
#endif
#ifndef TW
#define TW 1
#endif

struct __align__(sizeof(elem_t) * VEC) vec_t {
    elem_t v[VEC];
};

__device__ __forceinline__ void load_vec(const elem_t* p, float* out) {
    const vec_t v = *reinterpret_cast<const vec_t*>(p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_f32(v.v[i]);
}

__device__ __forceinline__ void store_vec(elem_t* p, const float* in) {
    vec_t v;
#pragma unroll
    for (int i = 0; i < VEC; ++i) v.v[i] = from_f32(in[i]);
    *reinterpret_cast<vec_t*>(p) = v;
}

// Forward and backward-data share one shape: every destination
// element is a sum over taps of source elements times the channel's weights. Forward reads x
// at input positions of output positions; backward-data reads dy at the output positions
// (if any) that read each input position.
template <bool BACKWARD>
__device__ __forceinline__ void gather(const ConvParams& p, const elem_t* src, const elem_t* w, elem_t* dst) {
    const int C = p.g;
    // Destination extents and strides; the source is the other side.
    const int* de = BACKWARD ? p.in : p.out;
    const int* se = BACKWARD ? p.out : p.in;
    const int* ds = BACKWARD ? p.xs : p.ys;
    const int* ss = BACKWARD ? p.ys : p.xs;
    const int tiles_w = (de[2] + TW - 1) / TW;
#if defined(GCONV_NHWC)
    const int lanes = C / VEC;
    const long long total = (long long)p.n * de[0] * de[1] * tiles_w * lanes;
#else
    const long long total = (long long)p.n * C * de[0] * de[1] * tiles_w;
#endif
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx;
#if defined(GCONV_NHWC)
        const int c = (int)(r % lanes) * VEC; r /= lanes;
        const int tw = r % tiles_w; r /= tiles_w;
        const int b = r % de[1]; r /= de[1];
        const int a = r % de[0]; r /= de[0];
        const int n = (int)r;
#else
        const int tw = r % tiles_w; r /= tiles_w;
        const int b = r % de[1]; r /= de[1];
        const int a = r % de[0]; r /= de[0];
        const int c = r % C;
        const int n = (int)(r / C);
#endif
        const int w0 = tw * TW;
        float acc[TW][VEC];
#pragma unroll
        for (int t = 0; t < TW; ++t)
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[t][v] = 0.0f;
        for_each_tap<FH, FW, BACKWARD>(p, se, a, b, [&](int fd, int fh, int fw, int sa, int sb) {
            // Weights of this tap for the thread's channels: K x 1 x filter in both layouts,
            // since C/G = 1.
            float wv[VEC];
#pragma unroll
            for (int v = 0; v < VEC; ++v) wv[v] = to_f32(w[offset(p.ws, c + v, 0, fd, fh, fw)]);
#pragma unroll
            for (int t = 0; t < TW; ++t) {
                const int sc = src_coord(w0 + t, fw, p.stride[2], p.pad[2], p.dil[2], se[2], BACKWARD);
                if (w0 + t >= de[2] || sc < 0) continue;
                float xv[VEC];
#if defined(GCONV_NHWC)
                load_vec(src + offset(ss, n, c, sa, sb, sc), xv);
#else
                xv[0] = to_f32(src[offset(ss, n, c, sa, sb, sc)]);
#endif
#pragma unroll
                for (int v = 0; v < VEC; ++v) acc[t][v] += xv[v] * wv[v];
            }
        });
#pragma unroll
        for (int t = 0; t < TW; ++t) {
            if (w0 + t >= de[2]) continue;
#if defined(GCONV_NHWC)
            store_vec(dst + offset(ds, n, c, a, b, w0 + t), acc[t]);
#else
            dst[offset(ds, n, c, a, b, w0 + t)] = from_f32(acc[t][0]);
#endif
        }
    }
}

extern "C" __global__ void dw_fwd(ConvParams p, const elem_t* x, const elem_t* w, elem_t* y) {
    gather<false>(p, x, w, y);
}

extern "C" __global__ void dw_bwd_data(ConvParams p, const elem_t* dy, const elem_t* w, elem_t* dx) {
    gather<true>(p, dy, w, dx);
}

// Backward-weight, stage 1: each thread sums x * dy for VEC channels and every (fh, fw) tap
// over a strided share of the output rows (n, od, oh), then adds its sums into an fp32
// workspace [fd][fh][fw][C] with atomics. blockIdx.y picks the tap depth fd.
extern "C" __global__ void dw_bwd_weight_partial(ConvParams p, const elem_t* x, const elem_t* dy, float* ws) {
    const int C = p.g;
    const int fd = blockIdx.y;
#if defined(GCONV_NHWC)
    const int lanes = C / VEC;
#else
    const int lanes = C;
#endif
    const int rows = p.n * p.out[0] * p.out[1];
    // Threads of a block walk consecutive lanes (channels); blocks of the same lane range
    // split the rows.
    const int lane_blocks = (lanes + blockDim.x - 1) / blockDim.x;
    const int lane = (blockIdx.x % lane_blocks) * blockDim.x + threadIdx.x;
    const int row_workers = (gridDim.x / lane_blocks) * blockDim.y;
    const int worker = (blockIdx.x / lane_blocks) * blockDim.y + threadIdx.y;
    if (lane >= lanes) return;
    const int c = lane * VEC;
    float acc[FH][FW][VEC];
#pragma unroll
    for (int fh = 0; fh < FH; ++fh)
#pragma unroll
        for (int fw = 0; fw < FW; ++fw)
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[fh][fw][v] = 0.0f;
    for (int row = worker; row < rows; row += row_workers) {
        const int oh = row % p.out[1];
        const int od = (row / p.out[1]) % p.out[0];
        const int n = row / (p.out[1] * p.out[0]);
        const int id = od * p.stride[0] + fd * p.dil[0] - p.pad[0];
        if (id < 0 || id >= p.in[0]) continue;
        for (int ow = 0; ow < p.out[2]; ++ow) {
            float g[VEC];
#if defined(GCONV_NHWC)
            load_vec(dy + offset(p.ys, n, c, od, oh, ow), g);
#else
            g[0] = to_f32(dy[offset(p.ys, n, c, od, oh, ow)]);
#endif
#pragma unroll
            for (int fh = 0; fh < FH; ++fh) {
                const int ih = oh * p.stride[1] + fh * p.dil[1] - p.pad[1];
                if (ih < 0 || ih >= p.in[1]) continue;
#pragma unroll
                for (int fw = 0; fw < FW; ++fw) {
                    const int iw = ow * p.stride[2] + fw * p.dil[2] - p.pad[2];
                    if (iw < 0 || iw >= p.in[2]) continue;
                    float xv[VEC];
#if defined(GCONV_NHWC)
                    load_vec(x + offset(p.xs, n, c, id, ih, iw), xv);
#else
                    xv[0] = to_f32(x[offset(p.xs, n, c, id, ih, iw)]);
#endif
#pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[fh][fw][v] += xv[v] * g[v];
                }
            }
        }
    }
#pragma unroll
    for (int fh = 0; fh < FH; ++fh)
#pragma unroll
        for (int fw = 0; fw < FW; ++fw)
#pragma unroll
            for (int v = 0; v < VEC; ++v)
                atomicAdd(&ws[((fd * FH + fh) * FW + fw) * C + c + v], acc[fh][fw][v]);
}
