// cuda.grouped_direct: channels-last convolutions with few channels per group (CG inputs and
// KG outputs, each at most 8), where a GEMM tile would be mostly padding. One thread owns one
// group at one pixel (or a row of TW pixels): consecutive threads take consecutive groups, so
// a warp's loads of CG (or KG) channels are contiguous, and the group's CG x KG weights of a
// tap sit in registers while the thread's pixels use them. Compile-time: FH, FW (filter height
// and width, depth stays a run-time loop), CG, KG and TW. Backward-weight sums each tap's
// CG x KG products over a share of the pixels into an fp32 workspace with atomics, then
// rounds once into dw.

#ifndef TW
#define TW 1
#endif

// N consecutive elements in one or more aligned vector loads: N is a power of two and the
// element offset a multiple of N, so the address is aligned to the vector.
template <int N>
__device__ __forceinline__ void load_row(const elem_t* p, float* out) {
    constexpr int BYTES = N * (int)sizeof(elem_t);
    struct alignas(BYTES >= 16 ? 16 : BYTES) Row {
        elem_t v[N];
    };
    const Row r = *reinterpret_cast<const Row*>(p);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_f32(r.v[i]);
}

template <int N>
__device__ __forceinline__ void store_row(elem_t* p, const float* in) {
    constexpr int BYTES = N * (int)sizeof(elem_t);
    struct alignas(BYTES >= 16 ? 16 : BYTES) Row {
        elem_t v[N];
    };
    Row r;
#pragma unroll
    for (int i = 0; i < N; ++i) r.v[i] = from_f32(in[i]);
    *reinterpret_cast<Row*>(p) = r;
}

// The group's weights of one tap: w[g*KG + k][tap][0..CG).
__device__ __forceinline__ void load_tap(const ConvParams& p, const elem_t* w, int g, int fd, int fh, int fw, float (*wv)[CG]) {
#pragma unroll
    for (int k = 0; k < KG; ++k) load_row<CG>(w + offset(p.ws, g * KG + k, 0, fd, fh, fw), wv[k]);
}

// Forward (BACKWARD = false): y[.., g*KG + k] = sum over taps and c of x[.., g*CG + c] w[k][c].
// Backward-data (true): dx[.., g*CG + c] = sum over taps and k of dy[.., g*KG + k] w[k][c].
template <bool BACKWARD>
__device__ __forceinline__ void gather(const ConvParams& p, const elem_t* src, const elem_t* w, elem_t* dst) {
    constexpr int IN = BACKWARD ? KG : CG;    // channels read per source pixel
    constexpr int OUT = BACKWARD ? CG : KG;   // channels written per destination pixel
    const int G = p.g;
    const int* de = BACKWARD ? p.in : p.out;
    const int* se = BACKWARD ? p.out : p.in;
    const int* ds = BACKWARD ? p.xs : p.ys;
    const int* ss = BACKWARD ? p.ys : p.xs;
    const int tiles_w = (de[2] + TW - 1) / TW;
    const long long total = (long long)p.n * de[0] * de[1] * tiles_w * G;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx;
        const int g = (int)(r % G); r /= G;
        const int tw = (int)(r % tiles_w); r /= tiles_w;
        const int b = (int)(r % de[1]); r /= de[1];
        const int a = (int)(r % de[0]);
        const int n = (int)(r / de[0]);
        const int w0 = tw * TW;
        float acc[TW][OUT];
#pragma unroll
        for (int t = 0; t < TW; ++t)
#pragma unroll
            for (int o = 0; o < OUT; ++o) acc[t][o] = 0.0f;
        for_each_tap<FH, FW, BACKWARD>(p, se, a, b, [&](int fd, int fh, int fw, int sa, int sb) {
            float wv[KG][CG];
            load_tap(p, w, g, fd, fh, fw, wv);
#pragma unroll
            for (int t = 0; t < TW; ++t) {
                const int sc = src_coord(w0 + t, fw, p.stride[2], p.pad[2], p.dil[2], se[2], BACKWARD);
                if (w0 + t >= de[2] || sc < 0) continue;
                float v[IN];
                load_row<IN>(src + offset(ss, n, g * IN, sa, sb, sc), v);
#pragma unroll
                for (int k = 0; k < KG; ++k)
#pragma unroll
                    for (int c = 0; c < CG; ++c) {
                        if constexpr (BACKWARD)
                            acc[t][c] += v[k] * wv[k][c];
                        else
                            acc[t][k] += v[c] * wv[k][c];
                    }
            }
        });
#pragma unroll
        for (int t = 0; t < TW; ++t)
            if (w0 + t < de[2]) store_row<OUT>(dst + offset(ds, n, g * OUT, a, b, w0 + t), acc[t]);
    }
}

extern "C" __global__ void gd_fwd(ConvParams p, const elem_t* x, const elem_t* w, elem_t* y) {
    gather<false>(p, x, w, y);
}

extern "C" __global__ void gd_bwd_data(ConvParams p, const elem_t* dy, const elem_t* w, elem_t* dx) {
    gather<true>(p, dy, w, dx);
}

// Backward-weight, stage 1: blockIdx.y is the tap; threads of a block walk consecutive groups
// (threadIdx.x) and output rows (n, od, oh) (threadIdx.y and the blocks sharing a group
// range), each summing dy x x over its rows' pixels, then adding into the fp32 workspace,
// laid out as dw.
extern "C" __global__ void gd_bwd_weight_partial(ConvParams p, const elem_t* x, const elem_t* dy, float* ws) {
    const int G = p.g;
    const int fw = blockIdx.y % FW;
    const int fh = (blockIdx.y / FW) % FH;
    const int fd = blockIdx.y / (FW * FH);
    const int group_blocks = (G + blockDim.x - 1) / blockDim.x;
    const int g = (blockIdx.x % group_blocks) * blockDim.x + threadIdx.x;
    const int workers = (gridDim.x / group_blocks) * blockDim.y;
    const int worker = (blockIdx.x / group_blocks) * blockDim.y + threadIdx.y;
    if (g >= G) return;
    const int rows = p.n * p.out[0] * p.out[1];
    float acc[KG][CG];
#pragma unroll
    for (int k = 0; k < KG; ++k)
#pragma unroll
        for (int c = 0; c < CG; ++c) acc[k][c] = 0.0f;
    for (int row = worker; row < rows; row += workers) {
        const int oh = row % p.out[1];
        const int od = (row / p.out[1]) % p.out[0];
        const int n = row / (p.out[1] * p.out[0]);
        const int id = src_coord(od, fd, p.stride[0], p.pad[0], p.dil[0], p.in[0], false);
        const int ih = src_coord(oh, fh, p.stride[1], p.pad[1], p.dil[1], p.in[1], false);
        if (id < 0 || ih < 0) continue;
        for (int ow = 0; ow < p.out[2]; ++ow) {
            const int iw = src_coord(ow, fw, p.stride[2], p.pad[2], p.dil[2], p.in[2], false);
            if (iw < 0) continue;
            float gv[KG], xv[CG];
            load_row<KG>(dy + offset(p.ys, n, g * KG, od, oh, ow), gv);
            load_row<CG>(x + offset(p.xs, n, g * CG, id, ih, iw), xv);
#pragma unroll
            for (int k = 0; k < KG; ++k)
#pragma unroll
                for (int c = 0; c < CG; ++c) acc[k][c] += gv[k] * xv[c];
        }
    }
#pragma unroll
    for (int k = 0; k < KG; ++k)
#pragma unroll
        for (int c = 0; c < CG; ++c) atomicAdd(&ws[offset(p.ws, g * KG + k, c, fd, fh, fw)], acc[k][c]);
}
