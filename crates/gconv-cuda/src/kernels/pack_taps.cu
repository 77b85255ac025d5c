#line 2 "pack_taps.cu"
// cuda.igemm_wgmma's packing of a layer whose channels are too few for TMA rows (an RGB stem):
// the taps along W go into the channels. A packed row holds, for each of its `out` columns wo,
// the `taps` source columns wo * stride - pad + f it reads, C channels each, zeros outside the
// source and past taps x C up to `packed` channels. Rows are everything outside W (images,
// depth and height, or the filter's K x FD x FH), so one kernel packs x and the filter (one
// column of taps, stride 1, pad 0).

// packed[row][wo][f * C + c] = src[row][wo * stride - pad + f][c].
extern "C" __global__ void pack_taps(const elem_t* src, elem_t* packed, int rows, int width, int out, int C, int taps, int stride, int pad, int packed_channels) {
    const long long total = (long long)rows * out * packed_channels;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const int channel = i % packed_channels, f = channel / C, c = channel % C;
        const long long rest = i / packed_channels;
        const int wo = rest % out;
        const long long row = rest / out;
        const int w = wo * stride - pad + f;
        const bool inside = f < taps && w >= 0 && w < width;
        packed[i] = inside ? src[(row * width + w) * C + c] : from_f32(0.0f);
    }
}

// The other way, summed: dst[row][w][c] = the sum over taps f and columns wo with
// wo * stride - pad + f = w of packed[row][wo][f * C + c] (backward-data's gradient; the
// filter's, with one column and stride 1, takes one term).
extern "C" __global__ void unpack_taps(const elem_t* packed, elem_t* dst, int rows, int width, int out, int C, int taps, int stride, int pad, int packed_channels) {
    const long long total = (long long)rows * width * C;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const int c = i % C, w = i / C % width;
        const long long row = i / C / width;
        float sum = 0.0f;
        for (int f = 0; f < taps; ++f) {
            const int t = w + pad - f;
            if (t < 0 || t % stride != 0 || t / stride >= out) continue;
            sum += to_f32(packed[(row * out + t / stride) * packed_channels + f * C + c]);
        }
        dst[i] = from_f32(sum);
    }
}
