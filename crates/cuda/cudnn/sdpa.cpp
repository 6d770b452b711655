// Causal scaled-dot-product attention through cuDNN's fused SDPA graphs (the cuDNN frontend,
// header-only), for the `cudnn` feature of boost-cuda. libcudnn is opened at run time
// (the frontend's dynamic-loading mode): a build needs only the headers, and a machine
// without libcudnn runs our own kernels instead.
//
// Layout (boost's): q is tokens × heads·d, k and v tokens × kv_heads·d, o and dO tokens ×
// heads·d, each row-major with its own row stride; token = sequence·seq + position. cuDNN
// sees each as [batch, heads, seq, d] with strides [seq·ld, d, ld, 1]. The statistics (one
// natural-log log-sum-exp per row) are cuDNN's own, [batch, heads, seq] contiguous: only the
// backward of this file reads them.
//
// Graphs are built once per shape and kept per handle; the workspace is the caller's (the
// backend's allocator), asked for with boost_cudnn_prepare before each run.

#include "sdpa.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace fe = cudnn_frontend;

// The library the frontend calls through in dynamic-loading mode.
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

enum Uid : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV };

using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct Ctx {
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    std::map<Key, std::shared_ptr<fe::graph::Graph>> graphs;
};

int fail(char *err, size_t n, const std::string &what) {
    if (err && n) std::snprintf(err, n, "%s", what.c_str());
    return 1;
}

Key key_of(const BoostSdpa *s, int bwd) {
    return {bwd, s->batch, s->seq, s->heads, s->kv_heads, s->head_dim, s->ld_q, s->ld_kv, s->ld_o, s->ld_do};
}

// [batch, heads, seq, d] over rows of stride `ld` (elements).
std::shared_ptr<fe::graph::Tensor_attributes> rows(fe::graph::Graph &g, const char *name, Uid uid,
                                                   const BoostSdpa *s, int64_t heads, int64_t ld) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({s->batch, heads, s->seq, s->head_dim})
                        .set_stride({s->seq * ld, s->head_dim, ld, 1}));
}

void set_rows(const std::shared_ptr<fe::graph::Tensor_attributes> &t, Uid uid, const BoostSdpa *s, int64_t heads,
              int64_t ld) {
    t->set_output(true).set_uid(uid).set_dim({s->batch, heads, s->seq, s->head_dim}).set_stride(
        {s->seq * ld, s->head_dim, ld, 1});
}

std::vector<int64_t> stats_dim(const BoostSdpa *s) { return {s->batch, s->heads, s->seq, 1}; }
std::vector<int64_t> stats_stride(const BoostSdpa *s) { return {s->heads * s->seq, s->seq, 1, 1}; }

// The graph of one pass, built (and checked against this GPU) on first use.
fe::error_t graph_of(Ctx *c, const BoostSdpa *s, int bwd, std::shared_ptr<fe::graph::Graph> &out) {
    auto key = key_of(s, bwd);
    if (auto it = c->graphs.find(key); it != c->graphs.end()) {
        out = it->second;
        return {};
    }
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto q = rows(*g, "q", Q, s, s->heads, s->ld_q);
    auto k = rows(*g, "k", K, s, s->kv_heads, s->ld_kv);
    auto v = rows(*g, "v", V, s, s->kv_heads, s->ld_kv);
    if (!bwd) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("sdpa")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(s->scale);
        auto [o, stats] = g->sdpa(q, k, v, opt);
        set_rows(o, O, s, s->heads, s->ld_o);
        stats->set_output(true).set_uid(STATS).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dim(s)).set_stride(
            stats_stride(s));
    } else {
        auto o = rows(*g, "o", O, s, s->heads, s->ld_o);
        auto d_o = rows(*g, "dO", DO, s, s->heads, s->ld_do);
        auto stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(STATS)
                                   .set_data_type(fe::DataType_t::FLOAT)
                                   .set_dim(stats_dim(s))
                                   .set_stride(stats_stride(s)));
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("sdpa_backward")
                       .set_causal_mask(true)
                       .set_deterministic_algorithm(true)
                       .set_attn_scale(s->scale);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, opt);
        // dQ, dK, dV land where q, k, v are in the gradient buffer (same strides).
        set_rows(dq, DQ, s, s->heads, s->ld_q);
        set_rows(dk, DK, s, s->kv_heads, s->ld_kv);
        set_rows(dv, DV, s, s->kv_heads, s->ld_kv);
    }
    // The slow part (operation graph, heuristics, plans): once per shape.
    if (auto e = g->validate(); e.is_bad()) return e;
    if (auto e = g->build_operation_graph(c->handle); e.is_bad()) return e;
    if (auto e = g->create_execution_plans({fe::HeurMode_t::A}); e.is_bad()) return e;
    if (auto e = g->check_support(c->handle); e.is_bad()) return e;
    if (auto e = g->build_plans(c->handle); e.is_bad()) return e;
    c->graphs.emplace(key, g);
    out = g;
    return {};
}

template <class F>
int guarded(char *err, size_t n, const char *what, F f) {
    try {
        return f();
    } catch (const std::exception &e) {
        return fail(err, n, std::string(what) + ": " + e.what());
    } catch (...) {
        return fail(err, n, std::string(what) + ": unknown C++ exception");
    }
}

int run(Ctx *c, const BoostSdpa *s, int bwd, std::unordered_map<int64_t, void *> &pack, void *ws, char *err,
        size_t n) {
    std::shared_ptr<fe::graph::Graph> g;
    if (auto e = graph_of(c, s, bwd, g); e.is_bad()) return fail(err, n, e.get_message());
    if (auto st = fe::detail::set_stream(c->handle, c->stream); st != CUDNN_STATUS_SUCCESS)
        return fail(err, n, std::string("cudnnSetStream: ") + fe::detail::get_error_string(st));
    if (auto e = g->execute(c->handle, pack, ws); e.is_bad()) return fail(err, n, e.get_message());
    return 0;
}

}  // namespace

extern "C" {

int boost_cudnn_load(const char *cudnn, char *err, size_t n) {
    if (fe::cudnn_dlhandle) return 0;
    void *h = dlopen(cudnn, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return fail(err, n, std::string("dlopen: ") + dlerror());
    fe::cudnn_dlhandle = h;
    return 0;
}

int boost_cudnn_open_global(const char *path, char *err, size_t n) {
    if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) return fail(err, n, std::string("dlopen: ") + dlerror());
    return 0;
}

int64_t boost_cudnn_version(void) {
    return guarded(nullptr, 0, "", [] { return static_cast<int>(fe::detail::get_backend_version()); });
}

int64_t boost_cudnn_cudart_version(void) {
    using Fn = size_t (*)();
    auto f = reinterpret_cast<Fn>(fe::cudnn_dlhandle ? dlsym(fe::cudnn_dlhandle, "cudnnGetCudartVersion") : nullptr);
    return f ? static_cast<int64_t>(f()) : 0;
}

void *boost_cudnn_create(void *stream, char *err, size_t n) {
    Ctx *out = nullptr;
    guarded(err, n, "cudnnCreate", [&] {
        auto c = std::make_unique<Ctx>();
        if (auto st = fe::detail::create_handle(&c->handle); st != CUDNN_STATUS_SUCCESS)
            return fail(err, n, std::string("cudnnCreate: ") + fe::detail::get_error_string(st));
        c->stream = static_cast<cudaStream_t>(stream);
        out = c.release();
        return 0;
    });
    return out;
}

void boost_cudnn_destroy(void *ctx) {
    auto *c = static_cast<Ctx *>(ctx);
    if (!c) return;
    c->graphs.clear();
    try {
        fe::detail::destroy_handle(c->handle);
    } catch (...) {
    }
    delete c;
}

int boost_cudnn_prepare(void *ctx, const BoostSdpa *s, int bwd, int64_t *ws_bytes, char *err, size_t n) {
    return guarded(err, n, bwd ? "cuDNN SDPA backward" : "cuDNN SDPA forward", [&] {
        std::shared_ptr<fe::graph::Graph> g;
        if (auto e = graph_of(static_cast<Ctx *>(ctx), s, bwd, g); e.is_bad()) return fail(err, n, e.get_message());
        *ws_bytes = g->get_workspace_size();
        return 0;
    });
}

int boost_cudnn_fwd(void *ctx, const BoostSdpa *s, const BoostSdpaFwd *a, void *ws, char *err, size_t n) {
    return guarded(err, n, "cuDNN SDPA forward", [&] {
        std::unordered_map<int64_t, void *> pack = {{Q, a->q}, {K, a->k}, {V, a->v}, {O, a->o}, {STATS, a->stats}};
        return run(static_cast<Ctx *>(ctx), s, 0, pack, ws, err, n);
    });
}

int boost_cudnn_bwd(void *ctx, const BoostSdpa *s, const BoostSdpaBwd *a, void *ws, char *err, size_t n) {
    return guarded(err, n, "cuDNN SDPA backward", [&] {
        std::unordered_map<int64_t, void *> pack = {{Q, a->q},         {K, a->k},   {V, a->v},   {O, a->o},
                                                    {DO, a->d_o},      {STATS, a->stats},        {DQ, a->dq},
                                                    {DK, a->dk},       {DV, a->dv}};
        return run(static_cast<Ctx *>(ctx), s, 1, pack, ws, err, n);
    });
}

}  // extern "C"
