// The kernel emulator: every kernel file compiled for the host, a registry of kernels by
// name, and a launcher that runs a grid block by block with the block's threads as fibers
// (a small stack switch). A fiber runs until __syncthreads() or its end; a barrier is
// released when every thread of the block has reached it. Launches are serialised (one
// emulated device).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common.cuh"

EmuDim3 emu_block_idx, emu_block_dim, emu_grid_dim;

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
    std::vector<char> stacks;
    // 0: runnable, 1: waiting at a barrier, 2: finished.
    std::vector<int> state;
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

void fiber_body() {
    F.fn(F.p);
    F.state[F.cur] = 2;
}

#if defined(__x86_64__)
void fiber_entry() {
    fiber_body();
    void* dead;
    emu_switch(&dead, F.sched_sp);
}

void start(int t) {
    char* top = &F.stacks[(size_t)(t + 1) * STACK];
    top = (char*)((uintptr_t)top & ~(uintptr_t)15);
    void** s = (void**)top;
    *--s = nullptr;               // the entry function's return address (never used)
    *--s = (void*)&fiber_entry;   // where the first switch returns to
    for (int i = 0; i < 6; i++) *--s = nullptr;  // rbp rbx r12 r13 r14 r15
    F.sp[t] = s;
}
void resume(int t) { emu_switch(&F.sched_sp, F.sp[t]); }
void yield() { emu_switch(&F.sp[F.cur], F.sched_sp); }
#else
void start(int t) {
    getcontext(&F.ctx[t]);
    F.ctx[t].uc_stack.ss_sp = &F.stacks[(size_t)t * STACK];
    F.ctx[t].uc_stack.ss_size = STACK;
    F.ctx[t].uc_link = &F.sched;
    makecontext(&F.ctx[t], fiber_body, 0);
}
void resume(int t) { swapcontext(&F.sched, &F.ctx[t]); }
void yield() { swapcontext(&F.ctx[F.cur], &F.sched); }
#endif

// Runs one block as fibers; returns 0, or -2 when threads of the block disagree on a barrier.
int run_block_fibers(int n) {
    if ((int)F.state.size() < n) {
        F.state.resize(n);
        F.stacks.assign((size_t)n * STACK, 0);
#if defined(__x86_64__)
        F.sp.resize(n);
#else
        F.ctx.resize(n);
#endif
    }
    F.fibers = true;
    for (int t = 0; t < n; t++) {
        start(t);
        F.state[t] = 0;
    }
    for (;;) {
        for (int t = 0; t < n; t++) {
            if (F.state[t] == 2) continue;
            F.state[t] = 0;
            F.cur = t;
            resume(t);
        }
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
        F.cur = t;
        F.fn(F.p);
    }
}

}  // namespace

int emu_register(const char* name, Fn fn) {
    registry()[name] = fn;
    return 0;
}

EmuDim3 emu_thread_idx() {
    unsigned t = (unsigned)F.cur, bx = emu_block_dim.x, by = emu_block_dim.y;
    return EmuDim3{t % bx, (t / bx) % by, t / (bx * by)};
}

void emu_syncthreads() {
    if (!F.fibers) {
        fprintf(stderr, "emulator: a kernel launched as barrier-free reached __syncthreads()\n");
        abort();
    }
    F.state[F.cur] = 1;
    yield();
}

#include "act.cu"
#include "adamw.cu"
#include "attention.cu"
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
