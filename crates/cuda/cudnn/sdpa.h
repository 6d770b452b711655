// The C interface of sdpa.cpp (mirrored by src/cudnn.rs). Every function returning int
// returns 0 on success, else writes a message into err (n bytes) and returns 1.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// One attention shape and its row strides (elements): q (and dq) ld_q, k, v (and dk, dv)
// ld_kv, o ld_o, dO ld_do. Causal; scale multiplies q·kᵀ.
typedef struct {
    int64_t batch, seq, heads, kv_heads, head_dim;
    int64_t ld_q, ld_kv, ld_o, ld_do;
    float scale;
} BoostSdpa;

// Device addresses: bf16 tensors, fp32 statistics.
typedef struct {
    void *q, *k, *v, *o, *stats;
} BoostSdpaFwd;

typedef struct {
    void *q, *k, *v, *o, *d_o, *stats, *dq, *dk, *dv;
} BoostSdpaBwd;

// Opens libcudnn (path or soname) for the frontend; once.
int boost_cudnn_load(const char *cudnn, char *err, size_t n);
// Opens a library for every later lookup by its soname (the CUDA runtime cuDNN was built for,
// which the frontend opens by soname).
int boost_cudnn_open_global(const char *path, char *err, size_t n);
// cudnnGetVersion() of the opened library (e.g. 91301), and the CUDA runtime it was built for.
int64_t boost_cudnn_version(void);
int64_t boost_cudnn_cudart_version(void);
// A handle whose work goes on `stream` (a CUstream of the current context); null on failure.
void *boost_cudnn_create(void *stream, char *err, size_t n);
void boost_cudnn_destroy(void *ctx);
// Builds (once) the graph of the forward (bwd = 0) or backward pass of `s` on this GPU and
// gives the bytes of workspace its run needs.
int boost_cudnn_prepare(void *ctx, const BoostSdpa *s, int bwd, int64_t *ws_bytes, char *err, size_t n);
int boost_cudnn_fwd(void *ctx, const BoostSdpa *s, const BoostSdpaFwd *a, void *ws, char *err, size_t n);
int boost_cudnn_bwd(void *ctx, const BoostSdpa *s, const BoostSdpaBwd *a, void *ws, char *err, size_t n);

#ifdef __cplusplus
}
#endif
