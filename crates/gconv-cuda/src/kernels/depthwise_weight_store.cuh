#line 2 "depthwise_weight_store.cuh"
// Depthwise backward-weight, stage 2 (cuda.depthwise and cuda.depthwise_tiled): the fp32
// sums [fd][fh][fw][C] of stage 1, rounded once into dw's layout and type.
extern "C" __global__ void dw_bwd_weight_store(ConvParams p, const float* ws, elem_t* dw) {
    const int C = p.g;
    const int total = C * p.fil[0] * FH * FW;
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
        const int c = idx % C;
        int r = idx / C;
        const int fw = r % FW; r /= FW;
        const int fh = r % FH;
        const int fd = r / FH;
        dw[offset(p.ws, c, 0, fd, fh, fw)] = from_f32(ws[idx]);
    }
}
