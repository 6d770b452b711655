// The kernel emulator: every kernel file compiled for the host, a registry of kernels by
// name, and a launcher that runs a grid block by block with the block's threads as fibers
// (a small stack switch). A fiber runs until __syncthreads() or its end; a barrier is
// released when every thread of the block has reached it. Launches are serialised (one
// emulated device).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common.cuh"

EmuDim3 emu_block_idx, emu_block_dim, emu_grid_dim, emu_thread_idx;

namespace {

typedef void (*Fn)(const P*);

std::map<std::string, Fn>& registry() {
    static std::map<std::string, Fn> r;
    return r;
}

const size_t STACK = 64 * 1024;

// Fiber switching: a few instructions on x86-64 (callee-saved registers and the stack
// pointer), ucontext elsewhere.
#if defined(__x86_64__)
extern "C" void emu_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_switch, .-emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");
#endif

struct Fibers {
    // The fibers' stacks, STACK bytes each (see grow_stacks).
    char* stacks = nullptr;
    // 0: runnable, 1: waiting at a barrier, 2: finished.
    std::vector<int> state;
    // threadIdx of each thread of the block (computed once per launch).
    std::vector<EmuDim3> tidx;
    int n = 0;
    int cur = 0;
    Fn fn = nullptr;
    const P* p = nullptr;
    // Threads run as fibers (else as plain calls, for kernels without barriers).
    bool fibers = true;
#if defined(__x86_64__)
    std::vector<void*> sp;
    void* sched_sp = nullptr;
#else
    std::vector<ucontext_t> ctx;
    ucontext_t sched;
#endif
};

Fibers F;
std::mutex LOCK;

// Stacks for `bytes`, in huge pages where the kernel gives them: every switch lands on
// another fiber's stack, and with 4 KiB pages each of them would need its own TLB entry.
void grow_stacks(size_t bytes) {
    const size_t huge = 2u << 20;
    free(F.stacks);
    void* p = nullptr;
    if (posix_memalign(&p, huge, (bytes + huge - 1) / huge * huge) != 0) {
        fprintf(stderr, "emulator: out of memory for %zu bytes of fiber stacks\n", bytes);
        abort();
    }
#ifdef MADV_HUGEPAGE
    madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);
#endif
    F.stacks = (char*)p;
}

// Makes thread `t` of the block the running one (F.cur and threadIdx).
void set_current(int t) {
    F.cur = t;
    emu_thread_idx = F.tidx[t];
}

// Saves the running context in `from` (-1: the scheduler) and resumes `to` (-1: the scheduler).
#if defined(__x86_64__)
void switch_fibers(int from, int to) {
    emu_switch(from < 0 ? &F.sched_sp : &F.sp[from], to < 0 ? F.sched_sp : F.sp[to]);
}
#else
void switch_fibers(int from, int to) {
    swapcontext(from < 0 ? &F.sched : &F.ctx[from], to < 0 ? &F.sched : &F.ctx[to]);
}
#endif

// The thread that runs after `t` in a round (the next one not finished), or -1 when the
// round is over.
int next_in_round(int t) {
    for (int u = t + 1; u < F.n; u++)
        if (F.state[u] != 2) return u;
    return -1;
}

// Leaves the running fiber for the next one of the round, or the scheduler after the last:
// a direct switch, so a barrier costs one switch per thread rather than two.
void pass_on() {
    int from = F.cur, to = next_in_round(from);
    if (to >= 0) {
        F.state[to] = 0;
        set_current(to);
    }
    switch_fibers(from, to);
}

void fiber_body() {
    F.fn(F.p);
    F.state[F.cur] = 2;
    pass_on();  // never resumed: the next block starts its fibers afresh
}

#if defined(__x86_64__)
void start(int t) {
    // Tops staggered by a cache line, so that the fibers' saved registers do not all fall in
    // one cache set.
    char* top = F.stacks + (size_t)(t + 1) * STACK - (size_t)(t % 64) * 64;
    top = (char*)((uintptr_t)top & ~(uintptr_t)15);
    void** s = (void**)top;
    *--s = nullptr;               // the entry function's return address (never used)
    *--s = (void*)&fiber_body;    // where the first switch returns to
    for (int i = 0; i < 6; i++) *--s = nullptr;  // rbp rbx r12 r13 r14 r15
    F.sp[t] = s;
}
#else
void start(int t) {
    getcontext(&F.ctx[t]);
    F.ctx[t].uc_stack.ss_sp = F.stacks + (size_t)t * STACK;
    F.ctx[t].uc_stack.ss_size = STACK;
    F.ctx[t].uc_link = &F.sched;
    makecontext(&F.ctx[t], fiber_body, 0);
}
#endif

// Runs one block as fibers; returns 0, or -2 when threads of the block disagree on a barrier.
// A round runs every unfinished thread in order up to its next barrier or its end.
int run_block_fibers(int n) {
    if ((int)F.state.size() < n) {
        F.state.resize(n);
        grow_stacks((size_t)n * STACK);
#if defined(__x86_64__)
        F.sp.resize(n);
#else
        F.ctx.resize(n);
#endif
    }
    F.fibers = true;
    F.n = n;
    for (int t = 0; t < n; t++) {
        start(t);
        F.state[t] = 0;
    }
    for (;;) {
        int first = next_in_round(-1);
        if (first < 0) return 0;
        F.state[first] = 0;
        set_current(first);
        switch_fibers(-1, first);
        int done = 0, waiting = 0;
        for (int t = 0; t < n; t++) {
            done += F.state[t] == 2;
            waiting += F.state[t] == 1;
        }
        if (done == n) return 0;
        if (done > 0 && waiting > 0) return -2;
    }
}

// Runs one block of a kernel without barriers: each thread to its end in turn.
void run_block_plain(int n) {
    F.fibers = false;
    for (int t = 0; t < n; t++) {
        set_current(t);
        F.fn(F.p);
    }
}

}  // namespace

int emu_register(const char* name, Fn fn) {
    registry()[name] = fn;
    return 0;
}

void emu_syncthreads() {
    if (!F.fibers) {
        fprintf(stderr, "emulator: a kernel launched as barrier-free reached __syncthreads()\n");
        abort();
    }
    F.state[F.cur] = 1;
    pass_on();
}

// Warp operations. Each thread leaves its operands at its own slot, every thread waits at a
// barrier, reads its warp's slots, and waits again before any slot can be overwritten.
namespace {
struct MmaIn {
    unsigned a[4], b[2];
};
MmaIn mma_in[1024];
unsigned shfl_in[1024];
}  // namespace

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for the running thread's warp, with
// the fragment layouts of the PTX ISA (attention_tc.cu's header); sums in k order in fp32.
void emu_mma_bf16_16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    int t = F.cur, w = t & ~31, lane = t & 31;
    mma_in[t] = MmaIn{{a[0], a[1], a[2], a[3]}, {b0, b1}};
    emu_syncthreads();
    auto half = [](unsigned u, int k) { return bf2f((bf16_t)(k & 1 ? u >> 16 : u & 0xffffu)); };
    auto A = [&](int r, int k) { return half(mma_in[w + (r % 8) * 4 + (k % 8) / 2].a[(r >= 8) + 2 * (k >= 8)], k); };
    auto B = [&](int k, int n) { return half(mma_in[w + n * 4 + (k % 8) / 2].b[k >= 8], k); };
    int gr = lane / 4, qd = lane % 4;
    for (int q = 0; q < 4; q++) {
        int r = gr + 8 * (q / 2), n = 2 * qd + q % 2;
        float acc = c[q];
        for (int k = 0; k < 16; k++) acc += A(r, k) * B(k, n);
        c[q] = acc;
    }
    emu_syncthreads();
}

// shfl.sync.bfly: v of the lane lane ^ m of the running thread's warp.
unsigned emu_shfl_xor(unsigned v, int m) {
    shfl_in[F.cur] = v;
    emu_syncthreads();
    unsigned r = shfl_in[F.cur ^ m];
    emu_syncthreads();
    return r;
}

#include "act.cu"
#include "adamw.cu"
#include "attention.cu"
#include "attention_tc.cu"
#include "elementwise.cu"
#include "embed.cu"
#include "kron.cu"
#include "layernorm.cu"
#include "reduce.cu"
#include "rmsnorm.cu"
#include "rope.cu"
#include "softmax.cu"
#include "xent.cu"

// Returns 0; -1 for an unknown kernel; -2 when a block's threads disagree on a barrier.
// `sync`: the kernel uses __syncthreads(), so every block runs as fibers; other kernels run
// each thread to its end in turn.
extern "C" int boost_emu_launch(const char* name, const unsigned* grid, const unsigned* block, const P* p,
                                int sync) {
    std::lock_guard<std::mutex> guard(LOCK);
    auto it = registry().find(name);
    if (it == registry().end()) return -1;
    F.fn = it->second;
    F.p = p;
    emu_grid_dim = EmuDim3{grid[0], grid[1], grid[2]};
    emu_block_dim = EmuDim3{block[0], block[1], block[2]};
    int n = (int)(block[0] * block[1] * block[2]);
    F.tidx.resize(n);
    for (unsigned t = 0; t < (unsigned)n; t++)
        F.tidx[t] = EmuDim3{t % block[0], (t / block[0]) % block[1], t / (block[0] * block[1])};
    for (unsigned z = 0; z < grid[2]; z++)
        for (unsigned y = 0; y < grid[1]; y++)
            for (unsigned x = 0; x < grid[0]; x++) {
                emu_block_idx = EmuDim3{x, y, z};
                if (sync) {
                    int r = run_block_fibers(n);
                    if (r != 0) return r;
                } else {
                    run_block_plain(n);
                }
            }
    return 0;
}

extern "C" unsigned long boost_emu_sizeof_p() { return sizeof(P); }

extern "C" int boost_emu_has(const char* name) { return registry().count(name) ? 1 : 0; }
