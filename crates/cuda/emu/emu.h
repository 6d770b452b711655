// Host C++ stand-ins for the CUDA built-ins the kernels use, so that the kernel sources
// compile with the host compiler and run on the emulator in emu.cpp: blocks run one after
// another; the threads of a block run as fibers that switch at __syncthreads().
#pragma once
#include <math.h>
#include <string.h>

struct EmuDim3 {
    unsigned x, y, z;
};

// The running thread's index is set by the launcher each time it switches threads (a read
// of threadIdx is a load, not a call: kernels read it in their inner loops).
extern EmuDim3 emu_block_idx, emu_block_dim, emu_grid_dim, emu_thread_idx;
void emu_syncthreads();
// Warp-level operations (shuffles, mma.sync): each is a pair of warp barriers, so every
// thread of a warp must call them in the same order, as the kernels that use them do (the
// launcher reports a warp whose threads disagree).
void emu_mma_bf16_16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1);
unsigned emu_shfl_xor(unsigned v, int m);

#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim
#define threadIdx emu_thread_idx
#define __syncthreads() emu_syncthreads()
#define __global__
#define __device__
#define __forceinline__ inline
// Shared memory. Blocks run one at a time, so each shared array is one host array, allocated
// on the first block that reaches its declaration and kept (a function static per template
// instance, as on the device). emu_shared places it so that it ends where an inaccessible
// page begins, and a page before it is inaccessible too: an access past its end (or well
// before its start) stops the run with the array's name, the kernel and the thread; a write
// into the bytes between the guards but outside the array stops it after the block. Before
// every block the launcher fills every shared array with 0xff bytes (NaN as fp32, bf16 and
// fp64), so a read of shared memory the block has not written shows up as NaN, not as the
// previous block's values.
void* emu_shared(unsigned long bytes, unsigned long align, const char* name, const char* file, int line);
#define SHARED(type, name, n) \
    static type* const name = (type*)emu_shared(sizeof(type) * (n), alignof(type), #name, __FILE__, __LINE__)
#define SHARED_ALIGNED(type, name, n) \
    static type* const name = (type*)emu_shared(sizeof(type) * (n), 16, #name, __FILE__, __LINE__)
#define SHARED2(type, name, rows, cols)                                                                  \
    static type(*const name)[cols] =                                                                     \
        (type(*)[cols])emu_shared(sizeof(type) * (rows) * (cols), alignof(type), #name, __FILE__, __LINE__)
// A raw __shared__ declaration would be an unguarded static.
#define __shared__ _Pragma("GCC error \"declare shared arrays with SHARED, SHARED_ALIGNED or SHARED2 (common.cuh)\"")

inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

struct P;
int emu_register(const char* name, void (*fn)(const P*));

#define KERNEL(name)                                           \
    extern "C" void name(const P p);                           \
    static void name##_emu(const P* q) { name(*q); }            \
    static int name##_registered = emu_register(#name, name##_emu); \
    extern "C" void name(const P p)
