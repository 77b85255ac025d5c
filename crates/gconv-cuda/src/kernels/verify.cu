// Compares a solution's output with the fp32 reference on the GPU, so that find downloads two
// words per candidate instead of the tensor. worst: max over elements of
// (bits(|got - ref|) << 32 | index), a non-finite output counting as +inf (for non-negative
// floats the bit patterns order as the values do); scale: bits of max |ref|.
extern "C" __global__ void gconv_verify(const elem_t* got, const float* ref, long long n,
                                        unsigned long long* worst, unsigned int* scale) {
    unsigned long long my_worst = 0;
    unsigned int my_scale = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float g = to_f32(got[i]), r = ref[i];
        const float err = isfinite(g) ? fabsf(g - r) : __int_as_float(0x7f800000);
        const unsigned long long packed = ((unsigned long long)__float_as_uint(err) << 32) | (unsigned long long)i;
        my_worst = packed > my_worst ? packed : my_worst;
        const unsigned int s = __float_as_uint(fabsf(r));
        my_scale = s > my_scale ? s : my_scale;
    }
    for (int o = 16; o > 0; o /= 2) {
        const unsigned long long w = __shfl_down_sync(0xffffffffu, my_worst, o);
        const unsigned int s = __shfl_down_sync(0xffffffffu, my_scale, o);
        my_worst = w > my_worst ? w : my_worst;
        my_scale = s > my_scale ? s : my_scale;
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax(worst, my_worst);
        atomicMax(scale, my_scale);
    }
}
