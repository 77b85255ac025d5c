#line 2 "pack_groups.cu"
// cuda.igemm_wgmma's blocking of a grouped layer whose groups have fewer input channels than a
// TMA row: `blocked` consecutive groups of cg input and kg output channels become one group of
// blocked x cg input channels with a block-diagonal filter. Rows are the filter's K x taps
// (output channel k, then its taps), a row cg channels wide in w and blocked x cg in packed; row
// r's output channel k = r / taps lies in group j = (k mod blocked kg) / kg of its block.

// packed[r][j cg + c] = w[r][c], zeros in the other groups' columns.
extern "C" __global__ void pack_groups(const elem_t* w, elem_t* packed, int rows, int taps, int cg, int kg, int blocked) {
    const int width = blocked * cg;
    const long long total = (long long)rows * width;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / width;
        const int j = (int)(r / taps % (blocked * kg)) / kg, c = (int)(i % width) - j * cg;
        packed[i] = c >= 0 && c < cg ? w[r * cg + c] : from_f32(0.0f);
    }
}

// The diagonal blocks back: w[r][c] = packed[r][j cg + c] (backward-weight's gradient; the
// other columns hold sums across groups, which the layer does not have).
extern "C" __global__ void unpack_groups(const elem_t* packed, elem_t* w, int rows, int taps, int cg, int kg, int blocked) {
    const long long total = (long long)rows * cg;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / cg;
        const int j = (int)(r / taps % (blocked * kg)) / kg;
        w[i] = packed[r * (blocked * cg) + j * cg + i % cg];
    }
}
