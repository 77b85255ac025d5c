#line 2 "igemm/layout.cuh"
// cuda.igemm, layout: element size, tap-mask type and the shared-memory layout of each
// operand per direction.

#if defined(GCONV_F32)
#define ELEM_BYTES 4
#else
#define ELEM_BYTES 2
#endif
// Tap masks hold TAP_BITS bits per spatial dimension: 10 in 32 bits when every filter is that
// short, else 21 in 64 bits.
#if TAP_BITS <= 10
typedef unsigned tapmask_t;
#else
typedef unsigned long long tapmask_t;
#endif

// Row padding: keeps rows 16-byte aligned and moves consecutive rows to other banks.
#define PAD (16 / ELEM_BYTES)

// Shared-memory layout of each operand: K-major ([rows][k]) or not ([k][rows]).
#if DIR == 2
#define A_KMAJOR 0
#define B_KMAJOR 0
#elif DIR == 1
#define A_KMAJOR 1
#define B_KMAJOR 0
#else
#define A_KMAJOR 1
#define B_KMAJOR 1
#endif

#define A_LD (A_KMAJOR ? BK + PAD : BM + PAD)
#define B_LD (B_KMAJOR ? BK + PAD : BN + PAD)
#define A_STAGE (A_KMAJOR ? BM * A_LD : BK * A_LD)
#define B_STAGE (B_KMAJOR ? BN * B_LD : BK * B_LD)
