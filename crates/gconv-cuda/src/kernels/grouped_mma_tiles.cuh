#line 2 "grouped_mma_tiles.cuh"
// What cuda.grouped_mma's kernels share: the block shape, the source window a tile of
// destination pixels reads, and the cp.async staging of pixel rows into shared memory.

#define WARPS 4
#define THREADS (WARPS * 32)

// One spatial dimension (height or width) of a block's source window, or of its tile.
struct WindowDim {
    int start, size;
};

// The source positions destination positions o0 .. o0 + tile - 1 read, over every tap: forward
// (and backward-weight's x) o * stride - pad + f * dil; backward-data the
// (h + pad - f * dil) / stride that divide.
template <bool GATHER_BACKWARD>
__device__ __forceinline__ WindowDim window_dim(int o0, int tile, int taps, int stride, int pad, int dil) {
    const int reach = (taps - 1) * dil;
    if (GATHER_BACKWARD) return {floor_div(o0 + pad - reach, stride), (tile - 1 + reach + stride - 1) / stride + 1};
    return {o0 * stride - pad, (tile - 1) * stride + reach + 1};
}

// Copies a rectangle of pixels (rows wy x columns wx, of depth plane d of image n) into shared
// memory, a pixel per row of `row_bytes`: its channels c0 .. c0 + CHUNKS * 8 - 1 in 16-byte
// chunks, zeros outside the tensor (extents ext) and at channels from `channels` on. The
// caller commits and waits.
template <int CHUNKS>
__device__ __forceinline__ void stage_pixels(unsigned char* to, int row_bytes, const elem_t* from, const int* strides, const int* ext, int n, int d,
                                             WindowDim wy, WindowDim wx, int c0, int channels) {
    for (int i = threadIdx.x; i < wy.size * wx.size * CHUNKS; i += THREADS) {
        const int pixel = i / CHUNKS, chunk = i % CHUNKS;
        const int y = wy.start + pixel / wx.size, x = wx.start + pixel % wx.size;
        const int c = c0 + chunk * 8;
        const bool valid = y >= 0 && y < ext[1] && x >= 0 && x < ext[2] && c < channels;
        cp_async_16(to + pixel * row_bytes + chunk * 16, valid ? from + offset(strides, n, c, d, y, x) : from, valid);
    }
}
