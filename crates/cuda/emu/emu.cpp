// The kernel emulator: every kernel file compiled for the host, a registry of kernels by
// name, and a launcher that runs a grid block by block with the block's threads as fibers
// (a small stack switch). A fiber runs until __syncthreads(), a warp operation or its end; a
// block barrier is released when every thread of the block has reached it, a warp
// operation when every thread of the warp has (run_block_fibers). Launches are serialised
// (one emulated device). Shared arrays and device buffers lie between guard pages, with the
// slack beside them checked for writes; shared arrays are poisoned before each block (emu.h);
// the order of blocks, warps and threads alternates, so that races show.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <pthread.h>
#include <unistd.h>

#include <iterator>
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
    // 0: runnable, 1: waiting at a block barrier, 2: finished, 3: waiting at a warp operation.
    std::vector<int> state;
    // threadIdx of each thread of the block (computed once per launch).
    std::vector<EmuDim3> tidx;
    int n = 0;
    int cur = 0;
    Fn fn = nullptr;
    const P* p = nullptr;
    // Threads run as fibers (else as plain calls, for kernels without barriers).
    bool fibers = true;
    // Warps, and threads within a warp, run in descending order (odd blocks; see
    // boost_emu_launch).
    bool reverse = false;
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
// The running launch: its kernel and its OS thread, for the guards' messages.
const char* RUNNING = nullptr;
pthread_t LAUNCHER;

size_t PAGE = 0;

// Memory between two inaccessible pages: `start` (aligned to `align`) ends where `hi_guard`
// begins; `lo_guard` lies before the first page it touches.
struct Guarded {
    char* map;
    size_t map_bytes;
    char* lo_guard;
    char* hi_guard;
    char* start;
    size_t bytes;
};

// A shared array (emu.h): its memory and its declaration.
struct SharedArray {
    Guarded g;
    const char* name;
    const char* file;
    int line;
};
std::vector<SharedArray> SHARED_ARRAYS;

// Device buffers by their start (any thread allocates and frees).
std::map<const char*, Guarded> DEVICE_BUFFERS;
// The device buffers' alignment (the kernels' widest loads are 16 bytes).
const size_t DEVICE_ALIGN = 16;
std::mutex DEVICE_LOCK;

// Where a guard page was reached: the kernel, block and thread if the faulting thread is
// running one, else the emulator's own code (a copy, the emulated GEMM).
void where(char* out, size_t n) {
    if (RUNNING != nullptr && pthread_equal(pthread_self(), LAUNCHER))
        snprintf(out, n, "kernel %s, block (%u, %u, %u), thread (%u, %u, %u)", RUNNING, emu_block_idx.x,
                        emu_block_idx.y, emu_block_idx.z, emu_thread_idx.x, emu_thread_idx.y, emu_thread_idx.z);
    else
        snprintf(out, n, "code outside a kernel (a copy, the emulated GEMM)");
}

// Writes the message and aborts: the run is over, and the message is what is left. `at` is
// who ("kernel K, block (…), thread (…)"), `verb` what it did ("reached", "wrote"), `what`
// names the memory, `declared` where it was declared ("file:line, " or "").
[[noreturn]] void die_at(const char* at, const char* verb, const char* what, const char* declared, const Guarded& g,
                         const char* a) {
    char msg[768];
    bool past = a >= g.start + g.bytes;
    int n = snprintf(msg, sizeof msg, "emulator: %s %s byte %lld of %s (%s%zu bytes): %s\n", at, verb,
                     (long long)(a - g.start), what, declared, g.bytes, past ? "past its end" : "before its start");
    if (n > 0) (void)!write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    abort();
}

// A guard page reached by the running thread.
[[noreturn]] void die(const char* what, const char* declared, const Guarded& g, const char* a) {
    char at[256];
    where(at, sizeof at);
    die_at(at, "reached", what, declared, g, a);
}

// The slack: the bytes between the guards outside [start, start + bytes), i.e. the first
// page's part before `start` and the alignment's few bytes after the end. It holds SLACK_BYTE
// (NaN to a read, as the poison) and is checked after each block (shared arrays) or launch
// (device buffers), so an access a little before an array's start or into the alignment
// after its end, which no guard page catches, still shows: a read as NaN, a write as a
// stopped run. A write of 0xff bytes there goes unseen.
const unsigned char SLACK_BYTE = 0xff;

void fill_slack(const Guarded& g) {
    char* first = g.lo_guard + PAGE;
    memset(first, SLACK_BYTE, (size_t)(g.start - first));
    memset(g.start + g.bytes, SLACK_BYTE, (size_t)(g.hi_guard - (g.start + g.bytes)));
}

// The first byte of [from, to) that is not SLACK_BYTE, or null.
const char* first_changed(const char* from, const char* to) {
    static char clean[4096];
    static std::once_flag once;
    std::call_once(once, [] { memset(clean, SLACK_BYTE, sizeof clean); });
    for (const char* a = from; a < to; a += sizeof clean) {
        size_t n = (size_t)(to - a) < sizeof clean ? (size_t)(to - a) : sizeof clean;
        if (memcmp(a, clean, n) == 0) continue;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)a[i] != SLACK_BYTE) return a + i;
    }
    return nullptr;
}

// The first slack byte that no longer holds SLACK_BYTE, or null.
const char* slack_written(const Guarded& g) {
    const char* a = first_changed(g.lo_guard + PAGE, g.start);
    return a != nullptr ? a : first_changed(g.start + g.bytes, g.hi_guard);
}

bool in_guard(const Guarded& g, const char* a) {
    return (a >= g.hi_guard && a < g.hi_guard + PAGE) || (a >= g.lo_guard && a < g.lo_guard + PAGE);
}

// A shared array's name and declaration, for die_at's `what` and `declared`.
struct Named {
    char what[128], declared[128];
    explicit Named(const SharedArray& s) {
        snprintf(what, sizeof what, "__shared__ array `%s`", s.name);
        snprintf(declared, sizeof declared, "%s:%d, ", s.file, s.line);
    }
};

// The device buffer whose mapping holds `a` by `holds` (a guard page, or the pages between
// them): the last buffer that starts at or below `a`, or the next one. DEVICE_LOCK held.
template <typename Holds>
const Guarded* device_buffer_near(const char* a, Holds holds) {
    auto next = DEVICE_BUFFERS.upper_bound(a);
    if (next != DEVICE_BUFFERS.end() && holds(next->second)) return &next->second;
    if (next != DEVICE_BUFFERS.begin() && holds(std::prev(next)->second)) return &std::prev(next)->second;
    return nullptr;
}

// Names the shared array or device buffer whose guard page holds `addr`, then aborts;
// returns for any other address.
void report_guard_hit(const void* addr) {
    const char* a = (const char*)addr;
    for (const SharedArray& s : SHARED_ARRAYS) {
        if (!in_guard(s.g, a)) continue;
        Named n(s);
        die(n.what, n.declared, s.g, a);
    }
    // A thread that faults while another allocates: the buffer goes unnamed, the fault is
    // still fatal.
    if (!DEVICE_LOCK.try_lock()) return;
    const Guarded* g = device_buffer_near(a, [&](const Guarded& b) { return in_guard(b, a); });
    if (g != nullptr) die("a device buffer", "", *g, a);
    DEVICE_LOCK.unlock();
}

struct sigaction PREVIOUS_SEGV;

void on_segv(int sig, siginfo_t* info, void* ctx) {
    report_guard_hit(info->si_addr);
    // Not a guard page: whoever handled SIGSEGV before (Rust's stack-overflow check, or the
    // default action) takes it.
    if (PREVIOUS_SEGV.sa_flags & SA_SIGINFO) {
        PREVIOUS_SEGV.sa_sigaction(sig, info, ctx);
    } else if (PREVIOUS_SEGV.sa_handler != SIG_IGN && PREVIOUS_SEGV.sa_handler != SIG_DFL) {
        PREVIOUS_SEGV.sa_handler(sig);
    } else {
        signal(SIGSEGV, SIG_DFL);  // the fault repeats under the default action
    }
}

// `bytes` zeroed between guard pages (the handler installed on first use), or null.
bool guarded(size_t bytes, size_t align, Guarded* g) {
    static std::once_flag once;
    std::call_once(once, [] {
        PAGE = (size_t)sysconf(_SC_PAGESIZE);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &PREVIOUS_SEGV);
    });
    size_t span = (bytes + align - 1) / align * align;
    size_t pages = (span + PAGE - 1) / PAGE;
    g->map_bytes = (pages + 2) * PAGE;
    g->map = (char*)mmap(nullptr, g->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return false;
    g->lo_guard = g->map;
    g->hi_guard = g->map + (pages + 1) * PAGE;
    g->start = g->hi_guard - span;
    g->bytes = bytes;
    mprotect(g->lo_guard, PAGE, PROT_NONE);
    mprotect(g->hi_guard, PAGE, PROT_NONE);
    fill_slack(*g);
    return true;
}

// A shared array's bytes to 0xff (see emu.h).
void poison(const SharedArray& s) { memset(s.g.start, 0xff, s.g.bytes); }

// Before a block: every shared array poisoned.
void poison_shared() {
    for (const SharedArray& s : SHARED_ARRAYS) poison(s);
}

// After a block: a write into a shared array's slack stops the run, naming the array and the
// block (not the thread: the block has run).
void check_shared_slack() {
    for (const SharedArray& s : SHARED_ARRAYS) {
        const char* a = slack_written(s.g);
        if (a == nullptr) continue;
        char at[192];
        snprintf(at, sizeof at, "kernel %s, block (%u, %u, %u),", RUNNING, emu_block_idx.x, emu_block_idx.y,
                 emu_block_idx.z);
        Named n(s);
        die_at(at, "wrote", n.what, n.declared, s.g, a);
    }
}

// A write into device buffer `g`'s slack stops the run; `who` names the kernel or host code
// that ran since the last check.
void check_device_slack(const char* who, const Guarded& g) {
    const char* a = slack_written(g);
    if (a != nullptr) die_at(who, "wrote", "a device buffer", "", g, a);
}

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

const int WARP = 32;

// The runnable thread of warp `w` that runs after thread `t` (t = -1: the first), or -1.
int next_in_warp(int w, int t) {
    int lo = w * WARP, hi = lo + WARP < F.n ? lo + WARP : F.n;
    if (F.reverse) {
        for (int u = (t < 0 ? hi : t) - 1; u >= lo; u--)
            if (F.state[u] == 0) return u;
        return -1;
    }
    for (int u = t < 0 ? lo : t + 1; u < hi; u++)
        if (F.state[u] == 0) return u;
    return -1;
}

// Leaves the running fiber for the next runnable thread of its warp, or the scheduler after
// the last: a direct switch, so a barrier costs one switch per thread rather than two.
void pass_on() {
    int from = F.cur, to = next_in_warp(from / WARP, from);
    if (to >= 0) set_current(to);
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

// Runs one block as fibers; returns 0, -2 when threads of the block disagree on a barrier, or
// -3 when threads of a warp disagree on a warp operation.
//
// Warps run one after another between two block barriers: warp by warp, each warp's threads
// in rounds, a round running every runnable thread of the warp up to its next warp operation
// (mma.sync, a shuffle), its block barrier or its end, until the whole warp has reached the
// block barrier or its end. So a warp operation synchronises its warp only, as on the
// device, and a block barrier the whole block: a missing __syncthreads() between warps
// shows even where warp operations sit between the accesses.
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
    int warps = (n + WARP - 1) / WARP;
    for (;;) {
        for (int k = 0; k < warps; k++) {
            int w = F.reverse ? warps - 1 - k : k;
            for (;;) {
                int first = next_in_warp(w, -1);
                if (first < 0) break;
                set_current(first);
                switch_fibers(-1, first);
                int size = (w + 1) * WARP < n ? WARP : n - w * WARP, at_op = 0;
                for (int t = w * WARP; t < w * WARP + size; t++) at_op += F.state[t] == 3;
                if (at_op == 0) break;
                if (at_op < size) return -3;
                for (int t = w * WARP; t < w * WARP + size; t++) F.state[t] = 0;
            }
        }
        int done = 0, waiting = 0;
        for (int t = 0; t < n; t++) {
            done += F.state[t] == 2;
            waiting += F.state[t] == 1;
        }
        if (done == n) return 0;
        if (done > 0 && waiting > 0) return -2;
        for (int t = 0; t < n; t++) F.state[t] = 0;
    }
}

// Runs one block of a kernel without barriers: each thread to its end in turn.
void run_block_plain(int n) {
    F.fibers = false;
    for (int k = 0; k < n; k++) {
        set_current(F.reverse ? n - 1 - k : k);
        F.fn(F.p);
    }
}

}  // namespace

void* emu_shared(unsigned long bytes, unsigned long align, const char* name, const char* file, int line) {
    SharedArray s;
    if (!guarded(bytes, align, &s.g)) {
        fprintf(stderr, "emulator: no memory for __shared__ array `%s` (%s:%d, %lu bytes)\n", name, file, line, bytes);
        abort();
    }
    s.name = name;
    const char* slash = strrchr(file, '/');
    s.file = slash ? slash + 1 : file;
    s.line = line;
    poison(s);
    SHARED_ARRAYS.push_back(s);
    return s.g.start;
}

// Device memory: `bytes` zeroed (as the GPU backend's allocations are), DEVICE_ALIGN-aligned,
// ending where an inaccessible page begins, so a kernel's read or write past a buffer's end
// stops the run and says where; null when out of memory.
extern "C" void* boost_emu_alloc(unsigned long bytes) {
    Guarded g;
    if (!guarded(bytes, DEVICE_ALIGN, &g)) return nullptr;
    std::lock_guard<std::mutex> guard(DEVICE_LOCK);
    DEVICE_BUFFERS[g.start] = g;
    return g.start;
}

// After host code that wrote device memory at `inside` (an upload, the emulated GEMM's
// output): the slack of the buffer whose pages hold that address is checked, and a write there
// stops the run naming `who`. Only that buffer: uploads are many, and checking every buffer
// after each would cost their product.
extern "C" void boost_emu_check_buffer(const void* inside, const char* who) {
    const char* a = (const char*)inside;
    std::lock_guard<std::mutex> buffers(DEVICE_LOCK);
    auto between_guards = [&](const Guarded& b) { return a >= b.lo_guard + PAGE && a < b.hi_guard; };
    const Guarded* g = device_buffer_near(a, between_guards);
    if (g != nullptr) check_device_slack(who, *g);
}

// Frees what boost_emu_alloc returned.
extern "C" void boost_emu_free(void* start) {
    std::lock_guard<std::mutex> guard(DEVICE_LOCK);
    auto it = DEVICE_BUFFERS.find((const char*)start);
    if (it == DEVICE_BUFFERS.end()) {
        fprintf(stderr, "emulator: freeing %p, which is not a device buffer\n", start);
        abort();
    }
    check_device_slack("a kernel or a copy (found when it was freed)", it->second);
    munmap(it->second.map, it->second.map_bytes);
    DEVICE_BUFFERS.erase(it);
}

int emu_register(const char* name, Fn fn) {
    registry()[name] = fn;
    return 0;
}

// Waits at a block barrier (1) or a warp operation (3).
static void wait_at(int state, const char* what) {
    if (!F.fibers) {
        fprintf(stderr, "emulator: kernel %s, launched as barrier-free, reached %s\n", RUNNING, what);
        abort();
    }
    F.state[F.cur] = state;
    pass_on();
}

void emu_syncthreads() { wait_at(1, "__syncthreads()"); }

// Warp operations. Each thread leaves its operands at its own slot, every thread of the warp
// waits for the others, reads its warp's slots, and waits again before any slot can be
// overwritten.
static void warp_sync() { wait_at(3, "a warp operation"); }
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
    warp_sync();
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
    warp_sync();
}

// shfl.sync.bfly: v of the lane lane ^ m of the running thread's warp.
unsigned emu_shfl_xor(unsigned v, int m) {
    shfl_in[F.cur] = v;
    warp_sync();
    unsigned r = shfl_in[F.cur ^ m];
    warp_sync();
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
#include "step.cu"
#include "xent.cu"

// The emulator's own checks (emu_dev.rs's tests), writing into v[0]: a block of more than 64
// threads writes past a 64-element shared array, or device buffer; a block reads shared
// memory without the barrier it needs, within a warp and across warps with a warp operation
// between; half a warp reaches a shuffle; every block writes one element; and block 1 reads
// what block 0 wrote to shared memory (NaN once poisoned).
KERNEL(emu_check_overflow) {
    SHARED(float, sh, 64);
    (void)p;
    sh[threadIdx.x] = 1.0f;
}
// Thread t writes element t of the device buffer v[0] (of 64 or 13 elements in the tests).
KERNEL(emu_check_device_overflow) { ((float*)p.v[0].p)[threadIdx.x] = 1.0f; }
// Thread t writes element t − 1 of the device buffer v[0]: thread 0 the element before it.
KERNEL(emu_check_device_underflow) { ((float*)p.v[0].p)[(int)threadIdx.x - 1] = 1.0f; }
// Thread t writes element t − 1 of a shared array: thread 0 the element before it.
KERNEL(emu_check_underflow) {
    SHARED(float, sh, 64);
    (void)p;
    sh[(int)threadIdx.x - 1] = 1.0f;
}
// Thread t writes element t of a 16-byte-aligned shared array of 13 floats (52 bytes, then 12
// bytes of alignment before its guard page).
KERNEL(emu_check_aligned_overflow) {
    SHARED_ALIGNED(float, sh13, 13);
    (void)p;
    sh13[threadIdx.x] = 1.0f;
}
// Reads just outside arrays into v[0]: the element before a shared array, before the device
// buffer v[1] and after it (v[1] holds 13 floats, so element 13 lies in its alignment).
KERNEL(emu_check_read_outside) {
    SHARED(float, sh, 64);
    const float* d = (const float*)p.v[1].p;
    sh[threadIdx.x] = 1.0f;
    st(p.v[0], 0, 0, sh[-1]);
    st(p.v[0], 0, 1, d[-1]);
    st(p.v[0], 0, 2, d[13]);
}
// A missing barrier: thread t reads what thread t − 1 writes in the same phase, into v[0]'s
// row of the block.
KERNEL(emu_check_race) {
    SHARED(float, sh, 64);
    unsigned t = threadIdx.x;
    sh[t] = (float)t;
    st(p.v[0], blockIdx.x, t, t > 0 ? sh[t - 1] : 0.0f);
}
// Thread t reads what thread t ± 32, of the other warp, wrote before a shuffle: a warp
// operation synchronises its warp, not the block.
KERNEL(emu_check_race_across_warps) {
    SHARED(float, sh, 64);
    unsigned t = threadIdx.x;
    sh[t] = (float)t;
    unsigned u = emu_shfl_xor(t, 1);
    st(p.v[0], blockIdx.x, t, u == (t ^ 1u) ? sh[(t + 32) % 64] : -1.0f);
}
KERNEL(emu_check_divergent_shuffle) {
    if (threadIdx.x < 16) st(p.v[0], 0, threadIdx.x, (float)emu_shfl_xor(threadIdx.x, 1));
}
// Every block writes its index to one element: a race between blocks.
KERNEL(emu_check_last_block) {
    if (threadIdx.x == 0) st(p.v[0], 0, 0, (float)blockIdx.x);
}
KERNEL(emu_check_stale) {
    SHARED(float, sh, 64);
    if (blockIdx.x == 0)
        sh[threadIdx.x] = (float)threadIdx.x;
    else
        st(p.v[0], 0, threadIdx.x, sh[threadIdx.x]);
}

// Returns 0; -1 for an unknown kernel; -2 when a block's threads disagree on a barrier; -3
// when a warp's threads disagree on a warp operation.
// `sync`: the kernel uses __syncthreads(), so every block runs as fibers; other kernels run
// each thread to its end in turn.
extern "C" int boost_emu_launch(const char* name, const unsigned* grid, const unsigned* block, const P* p,
                                int sync) {
    std::lock_guard<std::mutex> guard(LOCK);
    auto it = registry().find(name);
    if (it == registry().end()) return -1;
    F.fn = it->second;
    F.p = p;
    RUNNING = it->first.c_str();
    LAUNCHER = pthread_self();
    struct Done {
        ~Done() { RUNNING = nullptr; }
    } done;
    emu_grid_dim = EmuDim3{grid[0], grid[1], grid[2]};
    emu_block_dim = EmuDim3{block[0], block[1], block[2]};
    int n = (int)(block[0] * block[1] * block[2]);
    F.tidx.resize(n);
    for (unsigned t = 0; t < (unsigned)n; t++)
        F.tidx[t] = EmuDim3{t % block[0], (t / block[0]) % block[1], t / (block[0] * block[1])};
    // Blocks run in order on a kernel's even launches and in reverse order on its odd ones, so
    // that a block that depends on another's writes in the same launch (a race between blocks
    // on the device) sees them one time and not the other.
    static std::map<std::string, unsigned long> launches;
    bool backwards = launches[it->first]++ % 2 == 1;
    unsigned long blocks = (unsigned long)grid[0] * grid[1] * grid[2];
    for (unsigned long k = 0; k < blocks; k++) {
        unsigned long i = backwards ? blocks - 1 - k : k;
        unsigned x = (unsigned)(i % grid[0]), y = (unsigned)(i / grid[0] % grid[1]),
                 z = (unsigned)(i / ((unsigned long)grid[0] * grid[1]));
        emu_block_idx = EmuDim3{x, y, z};
        poison_shared();
        // Between two barriers, warps (and a warp's threads) run one after another, in
        // ascending order in even blocks and descending in odd ones: a kernel whose threads
        // read shared memory that another thread writes in the same phase (a missing barrier)
        // sees that write in one order and not in the other (then the poison, or an older
        // value), so its results differ from the reference.
        F.reverse = (x + y + z) % 2 == 1;
        if (sync) {
            int r = run_block_fibers(n);
            if (r != 0) return r;
        } else {
            run_block_plain(n);
        }
        check_shared_slack();
    }
    char who[160];
    snprintf(who, sizeof who, "kernel %s", RUNNING);
    std::lock_guard<std::mutex> buffers(DEVICE_LOCK);
    for (const auto& b : DEVICE_BUFFERS) check_device_slack(who, b.second);
    return 0;
}

extern "C" unsigned long boost_emu_sizeof_p() { return sizeof(P); }

extern "C" int boost_emu_has(const char* name) { return registry().count(name) ? 1 : 0; }
