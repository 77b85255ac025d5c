#line 2 "weight_store.cuh"
// Backward-weight's last stage (cuda.grouped_direct, cuda.grouped_mma): the fp32 sums, laid
// out as dw, rounded once into dw.
extern "C" __global__ void weight_store(ConvParams p, const float* ws, elem_t* dw) {
    const int count = p.g * p.kg * p.ws[0];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) dw[i] = from_f32(ws[i]);
}
