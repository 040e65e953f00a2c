// Tiled direct conv2d, strict fp32: NCHW x, weight [C_out, C_in/groups, KH, KW], any stride, padding,
// dilation, groups. A block makes 16x16 output pixels x 8 channels of one group and image; per input channel
// it stages the input tile + halo (zeros outside: the padding) and weights in shared memory; a thread keeps
// 8 sums, so each staged value feeds 8 FMAs. Next: several channels per barrier, more pixels per thread.
#include <cstdint>

constexpr int kSide = 16, kCo = 8;  // output tile side, output channels per block

struct Conv2dShape {
  int batch, c_in, h, w, c_out, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, h_out, w_out;
  __host__ __device__ int tile_h() const { return (kSide - 1) * stride_h + (kh - 1) * dil_h + 1; }  // + halo
  __host__ __device__ int tile_w() const { return (kSide - 1) * stride_w + (kw - 1) * dil_w + 1; }
};

__global__ void __launch_bounds__(kSide * kSide) conv2d_tiled(Conv2dShape s, const float* __restrict__ x,
    const float* __restrict__ w, const float* __restrict__ bias, float* __restrict__ y) {
  extern __shared__ float smem[];  // input tile [tile_h][tile_w], then weights [kCo][kh * kw]
  const int th = s.tile_h(), tw = s.tile_w(), taps = s.kh * s.kw, tiles_w = (s.w_out + kSide - 1) / kSide;
  float* wt = smem + th * tw;
  const int oh0 = blockIdx.x / tiles_w * kSide, ow0 = blockIdx.x % tiles_w * kSide, n = blockIdx.z;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide, cin_g = s.c_in / s.groups;
  const int cout_g = s.c_out / s.groups, per_group = (cout_g + kCo - 1) / kCo, g = blockIdx.y / per_group;
  const int co0 = g * cout_g + blockIdx.y % per_group * kCo, co_count = min(kCo, (g + 1) * cout_g - co0);
  float acc[kCo] = {};
  for (int ci = 0; ci < cin_g; ++ci) {
    const float* plane = x + (int64_t(n) * s.c_in + g * cin_g + ci) * s.h * s.w;
    for (int e = threadIdx.x; e < th * tw; e += blockDim.x) {
      const int ih = oh0 * s.stride_h - s.pad_h + e / tw, iw = ow0 * s.stride_w - s.pad_w + e % tw;
      smem[e] = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w ? plane[int64_t(ih) * s.w + iw] : 0.0f;
    }
    for (int e = threadIdx.x; e < kCo * taps; e += blockDim.x)
      wt[e] = e / taps < co_count ? w[(int64_t(co0 + e / taps) * cin_g + ci) * taps + e % taps] : 0.0f;
    __syncthreads();
    for (int r = 0; r < s.kh; ++r)
      for (int c = 0; c < s.kw; ++c) {
        const float v = smem[(ty * s.stride_h + r * s.dil_h) * tw + tx * s.stride_w + c * s.dil_w];
#pragma unroll
        for (int o = 0; o < kCo; ++o) acc[o] = fmaf(v, wt[o * taps + r * s.kw + c], acc[o]);
      }
    __syncthreads();  // before the next channel overwrites the tiles
  }
  const int oh = oh0 + ty, ow = ow0 + tx;
  if (oh >= s.h_out || ow >= s.w_out) return;
#pragma unroll
  for (int o = 0; o < kCo; ++o)  // constant indices keep acc in registers
    if (o < co_count) y[((int64_t(n) * s.c_out + co0 + o) * s.h_out + oh) * s.w_out + ow] = acc[o] + (bias ? bias[co0 + o] : 0.0f);
}

inline cudaError_t launch_conv2d(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                                 cudaStream_t stream) {  // bias may be null; > 48 KB of smem needs an opt-in
  const int tiles = (s.h_out + kSide - 1) / kSide * ((s.w_out + kSide - 1) / kSide);
  const dim3 grid(tiles, s.groups * ((s.c_out / s.groups + kCo - 1) / kCo), s.batch);
  const size_t smem = sizeof(float) * (size_t(s.tile_h()) * s.tile_w() + kCo * s.kh * s.kw);
  conv2d_tiled<<<grid, kSide * kSide, smem, stream>>>(s, x, w, bias, y);
  return cudaGetLastError();
}
