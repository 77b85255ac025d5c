#line 2 "pack_groups.cu"
// cuda.igemm_wgmma's blocking of a grouped layer whose groups have fewer input channels than a
// TMA row, for forward and backward-data (backward-weight keeps the diagonal blocks in its
// products' epilogue): `blocked` consecutive groups of cg input and kg output channels become
// one group of blocked x cg input channels with a block-diagonal filter. Rows are the filter's K x taps
// (output channel k, then its taps), a row cg channels wide in w and blocked x cg in packed; row
// r's output channel k = r / taps lies in group j = (k mod blocked kg) / kg of its block. The
// host keeps every index below 2^31: 32-bit divisions (a 64-bit one is a subroutine that made
// these kernels cost more than a small layer's products).

__device__ __forceinline__ int group_in_block(int r, int taps, int kg, int blocked) { return r / taps % (blocked * kg) / kg; }

// packed[r][j cg + c] = w[r][c], zeros in the other groups' columns: a thread per 16 bytes of
// packed (its rows are 128-byte TMA rows, so whole vectors).
extern "C" __global__ void pack_groups(const elem_t* w, elem_t* packed, int rows, int taps, int cg, int kg, int blocked) {
    constexpr int V = 16 / sizeof(elem_t);
    const int vectors = blocked * cg / V, total = rows * vectors;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int r = i / vectors, first = (i - r * vectors) * V - group_in_block(r, taps, kg, blocked) * cg;
        union {
            uint4 bits;
            elem_t e[V];
        } out;
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const int c = first + e;
            out.e[e] = c >= 0 && c < cg ? w[r * cg + c] : from_f32(0.0f);
        }
        reinterpret_cast<uint4*>(packed)[i] = out.bits;
    }
}
