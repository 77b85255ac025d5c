// cuda.depthwise_tiled: G = C = K in the channels-last layouts. A block computes a tile of
// TH x RH destination rows x TW columns for 32 x CPT channels of one image and depth: the
// source rows and columns it reads (its halo included) are staged once in shared memory, channels
// innermost, so each lane reads its own CPT channels without bank conflicts and every global
// load and store is a warp-wide contiguous run. Each thread keeps its channels' weights of one
// depth tap in registers and sums RH rows x TW columns of destinations in fp32.
//
// Compile-time: FH, FW (filter height and width), CPT (channels per thread: 2 for 16-bit
// types, 1 for fp32), TH (warps per block, each a band of RH rows), RH (rows per thread), TW
// (columns per thread), UNIT (stride and dilation 1 along H and W: each staged source value a
// thread needs is loaded once and serves every tap and row it reaches) and
// BACKWARD_DATA (backward-data at stride 1: a forward pass over dy with the taps flipped).
// Sizes, pads and the depth are run-time.

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
__device__ __forceinline__ chunk_t zero_chunk() {
    chunk_t c;
    c.v[0] = from_f32(0.0f);
    c.v[1] = from_f32(0.0f);
    return c;
}
#else
typedef elem_t chunk_t;
__device__ __forceinline__ void unpack(chunk_t c, float* out) { out[0] = to_f32(c); }
__device__ __forceinline__ chunk_t pack(const float* in) { return from_f32(in[0]); }
__device__ __forceinline__ chunk_t zero_chunk() { return from_f32(0.0f); }
#endif

extern "C" __global__ void __launch_bounds__(32 * TH) dw_tiled(ConvParams p, const elem_t* src, const elem_t* w, elem_t* dst) {
    extern __shared__ unsigned char staged[];
    chunk_t* tile = reinterpret_cast<chunk_t*>(staged);
    const int C = p.g;
    // Destination and source extents and strides, and the pads in source coordinates: at
    // stride 1 backward-data reads dy at dst + pad - tap * dil, which is a forward read with
    // the tap flipped and the pad (filter span - 1 - pad).
#if BACKWARD_DATA
    const int* de = p.in;
    const int* se = p.out;
    const int* ds = p.xs;
    const int* ss = p.ys;
    const int pad_d = (p.fil[0] - 1) * p.dil[0] - p.pad[0];
    const int pad_h = (FH - 1) * p.dil[1] - p.pad[1];
    const int pad_w = (FW - 1) * p.dil[2] - p.pad[2];
#else
    const int* de = p.out;
    const int* se = p.in;
    const int* ds = p.ys;
    const int* ss = p.xs;
    const int pad_d = p.pad[0], pad_h = p.pad[1], pad_w = p.pad[2];
#endif
    const int sh = p.stride[1], sw = p.stride[2], dh = p.dil[1], dw = p.dil[2];
    // blockIdx.x: the tile's row block and column block; y: the channel block; z: image and
    // destination depth.
    const int col_tiles = (de[2] + TW - 1) / TW;
    const int row0 = (blockIdx.x / col_tiles) * (TH * RH);
    const int col0 = (blockIdx.x % col_tiles) * TW;
    const int n = blockIdx.z / de[0];
    const int od = blockIdx.z % de[0];
    const int lane = threadIdx.x, ty = threadIdx.y;
    const int c = (blockIdx.y * 32 + lane) * CPT;
    const bool live = c < C;
    // The staged source rectangle: rows and columns the tile's taps read.
    const int rows_in = (TH * RH - 1) * sh + (FH - 1) * dh + 1;
    const int cols_in = (TW - 1) * sw + (FW - 1) * dw + 1;
    const int h0 = row0 * sh - pad_h, w0 = col0 * sw - pad_w;
    float acc[RH][TW][CPT];
#pragma unroll
    for (int r = 0; r < RH; ++r)
#pragma unroll
        for (int t = 0; t < TW; ++t)
#pragma unroll
            for (int v = 0; v < CPT; ++v) acc[r][t][v] = 0.0f;
    const int threads = 32 * TH;
    const int tid = ty * 32 + lane;
    for (int fd = 0; fd < p.fil[0]; ++fd) {
        const int sd = od * p.stride[0] + fd * p.dil[0] - pad_d;
        if (sd < 0 || sd >= se[0]) continue;  // the same for every thread of the block
        // Stage the rectangle: lane-major, so a warp loads 32 consecutive chunks of a pixel.
        for (int i = tid; i < rows_in * cols_in * 32; i += threads) {
            const int l = i & 31, pix = i >> 5;
            const int r = pix / cols_in, col = pix % cols_in;
            const int sh_ = h0 + r, sw_ = w0 + col;
            const int ch = (blockIdx.y * 32 + l) * CPT;
            chunk_t v = zero_chunk();
            if (ch < C && sh_ >= 0 && sh_ < se[1] && sw_ >= 0 && sw_ < se[2])
                v = *reinterpret_cast<const chunk_t*>(src + offset(ss, n, ch, sd, sh_, sw_));
            tile[pix * 32 + l] = v;
        }
        __syncthreads();
        // This depth tap's weights for the thread's channels (K x 1 x filter, C/G = 1).
        const int wd = BACKWARD_DATA ? p.fil[0] - 1 - fd : fd;
        float wv[FH][FW][CPT];
#pragma unroll
        for (int fh = 0; fh < FH; ++fh)
#pragma unroll
            for (int fw = 0; fw < FW; ++fw)
#pragma unroll
                for (int v = 0; v < CPT; ++v)
                    wv[fh][fw][v] = live ? to_f32(w[offset(p.ws, c + v, 0, wd, BACKWARD_DATA ? FH - 1 - fh : fh, BACKWARD_DATA ? FW - 1 - fw : fw)]) : 0.0f;
#if UNIT
        // Stride and dilation 1: the thread's RH + FH - 1 source rows, TW + FW - 1 values of
        // each loaded once; source row j feeds destination row r through tap row j - r.
#pragma unroll
        for (int j = 0; j < RH + FH - 1; ++j) {
            const chunk_t* row = tile + ((ty * RH + j) * cols_in) * 32 + lane;
            float xs[TW + FW - 1][CPT];
#pragma unroll
            for (int k = 0; k < TW + FW - 1; ++k) unpack(row[k * 32], xs[k]);
#pragma unroll
            for (int r = 0; r < RH; ++r) {
                const int fh = j - r;
                if (fh < 0 || fh >= FH) continue;
#pragma unroll
                for (int t = 0; t < TW; ++t)
#pragma unroll
                    for (int fw = 0; fw < FW; ++fw)
#pragma unroll
                        for (int v = 0; v < CPT; ++v) acc[r][t][v] += xs[t + fw][v] * wv[fh][fw][v];
            }
        }
#else
#pragma unroll
        for (int r = 0; r < RH; ++r)
#pragma unroll
            for (int fh = 0; fh < FH; ++fh) {
                const chunk_t* row = tile + (((ty * RH + r) * sh + fh * dh) * cols_in) * 32 + lane;
#pragma unroll
                for (int t = 0; t < TW; ++t)
#pragma unroll
                    for (int fw = 0; fw < FW; ++fw) {
                        float xv[CPT];
                        unpack(row[(t * sw + fw * dw) * 32], xv);
#pragma unroll
                        for (int v = 0; v < CPT; ++v) acc[r][t][v] += xv[v] * wv[fh][fw][v];
                    }
            }
#endif
        __syncthreads();
    }
    if (!live) return;
#pragma unroll
    for (int r = 0; r < RH; ++r) {
        const int oh = row0 + ty * RH + r;
        if (oh >= de[1]) return;
#pragma unroll
        for (int t = 0; t < TW; ++t) {
            const int ow = col0 + t;
            if (ow < de[2]) *reinterpret_cast<chunk_t*>(dst + offset(ds, n, c, od, oh, ow)) = pack(acc[r][t]);
        }
    }
}
