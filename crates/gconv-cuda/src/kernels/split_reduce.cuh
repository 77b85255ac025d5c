#line 2 "split_reduce.cuh"
// Split backward-weight's second stage (cuda.igemm_tc, cuda.igemm_simt, cuda.igemm_wgmma): sums
// `slices` fp32 partial results of dw (one after another in ws) and rounds once into dw.
extern "C" __global__ void split_reduce(const float* ws, int slices, int count, elem_t* dw) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < slices; ++k) s += ws[(long long)k * count + i];
        dw[i] = from_f32(s);
    }
}
