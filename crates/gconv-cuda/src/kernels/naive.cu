// cuda.naive: each sum straight from the definition, in its order. The GPU reference: slow,
// simple, every direction, dtype and layout, sizes as run-time arguments.
// Built with GCONV_REF_OUT, the output is fp32 (not rounded to the storage type): the
// reference that GPU find and verification compare against.

#if defined(GCONV_REF_OUT)
typedef float out_t;
__device__ __forceinline__ out_t to_out(float v) { return v; }
#else
typedef elem_t out_t;
__device__ __forceinline__ out_t to_out(float v) { return from_f32(v); }
#endif

// Each thread sums CH_BLOCK (defined by naive.rs) channels of one output position, all of
// one group: the input value of a term is loaded once for all of them. Every sum still runs in
// the definition's order, so the results are those of one thread per element.

extern "C" __global__ void naive_fwd(ConvParams p, const elem_t* x, const elem_t* w, out_t* y) {
    const int k_blocks = (p.kg + CH_BLOCK - 1) / CH_BLOCK;
    const long long total = (long long)p.n * p.g * k_blocks * p.out[0] * p.out[1] * p.out[2];
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx;
        const int ow = r % p.out[2]; r /= p.out[2];
        const int oh = r % p.out[1]; r /= p.out[1];
        const int od = r % p.out[0]; r /= p.out[0];
        const int kb = r % k_blocks; r /= k_blocks;
        const int group = r % p.g;
        const int n = r / p.g;
        const int k0 = group * p.kg + kb * CH_BLOCK;
        const int ks = min(CH_BLOCK, p.kg - kb * CH_BLOCK);
        const int c0 = group * p.cg;
        float sum[CH_BLOCK];
        for (int j = 0; j < CH_BLOCK; ++j) sum[j] = 0.0f;
        for (int c = 0; c < p.cg; ++c)
            for (int fd = 0; fd < p.fil[0]; ++fd) {
                const int id = od * p.stride[0] + fd * p.dil[0] - p.pad[0];
                if (id < 0 || id >= p.in[0]) continue;
                for (int fh = 0; fh < p.fil[1]; ++fh) {
                    const int ih = oh * p.stride[1] + fh * p.dil[1] - p.pad[1];
                    if (ih < 0 || ih >= p.in[1]) continue;
                    for (int fw = 0; fw < p.fil[2]; ++fw) {
                        const int iw = ow * p.stride[2] + fw * p.dil[2] - p.pad[2];
                        if (iw < 0 || iw >= p.in[2]) continue;
                        const float xv = to_f32(x[offset(p.xs, n, c0 + c, id, ih, iw)]);
#pragma unroll
                        for (int j = 0; j < CH_BLOCK; ++j)
                            if (j < ks) sum[j] += xv * to_f32(w[offset(p.ws, k0 + j, c, fd, fh, fw)]);
                    }
                }
            }
#pragma unroll
        for (int j = 0; j < CH_BLOCK; ++j)
            if (j < ks) y[offset(p.ys, n, k0 + j, od, oh, ow)] = to_out(sum[j]);
    }
}

// Output coordinate reading input coordinate i through tap f, or -1.
__device__ __forceinline__ int out_coord(int i, int f, int s, int pad, int dil, int out) {
    const int t = i + pad - f * dil;
    if (t < 0 || t % s != 0) return -1;
    const int o = t / s;
    return o < out ? o : -1;
}

extern "C" __global__ void naive_bwd_data(ConvParams p, const elem_t* dy, const elem_t* w, out_t* dx) {
    const int c_blocks = (p.cg + CH_BLOCK - 1) / CH_BLOCK;
    const long long total = (long long)p.n * p.g * c_blocks * p.in[0] * p.in[1] * p.in[2];
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx;
        const int iw = r % p.in[2]; r /= p.in[2];
        const int ih = r % p.in[1]; r /= p.in[1];
        const int id = r % p.in[0]; r /= p.in[0];
        const int cb = r % c_blocks; r /= c_blocks;
        const int group = r % p.g;
        const int n = r / p.g;
        const int c_local0 = cb * CH_BLOCK;
        const int cs = min(CH_BLOCK, p.cg - c_local0);
        float sum[CH_BLOCK];
        for (int j = 0; j < CH_BLOCK; ++j) sum[j] = 0.0f;
        for (int kk = 0; kk < p.kg; ++kk) {
            const int k = group * p.kg + kk;
            for (int fd = 0; fd < p.fil[0]; ++fd) {
                const int od = out_coord(id, fd, p.stride[0], p.pad[0], p.dil[0], p.out[0]);
                if (od < 0) continue;
                for (int fh = 0; fh < p.fil[1]; ++fh) {
                    const int oh = out_coord(ih, fh, p.stride[1], p.pad[1], p.dil[1], p.out[1]);
                    if (oh < 0) continue;
                    for (int fw = 0; fw < p.fil[2]; ++fw) {
                        const int ow = out_coord(iw, fw, p.stride[2], p.pad[2], p.dil[2], p.out[2]);
                        if (ow < 0) continue;
                        const float dyv = to_f32(dy[offset(p.ys, n, k, od, oh, ow)]);
#pragma unroll
                        for (int j = 0; j < CH_BLOCK; ++j)
                            if (j < cs) sum[j] += dyv * to_f32(w[offset(p.ws, k, c_local0 + j, fd, fh, fw)]);
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < CH_BLOCK; ++j)
            if (j < cs) dx[offset(p.xs, n, group * p.cg + c_local0 + j, id, ih, iw)] = to_out(sum[j]);
    }
}

// The reference (fp32 output, zeroed before) sums each image on its own thread and adds the
// images' sums atomically: a weight's sum runs over every image and output position, and with
// one thread per weight alone a small filter leaves most of the GPU idle.
extern "C" __global__ void naive_bwd_weight(ConvParams p, const elem_t* x, const elem_t* dy, out_t* dw) {
    const int k_total = p.g * p.kg;
    const long long weights = (long long)k_total * p.cg * p.fil[0] * p.fil[1] * p.fil[2];
#if defined(GCONV_REF_OUT)
    const int splits = p.n;
#else
    const int splits = 1;
#endif
    const long long total = weights * splits;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx % weights;
        const int split = (int)(idx / weights);
        const int fw = r % p.fil[2]; r /= p.fil[2];
        const int fh = r % p.fil[1]; r /= p.fil[1];
        const int fd = r % p.fil[0]; r /= p.fil[0];
        const int c_local = r % p.cg;
        const int k = r / p.cg;
        const int c = (k / p.kg) * p.cg + c_local;
        float sum = 0.0f;
        for (int n = split; n < p.n; n += splits)
            for (int od = 0; od < p.out[0]; ++od) {
                const int id = od * p.stride[0] + fd * p.dil[0] - p.pad[0];
                if (id < 0 || id >= p.in[0]) continue;
                for (int oh = 0; oh < p.out[1]; ++oh) {
                    const int ih = oh * p.stride[1] + fh * p.dil[1] - p.pad[1];
                    if (ih < 0 || ih >= p.in[1]) continue;
                    for (int ow = 0; ow < p.out[2]; ++ow) {
                        const int iw = ow * p.stride[2] + fw * p.dil[2] - p.pad[2];
                        if (iw < 0 || iw >= p.in[2]) continue;
                        sum += to_f32(x[offset(p.xs, n, c, id, ih, iw)]) *
                               to_f32(dy[offset(p.ys, n, k, od, oh, ow)]);
                    }
                }
            }
#if defined(GCONV_REF_OUT)
        atomicAdd(&dw[offset(p.ws, k, c_local, fd, fh, fw)], sum);
#else
        dw[offset(p.ws, k, c_local, fd, fh, fw)] = to_out(sum);
#endif
    }
}
