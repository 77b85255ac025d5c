#line 2 "igemm/math.cuh"
// cuda.igemm, math: tensor-core fragments and mma (16-bit or TF32), or the SIMT outer
// product, and the accumulator shape of each.

#if TC
// 16-bit types multiply in m16n8k16 steps; tf32 (fp32 storage) in m16n8k8 steps, each input
// rounded to TF32 first.
#if defined(GCONV_TF32)
#define MMA_K 8
#else
#define MMA_K 16
#endif
#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define MI (WM / 16)
#define NI (WN / 8)

#if defined(GCONV_TF32)
__device__ __forceinline__ void mma(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// A fragment of rows m..m+15 at k..k+7. K-major tiles load with ldmatrix, which moves 32-bit
// values as pairs of 16-bit ones (an 8x8 b16 matrix is 8 rows of 4 floats); M-major tiles
// cannot be transposed at 32 bits, so lanes read their four values themselves.
__device__ __forceinline__ void load_a(unsigned* a, const elem_t* as, int m, int k, int lane) {
#if A_KMAJOR
    ldmatrix_x4(a, as + (m + lane % 16) * A_LD + k + (lane / 16) * 4);
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = to_tf32(__uint_as_float(a[r]));
#else
    const int row = m + lane / 4, col = k + lane % 4;
    a[0] = to_tf32(as[col * A_LD + row]);
    a[1] = to_tf32(as[col * A_LD + row + 8]);
    a[2] = to_tf32(as[(col + 4) * A_LD + row]);
    a[3] = to_tf32(as[(col + 4) * A_LD + row + 8]);
#endif
}

// B fragments of columns n..n+7 and n+8..n+15 at k..k+7: {b0, b1} of each.
__device__ __forceinline__ void load_b_pair(unsigned* r, const elem_t* bs, int n, int k, int lane) {
#if B_KMAJOR
    ldmatrix_x4(r, bs + (n + lane % 8 + (lane / 16) * 8) * B_LD + k + ((lane / 8) % 2) * 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = to_tf32(__uint_as_float(r[i]));
#else
    const int col = n + lane / 4, row = k + lane % 4;
    r[0] = to_tf32(bs[row * B_LD + col]);
    r[1] = to_tf32(bs[(row + 4) * B_LD + col]);
    r[2] = to_tf32(bs[row * B_LD + col + 8]);
    r[3] = to_tf32(bs[(row + 4) * B_LD + col + 8]);
#endif
}
#else
__device__ __forceinline__ void mma(float* c, const unsigned* a, const unsigned* b) { mma_m16n8k16(c, a, b); }

// A fragment of rows m..m+15 at k..k+15, by ldmatrix (transposing M-major tiles).
__device__ __forceinline__ void load_a(unsigned* a, const elem_t* as, int m, int k, int lane) {
#if A_KMAJOR
    ldmatrix_x4(a, as + (m + lane % 16) * A_LD + k + (lane / 16) * 8);
#else
    ldmatrix_x4_trans(a, as + (k + lane % 8 + (lane / 16) * 8) * A_LD + m + ((lane / 8) % 2) * 8);
#endif
}

// B fragments of columns n..n+7 and n+8..n+15 at k..k+15: {b0, b1} of each.
__device__ __forceinline__ void load_b_pair(unsigned* r, const elem_t* bs, int n, int k, int lane) {
#if B_KMAJOR
    ldmatrix_x4(r, bs + (n + lane % 8 + (lane / 16) * 8) * B_LD + k + ((lane / 8) % 2) * 8);
#else
    ldmatrix_x4_trans(r, bs + (k + lane % 8 + ((lane / 8) % 2) * 8) * B_LD + n + (lane / 16) * 8);
#endif
}
#endif

// Two adjacent outputs in one store.
__device__ __forceinline__ void store_pair(elem_t* p, float v0, float v1) {
#if defined(GCONV_F32)
    struct __align__(8) Pair {
        float a, b;
    };
    *reinterpret_cast<Pair*>(p) = Pair{v0, v1};
#else
    *reinterpret_cast<unsigned*>(p) = (unsigned)from_f32(v0) | ((unsigned)from_f32(v1) << 16);
#endif
}
#define ACC_I MI
#define ACC_J NI
#define ACC_E 4
#else
// SIMT: each thread owns TM x TN outputs (compile-time, multiples of 4) and reads its
// operands 16 bytes at a time: four reduction steps of a row from K-major tiles, four
// adjacent rows of one step from the others, a read per 16 FMAs at 8 x 8 where scalar reads
// took one per four.
#define TX (BN / TN)
#define TY (BM / TM)
#define ACC_I TM
#define ACC_J TN
#define ACC_E 1

// The tile row (or column) of a thread's r-th output along a side of `span` rows read by `lanes`
// threads. K-major tiles space a thread's rows `lanes` apart, so that the lanes of a warp read
// consecutive rows, which the row padding puts in distinct banks; the others give a thread
// runs of four adjacent rows, `span / (R / 4)` apart.
template <int R, bool KMAJOR>
__device__ __forceinline__ int simt_row(int t, int r, int lanes, int span) {
    return KMAJOR ? t + r * lanes : (r / 4) * (span / (R / 4)) + t * 4 + r % 4;
}

// A thread's R values of one operand at reduction steps k..k+3, as v[step][r].
template <int R, bool KMAJOR>
__device__ __forceinline__ void read_steps(float (&v)[4][R], const float* s, int ld, int k, int t, int lanes, int span) {
    if (KMAJOR) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float4 q = *reinterpret_cast<const float4*>(s + simt_row<R, true>(t, r, lanes, span) * ld + k);
            v[0][r] = q.x;
            v[1][r] = q.y;
            v[2][r] = q.z;
            v[3][r] = q.w;
        }
    } else {
#pragma unroll
        for (int step = 0; step < 4; ++step)
#pragma unroll
            for (int r = 0; r < R; r += 4) {
                const float4 q = *reinterpret_cast<const float4*>(s + (k + step) * ld + simt_row<R, false>(t, r, lanes, span));
                v[step][r] = q.x;
                v[step][r + 1] = q.y;
                v[step][r + 2] = q.z;
                v[step][r + 3] = q.w;
            }
    }
}
#endif

// Multiplies one pipeline stage (the A and B tiles in shared memory) into the accumulators.
__device__ __forceinline__ void multiply_stage(float (&acc)[ACC_I][ACC_J][ACC_E], const elem_t* as, const elem_t* bs, int tid) {
#if TC
    const int lane = tid % 32, warp = tid / 32;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
#pragma unroll
    for (int kk = 0; kk < BK; kk += MMA_K) {
        unsigned af[MI][4], bf[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) load_a(af[mi], as, wm * WM + mi * 16, kk, lane);
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
            unsigned r[4];
            load_b_pair(r, bs, wn * WN + nj * 16, kk, lane);
            bf[2 * nj][0] = r[0];
            bf[2 * nj][1] = r[1];
            bf[2 * nj + 1][0] = r[2];
            bf[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) mma(acc[mi][ni], af[mi], bf[ni]);
    }
#else
    const int tx = tid % TX, ty = tid / TX;
#pragma unroll
    for (int k = 0; k < BK; k += 4) {
        float a[4][TM], b[4][TN];
        read_steps<TM, A_KMAJOR>(a, as, A_LD, k, ty, TY, BM);
        read_steps<TN, B_KMAJOR>(b, bs, B_LD, k, tx, TX, BN);
#pragma unroll
        for (int step = 0; step < 4; ++step)
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j][0] += a[step][i] * b[step][j];
    }
#endif
}
