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
// Warp-level operations (shuffles, mma.sync), emulated through the block: each is a pair of
// block barriers, so every thread of the block must call them in the same order, as the
// kernels that use them do.
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
// Blocks run one at a time, so a function-static array is the block's shared memory.
#define __shared__ static

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
