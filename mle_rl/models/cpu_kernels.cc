// Native kernels for XLA:CPU decoding, called through jax.ffi (see cpu_kernels.py).
//
// 1. DecodeAttention. One query position per batch row (a decode step), grouped-query heads:
//   q     [B, KV, G, HD] f32   queries, already scaled by 1/sqrt(HD)
//   k_t   [B, KV, HD, S] f32   the key cache, transposed (the sampler's layout)
//   v     [B, KV, S, HD] f32   the value cache
//   valid [B, S] pred          cache slots that hold real tokens
//   slot  [1] s32              the query's slot: keys past it are masked (causal), never read
// -> out  [B, KV, G, HD] f32 = softmax(masked q . K^T) . V, with masked scores set to
// `mask_value` (finite) as the XLA path in qwen2.py does (a row with no valid key averages
// the values of slots [0, slot], where XLA averages every slot; the sampler makes none).
//
// Why: XLA:CPU runs these two batched products as one small GEMM per (row, kv head), and
// fuses the q.K^T producer into both the max and the exp-sum of the softmax (computing it
// twice). Here each (row, kv head) reads its keys and values once, in register tiles of
// 3 heads x 32 slots (scores) and 3 heads x 32 head dims (p.V), and the (row, kv head)
// items are shared out over XLA's intra-op thread pool.
//
// 2. PackedMatmul: y [M, N] = x [M, K] @ w, with w packed once per sampling call as
//    [N / 16, K, 16] (panels of 16 columns, each contiguous). A decode step's products
//    have few rows (the batch), where XLA:CPU's GEMM spends its time packing the weights
//    on every call; here each panel is streamed once per register tile of rows (16 rows
//    with AVX-512, 6 without) x 16 columns, the panels two ahead are prefetched while one
//    is multiplied, and the panels are shared over the thread pool.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>
#include <condition_variable>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Shape { int64_t b, kv, g, hd, s; };

typedef float v8 __attribute__((vector_size(32)));

inline v8 load8(const float* p) { v8 x; __builtin_memcpy(&x, p, sizeof(x)); return x; }
inline void store8(float* p, v8 x) { __builtin_memcpy(p, &x, sizeof(x)); }
inline v8 splat8(float x) { return v8{x, x, x, x, x, x, x, x}; }

constexpr int64_t kCols = 32;   // columns (floats) per register tile: 4 vectors

// out[g, c0:c0+32] = sum_i a[g, i] * b[i, c0:c0+32] for NG consecutive rows g (row strides
// lda, ldb, ldo): b is read once for the NG rows, and b[i, c0 + ahead : +32] is prefetched
// into L2 on the way (the cache comes from memory: without it each row of b is a miss).
template <int NG>
inline void product_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t I,
                         float* out, int64_t ldo, int64_t ahead) {
  v8 acc[NG][4] = {};
  for (int64_t i = 0; i < I; ++i) {
    const float* row = b + i * ldb;
    __builtin_prefetch(row + ahead, 0, 2);
    __builtin_prefetch(row + ahead + 16, 0, 2);
    const v8 r0 = load8(row), r1 = load8(row + 8), r2 = load8(row + 16), r3 = load8(row + 24);
    for (int g = 0; g < NG; ++g) {
      const v8 w = splat8(a[g * lda + i]);
      acc[g][0] += w * r0; acc[g][1] += w * r1; acc[g][2] += w * r2; acc[g][3] += w * r3;
    }
  }
  for (int g = 0; g < NG; ++g)
    for (int c = 0; c < 4; ++c) store8(out + g * ldo + 8 * c, acc[g][c]);
}

template <int NG>
void product_tiles(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t I,
                   int64_t C, float* out, int64_t ldo, int64_t ahead) {
  for (int64_t c0 = 0; c0 + kCols <= C; c0 += kCols)
    product_tile<NG>(a, lda, b + c0, ldb, I, out + c0, ldo, ahead);
}

// out [G, C] = a [G, I] @ b [I, C] (row strides lda, ldb, ldo): register tiles of 3 rows x
// 32 columns, scalar loops for the columns past the last full tile; `ahead`: the offset
// (floats) from each row of b read to the part of b prefetched.
void small_product(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t G,
                   int64_t I, int64_t C, float* out, int64_t ldo, int64_t ahead) {
  const int64_t tiled = C / kCols * kCols;
  for (int64_t g0 = 0; g0 < G; g0 += 3) {
    const float* ag = a + g0 * lda;
    float* og = out + g0 * ldo;
    switch (std::min<int64_t>(3, G - g0)) {
      case 1: product_tiles<1>(ag, lda, b, ldb, I, C, og, ldo, ahead); break;
      case 2: product_tiles<2>(ag, lda, b, ldb, I, C, og, ldo, ahead); break;
      default: product_tiles<3>(ag, lda, b, ldb, I, C, og, ldo, ahead); break;
    }
  }
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = tiled; c < C; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < I; ++i) acc += a[g * lda + i] * b[i * ldb + c];
      out[g * ldo + c] = acc;
    }
}

// One (row, kv head): q [G, HD] (scaled), kt [HD, S], v [S, HD], valid [S] -> out [G, HD].
void attend_one(const float* q, const float* kt, const float* v, const bool* valid,
                int64_t last_slot, const Shape& sh, float mask_value, float* scores,
                float* out) {
  const int64_t G = sh.g, HD = sh.hd, S = sh.s;
  // Keys past the query's slot are masked (causal): only slots [0, E) are read, so a step
  // costs the filled part of the cache however large the cache is.
  const int64_t E = std::max<int64_t>(1, std::min<int64_t>(S, last_slot + 1));
  // scores = q . K^T; prefetch: the same key rows, two column tiles on
  small_product(q, HD, kt, S, G, HD, E, scores, E, 2 * kCols);
  for (int64_t g = 0; g < G; ++g) {
    float* sc = scores + g * E;
    float m = -3.4e38f;
    for (int64_t s = 0; s < E; ++s) {
      const float x = valid[s] ? sc[s] : mask_value;
      sc[s] = x;
      m = std::max(m, x);
    }
    float total = 0.0f;
    for (int64_t s = 0; s < E; ++s) {
      const float e = std::exp(sc[s] - m);
      sc[s] = e;
      total += e;
    }
    const float inv = 1.0f / total;
    for (int64_t s = 0; s < E; ++s) sc[s] *= inv;
  }
  // out = p . V; prefetch: the value rows 16 slots on
  small_product(scores, E, v, HD, G, E, HD, out, HD, 16 * HD);
}


// ---------------------------------------------------------------- packed matmul

constexpr int64_t kPanel = 16;   // columns per packed panel (one zmm / two ymm vectors)
// Panels ahead of the one being multiplied that are prefetched into L2, a row per k step:
// without it the first row tile of a panel waits on memory (weights are read once per step,
// far more than the caches hold), and only the row tiles after it run from L1. With fewer
// than kPrefetchRows rows the hardware prefetcher keeps up alone (the prefetches cost 5-7%
// at 1-2 rows, standalone on a 2-core AMD EPYC; +20% at 4 rows, +50% at 16).
constexpr int64_t kAhead = 2;
constexpr int64_t kPrefetchRows = 4;

#if defined(__AVX512F__)
// 16 rows x 16 columns per register tile: 16 zmm accumulators (of 32), one panel row loaded
// per k, the x values broadcast from x transposed (one cache line per k for 16 rows; x's own
// rows are K floats apart, which for K = 1024 puts all 16 in the same L1 set).
typedef float v16 __attribute__((vector_size(64)));
inline v16 load16(const float* p) { v16 x; __builtin_memcpy(&x, p, sizeof(x)); return x; }
inline void store16(float* p, v16 x) { __builtin_memcpy(p, &x, sizeof(x)); }
inline v16 splat16(float x) { return v16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
constexpr int kTileRows = 16;
constexpr bool kTransposeX = true;

// y[0:NR, 0:16] (row stride N) = x[0:NR, :] @ panel [K, 16]; xt: x transposed, row stride ldx
template <int NR>
inline void matmul_tile(const float* xt, int64_t ldx, const float* panel, float* y, int64_t K,
                        int64_t N, const float* ahead) {
  v16 acc[NR] = {};
  for (int64_t k = 0; k < K; ++k) {
    if (ahead) __builtin_prefetch(ahead + kPanel * k, 0, 2);
    const v16 b = load16(panel + kPanel * k);
    const float* xk = xt + k * ldx;
    for (int r = 0; r < NR; ++r) acc[r] += splat16(xk[r]) * b;
  }
  for (int r = 0; r < NR; ++r) store16(y + r * N, acc[r]);
}
#else
// 6 rows x 16 columns per register tile: 12 ymm accumulators (of 16), x read in place.
constexpr int kTileRows = 6;
constexpr bool kTransposeX = false;

// y[0:NR, 0:16] (row stride N) = x[0:NR, :] (row stride K) @ panel [K, 16]
template <int NR>
inline void matmul_tile(const float* x, int64_t /*ldx*/, const float* panel, float* y, int64_t K,
                        int64_t N, const float* ahead) {
  v8 acc[NR][2] = {};
  for (int64_t k = 0; k < K; ++k) {
    if (ahead) __builtin_prefetch(ahead + kPanel * k, 0, 2);
    const v8 b0 = load8(panel + kPanel * k), b1 = load8(panel + kPanel * k + 8);
    for (int r = 0; r < NR; ++r) {
      const v8 a = splat8(x[r * K + k]);
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < NR; ++r) {
    store8(y + r * N, acc[r][0]);
    store8(y + r * N + 8, acc[r][1]);
  }
}
#endif

// A tile of `rows` (1 .. NR) rows: matmul_tile<rows>.
template <int NR>
inline void matmul_rows(int64_t rows, const float* x, int64_t ldx, const float* panel, float* y,
                        int64_t K, int64_t N, const float* ahead) {
  if (rows == NR) {
    matmul_tile<NR>(x, ldx, panel, y, K, N, ahead);
  } else if constexpr (NR > 1) {
    matmul_rows<NR - 1>(rows, x, ldx, panel, y, K, N, ahead);
  }
}

// Panel p of y [M, N] = x @ w, in row tiles of kTileRows. x: [M, K], or x transposed
// [K, M] when kTransposeX.
void matmul_panel(int64_t p, int64_t panels, const float* x, const float* w, float* y,
                  int64_t M, int64_t K, int64_t N) {
  const float* panel = w + p * K * kPanel;
  const float* ahead =
      M >= kPrefetchRows ? w + std::min(p + kAhead, panels - 1) * K * kPanel : nullptr;
  float* yp = y + p * kPanel;
  for (int64_t r = 0; r < M; r += kTileRows) {
    const float* xr = kTransposeX ? x + r : x + r * K;
    matmul_rows<kTileRows>(std::min<int64_t>(kTileRows, M - r), xr, M, panel, yp + r * N, K, N,
                           ahead);
  }
}

struct Work {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::mutex mu;
  std::condition_variable cv;
};

// Runs fn(i) for i in [0, n) on the calling thread and up to num_threads - 1 pool tasks.
// The caller claims items too, so it only ever waits for items already being run; a task
// that starts after the call returned finds nothing left (it holds the shared state only).
template <typename Fn>
void parallel_for(ffi::ThreadPool& pool, int64_t n, Fn fn) {
  auto work = std::make_shared<Work>();
  auto body = [work, n, fn]() {
    int64_t mine = 0;
    for (int64_t i; (i = work->next.fetch_add(1)) < n; ++mine) fn(i);
    if (mine && work->finished.fetch_add(mine) + mine == n) {
      std::lock_guard<std::mutex> lock(work->mu);
      work->cv.notify_all();
    }
  };
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), n) - 1;
  for (int64_t t = 0; t < helpers; ++t) pool.Schedule(decltype(body)(body));   // a copy
  body();
  std::unique_lock<std::mutex> lock(work->mu);
  work->cv.wait(lock, [&] { return work->finished.load() == n; });
}

ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q,
                           ffi::Buffer<ffi::F32> kt, ffi::Buffer<ffi::F32> v,
                           ffi::Buffer<ffi::PRED> valid, ffi::Buffer<ffi::S32> slot,
                           float mask_value, ffi::ResultBuffer<ffi::F32> out) {
  auto qd = q.dimensions(), kd = kt.dimensions(), vd = v.dimensions(), md = valid.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || md.size() != 2)
    return ffi::Error::InvalidArgument("decode_attention: bad ranks");
  Shape sh{qd[0], qd[1], qd[2], qd[3], vd[2]};
  if (kd[0] != sh.b || kd[1] != sh.kv || kd[2] != sh.hd || kd[3] != sh.s || vd[0] != sh.b ||
      vd[1] != sh.kv || vd[3] != sh.hd || md[0] != sh.b || md[1] != sh.s)
    return ffi::Error::InvalidArgument("decode_attention: shapes do not match");
  const int64_t n = sh.b * sh.kv;
  const int64_t last_slot = slot.typed_data()[0];
  const float* qp = q.typed_data();
  const float* kp = kt.typed_data();
  const float* vp = v.typed_data();
  const bool* mp = valid.typed_data();
  float* op = out->typed_data();
  parallel_for(pool, n, [=](int64_t i) {
    thread_local std::vector<float> scores;
    if (static_cast<int64_t>(scores.size()) < sh.g * sh.s) scores.resize(sh.g * sh.s);
    attend_one(qp + i * sh.g * sh.hd, kp + i * sh.hd * sh.s, vp + i * sh.s * sh.hd,
               mp + (i / sh.kv) * sh.s, last_slot, sh, mask_value, scores.data(),
               op + i * sh.g * sh.hd);
  });
  return ffi::Error::Success();
}


ffi::Error PackedMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                        ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> y) {
  auto wd = w.dimensions(), yd = y->dimensions();
  if (wd.size() != 3 || wd[2] != kPanel)
    return ffi::Error::InvalidArgument("packed_matmul: w must be [N / 16, K, 16]");
  const int64_t K = wd[1], N = wd[0] * kPanel;
  if (K == 0 || x.element_count() % K != 0 || yd.size() == 0 || yd[yd.size() - 1] != N ||
      y->element_count() != x.element_count() / K * N)
    return ffi::Error::InvalidArgument("packed_matmul: shapes do not match");
  const int64_t M = x.element_count() / K, panels = wd[0];
  const float* xp = x.typed_data();
  if (kTransposeX) {                      // x [M, K] -> [K, M], once per call
    thread_local std::vector<float> xt;
    if (static_cast<int64_t>(xt.size()) < M * K) xt.resize(M * K);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t k = 0; k < K; ++k) xt[k * M + r] = xp[r * K + k];
    xp = xt.data();
  }
  const float* wp = w.typed_data();
  float* yp = y->typed_data();
  // Chunks of consecutive panels, about 4 per thread, so uneven threads even out.
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t per = std::max<int64_t>(1, (panels + 4 * threads - 1) / (4 * threads));
  const int64_t chunks = (panels + per - 1) / per;
  parallel_for(pool, chunks, [=](int64_t c) {
    for (int64_t p = c * per; p < std::min(panels, (c + 1) * per); ++p)
      matmul_panel(p, panels, xp, wp, yp, M, K, N);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MleRlDecodeAttention, DecodeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Attr<float>("mask_value")
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(MleRlPackedMatmul, PackedMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

// Rows per register tile of PackedMatmul in this build (tests check the instruction set used).
extern "C" int MleRlTileRows() { return kTileRows; }
