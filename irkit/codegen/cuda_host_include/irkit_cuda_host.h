// irkit's CUDA built-ins for the host: what the `cuda-host` backend force-includes so that
// the very CUDA C that NVRTC compiles is compiled by the host C++ compiler and run.
//
// Threads of a block are fibers (on x86-64 a stack switch of a dozen instructions, elsewhere
// or with IRKIT_UCONTEXT defined ucontext), run one after another in a fixed order; a
// kernel that has no barrier runs each thread to its end in turn. __syncthreads() hands
// control back to the block's scheduler, which resumes every fiber before any passes the
// barrier, as a GPU's barrier does. The order alternates (first to last thread, then last
// to first) between blocks and between barrier phases, so a missing barrier shows whichever
// thread reads first: on a GPU the order is unspecified, here each block takes one of the
// two extremes. Blocks run one after another; __shared__ arrays are one per host thread, as
// one block is live at a time. Shared memory starts each launch as left by the last one, not
// zeroed (on a GPU it is undefined too).
//
// A launch in clusters of C blocks (sm_90's __cluster_dims__) runs a cluster's C blocks at
// once: the fibers of all of them under one scheduler, each block with its own shared memory
// (the printer places a clustered kernel's shared buffers in the running block's arena,
// `cta_shared()`), which the others reach at the same offset in theirs (`peer`): a multicast
// TMA copy lands in each block of its mask, a remote arrival counts on the other block's
// mbarrier, and a cluster barrier waits for every thread of every block of the cluster.
#pragma once
#define IRKIT_CUDA_HOST 1  // the printed prelude leaves its PTX helpers to this header

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __grid_constant__
#define __restrict__ __restrict
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x, y, z;
};

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
static const int warpSize = 32;

// --- bit reinterpretation -----------------------------------------------------------------

inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float v) { int i; std::memcpy(&i, &v, 4); return i; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double v) { long long i; std::memcpy(&i, &v, 8); return i; }

// --- vector types (CUDA's alignment: 8 or 16 bytes) ---------------------------------------

struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) double2 { double x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

// --- f16 and bf16: storage types, converted with round-to-nearest-even ----------------------

struct __half { unsigned short bits; };
struct __nv_bfloat16 { unsigned short bits; };
// pairs (one 32-bit register of an mma) and 16-byte vectors of them, as irkit's CUDA prints
struct __attribute__((aligned(4))) irkit_f16x2 { __half v[2]; };
struct __attribute__((aligned(16))) irkit_f16x8 { __half v[8]; };
struct __attribute__((aligned(4))) irkit_bf16x2 { __nv_bfloat16 v[2]; };
struct __attribute__((aligned(16))) irkit_bf16x8 { __nv_bfloat16 v[8]; };
struct __attribute__((aligned(4))) irkit_f8x4 { unsigned char v[4]; };  // an 8-bit mma register

inline float __half2float(__half h) {
  unsigned sign = (h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ffu;
  unsigned out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (man << 13);  // inf, NaN
  } else if (exp != 0) {
    out = sign | ((exp + 112) << 23) | (man << 13);  // normal: rebias 15 -> 127
  } else if (man == 0) {
    out = sign;  // zero
  } else {  // subnormal: normalize
    int e = -1;
    do { man <<= 1; e++; } while (!(man & 0x400u));
    out = sign | ((unsigned)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  return __int_as_float((int)out);
}

inline __half __float2half_rn(float f) {
  unsigned x = (unsigned)__float_as_int(f);
  unsigned short sign = (unsigned short)((x >> 16) & 0x8000u);
  unsigned exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
  if (exp == 0xff) return {(unsigned short)(sign | 0x7c00u | (man ? 0x200u : 0))};
  int e = (int)exp - 127 + 15;
  if (e >= 0x1f) return {(unsigned short)(sign | 0x7c00u)};  // overflow: inf
  if (e <= 0) {  // subnormal or zero in f16
    if (e < -10) return {sign};
    man |= 0x800000u;
    unsigned shift = (unsigned)(14 - e);
    unsigned half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1u))) half++;
    return {(unsigned short)(sign | half)};
  }
  unsigned half = ((unsigned)e << 10) | (man >> 13), rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;  // may carry into inf
  return {(unsigned short)(sign | half)};
}

inline float __bfloat162float(__nv_bfloat16 b) { return __int_as_float((int)((unsigned)b.bits << 16)); }

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned x = (unsigned)__float_as_int(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {(unsigned short)((x >> 16) | 0x40u)};  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return {(unsigned short)(x >> 16)};
}

// --- the block scheduler ------------------------------------------------------------------

#if defined(__x86_64__) && !defined(IRKIT_UCONTEXT)
#define IRKIT_FAST_SWITCH 1
// irkit_fiber_switch(save, load): callee-saved registers pushed, the stack pointer stored in
// *save, `load` made the stack pointer, its registers popped, and return into it. A local
// symbol of this program's object (no .globl): every program has its own.
extern "C" void irkit_fiber_switch(void** save, void* load);
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type irkit_fiber_switch,@function\n"
    "irkit_fiber_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size irkit_fiber_switch, .-irkit_fiber_switch\n");
#else
#define IRKIT_FAST_SWITCH 0
#endif

namespace irkit_host {

enum State { RUNNABLE, AT_BARRIER, AT_MBARRIER, AT_CLUSTER, DONE };

struct Fiber {
#if IRKIT_FAST_SWITCH
  void* sp;  // the saved stack pointer (callee-saved registers on the stack below it)
#else
  ucontext_t context;
#endif
  State state;
  int barrier;  // the source line of the barrier it waits at
};

constexpr size_t STACK = 256 * 1024;  // per thread; a guard page below each
constexpr size_t PAGE = 4096;

thread_local Fiber* current = nullptr;
thread_local unsigned fiber_now = 0;  // the running fiber's index among the cluster's threads
thread_local unsigned cta_threads = 1;  // threads a block
thread_local bool in_fiber = false;
thread_local bool stray_barrier = false;
thread_local void (*body)(void*) = nullptr;
thread_local void* body_args = nullptr;
thread_local char* stacks = nullptr;
thread_local size_t stacks_held = 0;

#if IRKIT_FAST_SWITCH
// x86-64: a switch saves the callee-saved registers on the current stack, stores the stack
// pointer, loads the other one and pops its registers: no system call (glibc's swapcontext
// saves the signal mask with one, and was most of a barrier-heavy kernel's time).
thread_local void* scheduler_sp = nullptr;

inline void fiber_exit();

inline void fiber_entry() {
  body(body_args);
  fiber_exit();
}

inline void fiber_prepare(Fiber& f, char* stack, size_t size) {
  // stack top, 16-byte aligned: [0 (the entry's return address), fiber_entry, 6 registers]
  void** top = (void**)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
  *--top = nullptr;
  *--top = (void*)&fiber_entry;
  for (int i = 0; i < 6; i++) *--top = nullptr;
  f.sp = top;
}
inline void fiber_resume(Fiber& f) { irkit_fiber_switch(&scheduler_sp, f.sp); }
inline void fiber_yield() { irkit_fiber_switch(&current->sp, scheduler_sp); }
inline void fiber_exit() {
  current->state = DONE;
  void* unused;
  irkit_fiber_switch(&unused, scheduler_sp);  // never resumed
}
#else
thread_local ucontext_t scheduler;

inline void fiber_entry() {
  body(body_args);
  current->state = DONE;  // returning resumes the scheduler (uc_link)
}

inline void fiber_prepare(Fiber& f, char* stack, size_t size) {
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = stack;
  f.context.uc_stack.ss_size = size;
  f.context.uc_link = &scheduler;
  makecontext(&f.context, fiber_entry, 0);
}
inline void fiber_resume(Fiber& f) { swapcontext(&scheduler, &f.context); }
inline void fiber_yield() { swapcontext(&current->context, &scheduler); }
#endif

inline void release_stacks() {
  if (stacks) munmap(stacks, stacks_held * (STACK + PAGE));
  stacks = nullptr;
  stacks_held = 0;
}

inline bool reserve_stacks(size_t n) {
  if (n <= stacks_held) return true;
  release_stacks();
  void* p = mmap(nullptr, n * (STACK + PAGE), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  stacks = (char*)p;
  stacks_held = n;
  for (size_t i = 0; i < n; i++) mprotect(stacks + i * (STACK + PAGE), PAGE, PROT_NONE);
  return true;
}

inline void set_thread(unsigned t) {
  threadIdx = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
}

inline void set_block(unsigned b) {
  blockIdx = {b % gridDim.x, b / gridDim.x % gridDim.y, b / (gridDim.x * gridDim.y)};
}

// A clustered launch's shared memory: an arena a block of the cluster, ARENA bytes apart
// (the most shared memory a block may have on sm_90, 1024-byte aligned as the swizzled TMA
// destinations need), so a shared address's counterpart in block r of the cluster is at the
// same offset in arena r (what PTX's mapa gives).
constexpr size_t ARENA = 232448;
thread_local unsigned char* arenas = nullptr;
thread_local size_t arenas_held = 0;
thread_local unsigned cluster_now = 1;  // blocks in the running launch's clusters
thread_local bool cluster_fault = false;  // a block outside the cluster, or ended, named
thread_local unsigned cta_live[16];  // threads of each block of the cluster not yet ended

inline void release_arenas() {
  if (arenas) munmap(arenas, arenas_held * ARENA);
  arenas = nullptr;
  arenas_held = 0;
}

inline bool reserve_arenas(size_t n) {
  if (n <= arenas_held) return true;
  release_arenas();
  void* p = mmap(nullptr, n * ARENA, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  arenas = (unsigned char*)p;
  arenas_held = n;
  return true;
}

inline unsigned char* cta_shared() { return arenas + (size_t)(fiber_now / cta_threads) * ARENA; }

// `p` (in the running block's arena) at the same offset in block `rank`'s
inline unsigned char* peer(const void* p, unsigned rank) {
  const unsigned mine = fiber_now / cta_threads;
  // a block that has ended: its shared memory is gone (on a GPU, undefined behaviour)
  if (rank >= cluster_now || !arenas || !cta_live[rank]) {
    cluster_fault = true;
    return (unsigned char*)p;
  }
  return (unsigned char*)p + ((ptrdiff_t)rank - (ptrdiff_t)mine) * (ptrdiff_t)ARENA;
}

// The running thread's index among the cluster's (its block's rank, then threadIdx
// linearized): what the per-thread and per-warp emulation state is indexed by.
inline unsigned linear_thread() { return fiber_now; }

// Warp-collective emulation state: per warp two staging areas for mma and two for shuffles
// (each used alternately, so a lane that runs ahead into the next one never overwrites what
// a slower lane still reads), and per thread the parity of its next mma and shuffle.
struct MmaStage {
  float a[32][16], b[32][8], c[32][4];  // m16n8k16 uses the first 8 and 4 values a lane
};
thread_local MmaStage* mma_stages = nullptr;
thread_local double* shfl_stages = nullptr;  // [warp][parity][lane]; f32 and f64 both exact
thread_local unsigned char* warp_parity = nullptr;  // [thread][0: mma, 1: shuffle]
thread_local size_t warp_held = 0;

// cp.async: per thread, its copies in flight (in issue order) and its committed groups.
// A copy lands when a wait lets it (the latest moment the GPU may land it), so a missing
// or short wait reads what the stage held before.
struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes;
  unsigned group;
};
constexpr unsigned ASYNC_CAPACITY = 64;  // copies a thread may have in flight
thread_local AsyncCopy* async_copies = nullptr;  // [thread][ASYNC_CAPACITY]
thread_local unsigned* async_state = nullptr;  // [thread][0: copies in flight, 1: groups]
thread_local bool async_overflow = false;
}  // namespace irkit_host

// TMA (see irkit/dialects/warp_tma.py): a tensor map is the tensor's address, its extents
// and byte strides and the box, innermost dimension first (the driver's order)
struct irkit_tensor_map {
  const unsigned char* base;
  unsigned rank, itemsize;
  unsigned long long dims[5], strides[5];  // strides[d]: bytes between indices along d
  unsigned box[5];
  unsigned swizzle;  // 0, or 128: rows of 128 bytes land with chunk ^= row % 8
};

namespace irkit_host {
// An mbarrier's 64 bits: arrivals a phase, arrivals still due in this one, and the bytes
// still to land (two's complement, shifted) above the phase's parity bit.
struct Mbarrier {
  unsigned short count, pending;
  int tx_phase;
};
static_assert(sizeof(Mbarrier) == 8, "an mbarrier is 64 bits");

// The block's TMA copies in flight, in issue order: each lands when a thread waits on its
// mbarrier (the latest moment a GPU may land it), so a missing or early wait reads what
// the stage held before; built with IRKIT_TMA_EARLY, as it is issued (the earliest).
struct TmaCopy {
  Mbarrier* bar;
  unsigned char* dst;
  irkit_tensor_map map;
  int c[5];
};
constexpr unsigned TMA_CAPACITY = 512 * 8;  // copies a cluster may have in flight
thread_local TmaCopy* tma_copies = nullptr;
thread_local unsigned tma_count = 0;
thread_local unsigned long long mbarrier_events = 0;  // progress on any mbarrier
}  // namespace irkit_host

// wgmma (see irkit/dialects/warp.py): a descriptor is the tile's address and its offsets
struct irkit_wgmma_desc_t {
  const unsigned char* p;
  unsigned lbo, sbo, mode;  // mode 1: 128-byte swizzle
};
inline irkit_wgmma_desc_t irkit_wgmma_desc(const void* p, unsigned lbo, unsigned sbo, unsigned mode) {
  return {(const unsigned char*)p, lbo, sbo, mode};
}

namespace irkit_host {
// per thread, its wgmma ops in flight (in issue order) and its committed groups; an op
// computes when a wait lets it, so a result read early, or a tile changed before the
// wait, shows
typedef float (*WgmmaDecode)(const unsigned char*);  // an element's value from its bytes
struct WgmmaInFlight {
  irkit_wgmma_desc_t a, b;
  float* d;
  unsigned n, group, k;  // k: 16, or 32 of 8-bit floats (A and B both K-major)
  WgmmaDecode decode_a, decode_b;
};
constexpr unsigned WGMMA_CAPACITY = 64;
thread_local WgmmaInFlight* wgmma_ops = nullptr;  // [thread][WGMMA_CAPACITY]
thread_local unsigned* wgmma_state = nullptr;  // [thread][0: in flight, 1: groups]

inline void warp_release() {
  std::free(mma_stages);
  std::free(shfl_stages);
  std::free(warp_parity);
  std::free(async_copies);
  std::free(async_state);
  std::free(wgmma_ops);
  std::free(wgmma_state);
  std::free(tma_copies);
  tma_copies = nullptr;
  wgmma_ops = nullptr;
  wgmma_state = nullptr;
  mma_stages = nullptr;
  shfl_stages = nullptr;
  warp_parity = nullptr;
  async_copies = nullptr;
  async_state = nullptr;
  warp_held = 0;
}

inline bool warp_reset(unsigned threads) {
  if (threads > warp_held) {
    warp_release();
    const size_t warps = threads / 32 + 1;
    mma_stages = (MmaStage*)std::malloc(sizeof(MmaStage) * 2 * warps);
    shfl_stages = (double*)std::malloc(sizeof(double) * 2 * 32 * warps);
    warp_parity = (unsigned char*)std::malloc(2 * threads);
    async_copies = (AsyncCopy*)std::malloc(sizeof(AsyncCopy) * ASYNC_CAPACITY * threads);
    async_state = (unsigned*)std::malloc(sizeof(unsigned) * 2 * threads);
    wgmma_ops = (WgmmaInFlight*)std::malloc(sizeof(WgmmaInFlight) * WGMMA_CAPACITY * threads);
    wgmma_state = (unsigned*)std::malloc(sizeof(unsigned) * 2 * threads);
    tma_copies = (TmaCopy*)std::malloc(sizeof(TmaCopy) * TMA_CAPACITY);
    if (!mma_stages || !shfl_stages || !warp_parity || !async_copies || !async_state ||
        !wgmma_ops || !wgmma_state || !tma_copies) {
      warp_release();
      return false;
    }
    warp_held = threads;
  }
  std::memset(warp_parity, 0, 2 * threads);
  std::memset(async_state, 0, sizeof(unsigned) * 2 * threads);
  std::memset(wgmma_state, 0, sizeof(unsigned) * 2 * threads);
  tma_count = 0;
  return true;
}

// Unloading the library (a program's copy dropped) gives back the unloading thread's fiber
// stacks and staging areas: each stack's guard page splits the mapping, so a block of 256
// threads holds 512 of the process's memory maps (Linux allows 65530), and a process that
// loads many copies of a program (attribution's placements) ran out of them.
__attribute__((destructor)) static void release_thread_buffers() {
  release_stacks();
  release_arenas();
  warp_release();
}

enum Status {
  OK = 0,
  DIVERGENT_BARRIER = 1,
  NO_MEMORY = 2,
  BARRIER_WITHOUT_FIBERS = 3,
  ASYNC_OVERFLOW = 4,
  MBARRIER_HANG = 5,
  TMA_IN_FLIGHT = 6,
  OUTSIDE_CLUSTER = 7
};

inline void run_fiber(Fiber& f, unsigned t, unsigned first_block) {
  f.state = RUNNABLE;
  fiber_now = t;
  set_thread(t % cta_threads);
  set_block(first_block + t / cta_threads);
  current = &f;
  in_fiber = true;
  fiber_resume(f);
  in_fiber = false;
  if (f.state == DONE) cta_live[t / cta_threads]--;
}

// Whether every thread of block `cta` (threads [cta * n, cta * n + n) of `pool`) waits at
// one block barrier: then they all pass it.
inline bool block_meets(const Fiber* pool, unsigned cta, unsigned n) {
  for (unsigned t = cta * n; t < cta * n + n; t++) {
    if (pool[t].state != AT_BARRIER || pool[t].barrier != pool[cta * n].barrier) return false;
  }
  return true;
}

// One cluster's blocks (`cluster` of them from `first_block`, each `threads` threads) to
// their end. Each phase runs every runnable fiber until it waits or ends, then the fibers
// waiting on mbarriers again until none moves; then a block whose threads all wait at one
// barrier passes it, and the cluster passes a cluster barrier that all its threads wait at.
// A phase in which nothing ran, moved or passed is a hang: threads at different barriers,
// some ended while others wait, or an mbarrier phase that never completes.
inline int run_cluster(Fiber* pool, unsigned first_block, unsigned cluster, unsigned threads) {
  const unsigned all = threads * cluster;
  for (unsigned phase = 0;; phase++) {
    const bool reverse = (first_block + phase) & 1;
    const unsigned long long before = mbarrier_events;
    bool moved = false;
    for (unsigned i = 0; i < all; i++) {
      const unsigned t = reverse ? all - 1 - i : i;
      if (pool[t].state != RUNNABLE) continue;
      run_fiber(pool[t], t, first_block);
      moved = true;
    }
    // threads waiting on an mbarrier run again until they pass it or nothing moves
    for (bool waiting = true; waiting;) {
      waiting = false;
      const unsigned long long events = mbarrier_events;
      for (unsigned i = 0; i < all; i++) {
        const unsigned t = reverse ? all - 1 - i : i;
        if (pool[t].state != AT_MBARRIER) continue;
        run_fiber(pool[t], t, first_block);
        waiting |= pool[t].state == AT_MBARRIER;
      }
      if (events == mbarrier_events) break;
    }
    moved |= before != mbarrier_events;
    unsigned done = 0;
    bool at_mbarrier = false, meets = true;
    for (unsigned t = 0; t < all; t++) {
      done += pool[t].state == DONE;
      at_mbarrier |= pool[t].state == AT_MBARRIER;
      meets &= pool[t].state == AT_CLUSTER && pool[t].barrier == pool[0].barrier;
    }
    if (done == all) return OK;
    if (meets) {  // the cluster barrier
      for (unsigned t = 0; t < all; t++) pool[t].state = RUNNABLE;
      continue;
    }
    for (unsigned c = 0; c < cluster; c++) {
      if (!block_meets(pool, c, threads)) continue;
      for (unsigned t = c * threads; t < c * threads + threads; t++) pool[t].state = RUNNABLE;
      moved = true;
    }
    // on a GPU such a wait never ends (a hang) or is undefined behaviour
    if (!moved) return at_mbarrier ? MBARRIER_HANG : DIVERGENT_BARRIER;
  }
}

// One launch: geometry = grid x, y, z, block x, y, z, blocks a cluster (0 or 1: none).
// `fibers`: the kernel has a barrier.
inline int launch(const unsigned* geometry, int fibers, void (*fn)(void*), void* args) {
  gridDim = {geometry[0], geometry[1], geometry[2]};
  blockDim = {geometry[3], geometry[4], geometry[5]};
  const unsigned cluster = geometry[6] > 1 ? geometry[6] : 1;
  if (cluster > 16) return OUTSIDE_CLUSTER;
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  const unsigned all = threads * cluster;
  body = fn;
  body_args = args;
  stray_barrier = false;
  cluster_fault = false;
  cluster_now = cluster;
  cta_threads = threads;
  Fiber* pool = nullptr;
  if (cluster > 1 && (!fibers || blocks % cluster)) return OUTSIDE_CLUSTER;
  if (cluster > 1 && !reserve_arenas(cluster)) return NO_MEMORY;
  if (fibers) {
    if (!reserve_stacks(all)) return NO_MEMORY;
    pool = (Fiber*)std::calloc(all, sizeof(Fiber));
    if (!pool) return NO_MEMORY;
  }
  int status = OK;
  for (unsigned b = 0; b < blocks && status == OK; b += cluster) {
    if (!fibers) {
      set_block(b);
      fiber_now = 0;
      for (unsigned i = 0; i < threads; i++) {
        set_thread(b & 1 ? threads - 1 - i : i);
        fn(args);
      }
      if (stray_barrier) status = BARRIER_WITHOUT_FIBERS;
      continue;
    }
    if (!warp_reset(all)) { status = NO_MEMORY; break; }
    for (unsigned t = 0; t < all; t++) {
      fiber_prepare(pool[t], stacks + t * (STACK + PAGE) + PAGE, STACK);
      pool[t].state = RUNNABLE;
    }
    for (unsigned c = 0; c < cluster; c++) cta_live[c] = threads;
    status = run_cluster(pool, b, cluster, threads);
    if (status == OK && tma_count) status = TMA_IN_FLIGHT;
  }
  std::free(pool);
  if (status == OK && async_overflow) status = ASYNC_OVERFLOW;
  if (status == OK && cluster_fault) status = OUTSIDE_CLUSTER;
  async_overflow = false;
  return status;
}

}  // namespace irkit_host

namespace irkit_host {
// the calling thread waits at the block's barrier on `line` (AT_BARRIER) or the cluster's
// (AT_CLUSTER) until the scheduler lets every thread of the block (cluster) pass it
inline void wait_at(State state, int line) {
  if (!in_fiber) { stray_barrier = true; return; }
  current->state = state;
  current->barrier = line;
  fiber_yield();
}
inline void barrier(int line) { wait_at(AT_BARRIER, line); }
inline void cluster_barrier(int line) { wait_at(AT_CLUSTER, line); }
}  // namespace irkit_host

// the call site's line tells the barriers of a kernel apart (the printer puts one per line)
#define __syncthreads() irkit_host::barrier(__LINE__)
#define irkit_cluster_barrier() irkit_host::cluster_barrier(__LINE__)

#define __shfl_xor_sync(mask, value, lane_mask, width) \
  irkit_host::shfl_xor((value), (lane_mask), (width), __LINE__)

// --- tensor cores: mma.sync m16n8k16 (see irkit/dialects/warp.py for the fragment layout) -

namespace irkit_host {
// Each lane leaves its fragments in its warp's staging area and waits at a block-wide
// barrier (every lane of every warp reaches the mma together, as the GPU requires of a
// warp); then each lane computes its 4 results from the whole tiles, C first, then the 16
// products in k order, in f32.
// The calling lane's staging area for its next mma (its warp's, alternating), and its lane.
inline MmaStage& mma_stage(unsigned& lane) {
  const unsigned linear = linear_thread();
  lane = linear % 32;
  return mma_stages[2 * (linear / 32) + (warp_parity[2 * linear]++ & 1u)];
}

// gpu.shuffle xor (CUDA's __shfl_xor_sync, full mask): each lane leaves its value in its
// warp's staging area and waits at a block-wide barrier (every lane of every warp shuffles
// together, as irkit's reductions do), then reads lane ^ lane_mask's, within groups of
// `width` lanes (a source past the group's end reads the lane's own value, as on the GPU).
template <typename T>
inline T shfl_xor(T value, int lane_mask, int width, int line) {
  const unsigned linear = linear_thread();
  const unsigned lane = linear % 32;
  double* stage = shfl_stages + 32 * (2 * (linear / 32) + (warp_parity[2 * linear + 1]++ & 1u));
  stage[lane] = (double)value;
  barrier(line);
  const unsigned group = lane - lane % (unsigned)width;
  const unsigned source = lane ^ (unsigned)lane_mask;
  return source >= group + (unsigned)width ? value : (T)stage[source];
}

// m16n8k16 (K = 16), the 8-bit m16n8k32 (K = 32, its values widened) and TF32's m16n8k8
// (K = 8, rounded): a lane's values come in 32-bit registers of p = K / 8 (2 of 16 bits, 4
// of 8, 1 of 32): lane (g, t) holds A's rows g and g + 8 at columns p t + {0..p-1} and
// 4p + p t + {0..p-1}, and B's k at the same columns of column g (irkit/dialects/warp.py)
template <unsigned K>
inline void mma(const float* a, const float* b, const float* c, float* d, int line) {
  constexpr unsigned p = K / 8;
  unsigned lane;
  MmaStage& s = mma_stage(lane);
  for (unsigned i = 0; i < 4 * p; i++) s.a[lane][i] = a[i];
  for (unsigned i = 0; i < 2 * p; i++) s.b[lane][i] = b[i];
  for (unsigned i = 0; i < 4; i++) s.c[lane][i] = c[i];
  barrier(line);
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; i++) {
    const unsigned row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float sum = s.c[(row % 8) * 4 + col / 2][col % 2 + 2 * (row / 8)];
    for (unsigned k = 0; k < K; k++) {
      const unsigned at = (k % (4 * p)) / p, in = k % p, half = k / (4 * p);
      const float x = s.a[(row % 8) * 4 + at][in + p * (row / 8) + 2 * p * half];
      const float y = s.b[col * 4 + at][in + p * half];
      sum += x * y;
    }
    d[i] = sum;
  }
}
}  // namespace irkit_host

#define IRKIT_MMA_HOST(KIND, T, TO_FLOAT)                                                     \
  inline void irkit_mma_m16n8k16_##KIND(T a0, T a1, T a2, T a3, T a4, T a5, T a6, T a7, T b0, \
                                        T b1, T b2, T b3, float c0, float c1, float c2,       \
                                        float c3, float* d0, float* d1, float* d2, float* d3) { \
    const float a[8] = {TO_FLOAT(a0), TO_FLOAT(a1), TO_FLOAT(a2), TO_FLOAT(a3),               \
                        TO_FLOAT(a4), TO_FLOAT(a5), TO_FLOAT(a6), TO_FLOAT(a7)};              \
    const float b[4] = {TO_FLOAT(b0), TO_FLOAT(b1), TO_FLOAT(b2), TO_FLOAT(b3)};              \
    const float c[4] = {c0, c1, c2, c3};                                                      \
    float d[4];                                                                               \
    irkit_host::mma<16>(a, b, c, d, __LINE__);                                                \
    *d0 = d[0]; *d1 = d[1]; *d2 = d[2]; *d3 = d[3];                                           \
  }
IRKIT_MMA_HOST(f16, __half, __half2float)
IRKIT_MMA_HOST(bf16, __nv_bfloat16, __bfloat162float)

// the same with A's and B's values in pairs (one 32-bit register each on the GPU)
#define IRKIT_MMA_HOST_X2(KIND, P)                                                            \
  inline void irkit_mma_m16n8k16_##KIND##_x2(P a0, P a1, P a2, P a3, P b0, P b1, float c0,    \
                                             float c1, float c2, float c3, float* d0,         \
                                             float* d1, float* d2, float* d3) {               \
    irkit_mma_m16n8k16_##KIND(a0.v[0], a0.v[1], a1.v[0], a1.v[1], a2.v[0], a2.v[1], a3.v[0],  \
                              a3.v[1], b0.v[0], b0.v[1], b1.v[0], b1.v[1], c0, c1, c2, c3,    \
                              d0, d1, d2, d3);                                                \
  }
IRKIT_MMA_HOST_X2(f16, irkit_f16x2)
IRKIT_MMA_HOST_X2(bf16, irkit_bf16x2)

// ldmatrix.x4 (see irkit/dialects/warp.py): lane l's pair j is row l / 4, columns
// 2 (l % 4) + {0, 1} of matrix j, whose origin is the base plus o_j elements. Each lane reads
// its own pairs (shared memory is the block's), so no exchange between the lanes is needed.
#define IRKIT_LDMATRIX_HOST(KIND, T, P)                                                        \
  inline void irkit_ldmatrix_x4_##KIND(const T* base, int stride, int o0, int o1, int o2,      \
                                       int o3, P* d0, P* d1, P* d2, P* d3) {                   \
    const unsigned lane = threadIdx.x & 31u;                                                   \
    const int at = (int)(lane / 4u) * stride + 2 * (int)(lane % 4u);                           \
    P* d[4] = {d0, d1, d2, d3};                                                                \
    const int o[4] = {o0, o1, o2, o3};                                                         \
    for (int j = 0; j < 4; j++) {                                                              \
      d[j]->v[0] = base[o[j] + at];                                                            \
      d[j]->v[1] = base[o[j] + at + 1];                                                        \
    }                                                                                          \
  }
IRKIT_LDMATRIX_HOST(f16, __half, irkit_f16x2)
IRKIT_LDMATRIX_HOST(bf16, __nv_bfloat16, irkit_bf16x2)

// of 8-bit values (either format; each matrix 8 rows of 16 bytes): lane l's register j is
// row l / 4, columns 4 (l % 4) + {0, 1, 2, 3} of matrix j
inline void irkit_ldmatrix_x4_f8(const unsigned char* base, int stride, int o0, int o1, int o2,
                                 int o3, irkit_f8x4* d0, irkit_f8x4* d1, irkit_f8x4* d2,
                                 irkit_f8x4* d3) {
  const unsigned lane = threadIdx.x & 31u;
  const int at = (int)(lane / 4u) * stride + 4 * (int)(lane % 4u);
  irkit_f8x4* d[4] = {d0, d1, d2, d3};
  const int o[4] = {o0, o1, o2, o3};
  for (int j = 0; j < 4; j++)
    for (int q = 0; q < 4; q++) d[j]->v[q] = base[o[j] + at + q];
}

// ldmatrix.x4.trans: lane l's pair j is rows 2 (l % 4) + {0, 1}, column l / 4 of matrix j.
#define IRKIT_LDMATRIX_TRANS_HOST(KIND, T, P)                                                  \
  inline void irkit_ldmatrix_x4_##KIND##_trans(const T* base, int stride, int o0, int o1,      \
                                               int o2, int o3, P* d0, P* d1, P* d2, P* d3) {   \
    const unsigned lane = threadIdx.x & 31u;                                                   \
    const int at = 2 * (int)(lane % 4u) * stride + (int)(lane / 4u);                           \
    P* d[4] = {d0, d1, d2, d3};                                                                \
    const int o[4] = {o0, o1, o2, o3};                                                         \
    for (int j = 0; j < 4; j++) {                                                              \
      d[j]->v[0] = base[o[j] + at];                                                            \
      d[j]->v[1] = base[o[j] + at + stride];                                                   \
    }                                                                                          \
  }
IRKIT_LDMATRIX_TRANS_HOST(f16, __half, irkit_f16x2)
IRKIT_LDMATRIX_TRANS_HOST(bf16, __nv_bfloat16, irkit_bf16x2)

// a swizzled tile (irkit/dialects/warp.py, swizzle_column): 16-byte chunks XOR the row's phase
inline int irkit_swizzle_column(int row, int column, int row_length) {
  const int chunks = row_length / 8, period = chunks < 8 ? chunks : 8;
  const int group = chunks >= 8 ? 1 : 8 / chunks;
  return 8 * ((column / 8) ^ (row / group % period)) + column % 8;
}

// ldmatrix.x4 on a swizzled tile: matrix j at (row + r_j, col + c_j); lane l's pair j is
// row l / 4, columns 2 (l % 4) + {0, 1} of it (transposed: rows 2 (l % 4) + {0, 1},
// column l / 4), each element where the swizzle put it
#define IRKIT_LDMATRIX_SW_HOST(KIND, T, P, TRANS)                                              \
  inline void irkit_ldmatrix_x4_##KIND(const T* tile, int stride, int row, int col, int r0,    \
                                       int c0, int r1, int c1, int r2, int c2, int r3, int c3, \
                                       P* d0, P* d1, P* d2, P* d3) {                           \
    const int lane = (int)(threadIdx.x & 31u);                                                 \
    P* d[4] = {d0, d1, d2, d3};                                                                \
    const int r[4] = {r0, r1, r2, r3}, c[4] = {c0, c1, c2, c3};                                \
    for (int j = 0; j < 4; j++) {                                                              \
      for (int q = 0; q < 2; q++) {                                                            \
        const int rr = row + r[j] + (TRANS ? 2 * (lane % 4) + q : lane / 4);                   \
        const int cc = col + c[j] + (TRANS ? lane / 4 : 2 * (lane % 4) + q);                   \
        d[j]->v[q] = tile[rr * stride + irkit_swizzle_column(rr, cc, stride)];                 \
      }                                                                                        \
    }                                                                                          \
  }
IRKIT_LDMATRIX_SW_HOST(f16_sw, __half, irkit_f16x2, false)
IRKIT_LDMATRIX_SW_HOST(bf16_sw, __nv_bfloat16, irkit_bf16x2, false)
IRKIT_LDMATRIX_SW_HOST(f16_trans_sw, __half, irkit_f16x2, true)
IRKIT_LDMATRIX_SW_HOST(bf16_trans_sw, __nv_bfloat16, irkit_bf16x2, true)

// --- cp.async (see irkit/dialects/warp.py): queued per thread, landed by the waits --------

namespace irkit_host {
inline void land(const AsyncCopy& c) {
  std::memcpy(c.dst, c.src, (size_t)c.bytes);
  std::memset((char*)c.dst + c.bytes, 0, (size_t)(16 - c.bytes));
}
}  // namespace irkit_host

inline void irkit_cp_async16(void* dst, const void* src, int bytes) {
  using namespace irkit_host;
  const unsigned t = linear_thread();
  unsigned& count = async_state[2 * t];
  if (bytes < 0 || bytes > 16 || count == ASYNC_CAPACITY) {
    async_overflow = true;  // the launch fails, naming the fault
    return;
  }
  async_copies[ASYNC_CAPACITY * t + count++] = {dst, src, bytes, async_state[2 * t + 1]};
}

inline void irkit_cp_async_commit() { irkit_host::async_state[2 * irkit_host::linear_thread() + 1]++; }

namespace irkit_host {
// A wait on the calling thread's queue (`state` is its [in flight, groups committed]): each
// entry of a group older than the `pending` most recent ones is done by `finish`, in issue
// order, and leaves the queue.
template <typename Entry, typename Finish>
inline void wait_groups(Entry* mine, unsigned* state, unsigned pending, Finish finish) {
  unsigned kept = 0;
  for (unsigned i = 0; i < state[0]; i++) {
    if (mine[i].group + pending < state[1]) finish(mine[i]);
    else mine[kept++] = mine[i];
  }
  state[0] = kept;
}
}  // namespace irkit_host

template <int N>
inline void irkit_cp_async_wait() {
  using namespace irkit_host;
  const unsigned t = linear_thread();
  wait_groups(async_copies + ASYNC_CAPACITY * t, async_state + 2 * t, N, land);
}

// --- wgmma: queued per thread, computed at the waits ----------------------------------------

namespace irkit_host {
inline float f16_at(const unsigned char* p) {
  unsigned short bits;
  std::memcpy(&bits, p, 2);
  return __half2float(__half{bits});
}
inline float bf16_at(const unsigned char* p) {
  unsigned short bits;
  std::memcpy(&bits, p, 2);
  return __bfloat162float(__nv_bfloat16{bits});
}

// The 128-byte swizzle on a shared address: bits 4-6 (the 16-byte chunk) XOR bits 7-9
// (the 128-byte row's position in 1024 bytes), as TMA writes and wgmma reads it.
inline unsigned char* swizzled(const unsigned char* p) {
  const uintptr_t a = (uintptr_t)p;
  return (unsigned char*)(a ^ (((a >> 7) & 7) << 4));
}

// One thread's N/2 results: row 16 w + g (+ 8), column 8 (i / 4) + 2 t (+ 1) of the 64 x N
// tile, each its C plus the k products in k order, in f32. Without swizzle, A's element
// (m, k) is at (m / 8) SBO + (k / p) LBO + (m % 8) 16 + (k % p) s bytes (K-major core
// matrices: elements of s bytes, p = 16 / s of them a row), B's (k, n) at (n / 8) SBO +
// (k / 8) LBO + (k % 8) 16 + (n % 8) 2 (N-major), or of 8-bit floats K-major as A's. With
// the 128-byte swizzle (rows of 128 bytes), A's at (m / 8) SBO + (m % 8) 128 + 2 k (LBO
// unused: k stays in one row), B's at (n / 64) LBO + (k / 8) SBO + (k % 8) 128 + (n % 64)
// 2, each address then swizzled.
inline void wgmma_compute(const WgmmaInFlight& w) {
  const unsigned t = linear_thread() % 128, warp = t / 32, g = t % 32 / 4, q = t % 4;
  const unsigned s = w.k == 32 ? 1 : 2, p = 16 / s;
  for (unsigned i = 0; i < w.n / 2; i++) {
    const unsigned row = 16 * warp + g + 8 * (i / 2 % 2), col = 8 * (i / 4) + 2 * q + i % 2;
    float sum = w.d[i];
    for (unsigned k = 0; k < w.k; k++) {
      const unsigned char *a, *b;
      if (w.a.mode) a = swizzled(w.a.p + (row / 8) * w.a.sbo + (row % 8) * 128 + k * 2);
      else a = w.a.p + (row / 8) * w.a.sbo + (k / p) * w.a.lbo + (row % 8) * 16 + (k % p) * s;
      if (w.b.mode) {
        b = swizzled(w.b.p + (col / 64) * w.b.lbo + (k / 8) * w.b.sbo + (k % 8) * 128 + (col % 64) * 2);
      } else if (w.k == 32) {
        b = w.b.p + (col / 8) * w.b.sbo + (k / p) * w.b.lbo + (col % 8) * 16 + (k % p) * s;
      } else {
        b = w.b.p + (col / 8) * w.b.sbo + (k / 8) * w.b.lbo + (k % 8) * 16 + (col % 8) * 2;
      }
      sum += w.decode_a(a) * w.decode_b(b);
    }
    w.d[i] = sum;
  }
}

// a wgmma queued: k 16 (f16, bf16) or 32 (8-bit floats, decoded by the printed helpers)
inline void wgmma_queue(irkit_wgmma_desc_t a, irkit_wgmma_desc_t b, float* d, unsigned n,
                        unsigned k, WgmmaDecode decode_a, WgmmaDecode decode_b) {
  const unsigned t = linear_thread();
  unsigned& count = wgmma_state[2 * t];
  if (count == WGMMA_CAPACITY) {
    async_overflow = true;  // the launch fails, naming the fault
    return;
  }
  wgmma_ops[WGMMA_CAPACITY * t + count++] = {a, b, d, n, wgmma_state[2 * t + 1], k, decode_a,
                                             decode_b};
}

inline void wgmma_issue(irkit_wgmma_desc_t a, irkit_wgmma_desc_t b, float* d, unsigned n,
                        bool bf16) {
  const WgmmaDecode decode = bf16 ? bf16_at : f16_at;
  wgmma_queue(a, b, d, n, 16, decode, decode);
}
}  // namespace irkit_host

inline void irkit_wgmma_fence() {}
inline void irkit_wgmma_commit() { irkit_host::wgmma_state[2 * irkit_host::linear_thread() + 1]++; }

template <int N>
inline void irkit_wgmma_wait() {
  using namespace irkit_host;
  const unsigned t = linear_thread();
  wait_groups(wgmma_ops + WGMMA_CAPACITY * t, wgmma_state + 2 * t, N, wgmma_compute);
}

namespace irkit_host {
// TF32: the input rounded to 10 mantissa bits, to nearest with ties away (cvt.rna.tf32.f32).
inline float tf32(float x) {
  unsigned bits = (unsigned)__float_as_int(x);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;
  return __int_as_float((int)bits);
}

}  // namespace irkit_host

inline void irkit_mma_m16n8k8_tf32(float a0, float a1, float a2, float a3, float b0, float b1,
                                   float c0, float c1, float c2, float c3, float* d0, float* d1,
                                   float* d2, float* d3) {
  using irkit_host::tf32;  // mma.sync m16n8k8 TF32: m16n8k16's layout of one value a register
  const float a[4] = {tf32(a0), tf32(a1), tf32(a2), tf32(a3)}, b[2] = {tf32(b0), tf32(b1)};
  const float c[4] = {c0, c1, c2, c3};
  float d[4];
  irkit_host::mma<8>(a, b, c, d, __LINE__);
  *d0 = d[0]; *d1 = d[1]; *d2 = d[2]; *d3 = d[3];
}

// --- TMA and mbarriers: copies queued per block, landed by the waits on their barrier -----

namespace irkit_host {
// `strides`: bytes between consecutive indices of dimensions 1 .. rank - 1 (the driver's
// globalStrides; dimension 0's elements are contiguous)
inline irkit_tensor_map tensor_map(const void* base, unsigned itemsize, unsigned rank,
                                   const unsigned long long* dims,
                                   const unsigned long long* strides, const unsigned* box,
                                   unsigned swizzle) {
  irkit_tensor_map m{(const unsigned char*)base, rank, itemsize, {}, {}, {}, swizzle};
  for (unsigned d = 0; d < rank; d++) {
    m.dims[d] = dims[d];
    m.strides[d] = d ? strides[d - 1] : itemsize;
    m.box[d] = box[d];
  }
  return m;
}

inline void phase_done_if_due(Mbarrier& m) {
  if (m.pending == 0 && (m.tx_phase >> 1) == 0) {
    m.tx_phase ^= 1;
    m.pending = m.count;
  }
  mbarrier_events++;
}

// The box lands in the destination's row-major order (swizzled if the map says so); an
// element outside the tensor is 0.
inline void land_tma(const TmaCopy& t) {
  const irkit_tensor_map& m = t.map;
  unsigned long long total = 1;
  for (unsigned d = 0; d < m.rank; d++) total *= m.box[d];
  for (unsigned long long e = 0; e < total; e++) {
    unsigned long long rest = e, offset = 0;
    bool inside = true;
    for (unsigned d = 0; d < m.rank; d++) {
      const long long at = (long long)t.c[d] + (long long)(rest % m.box[d]);
      rest /= m.box[d];
      inside &= at >= 0 && at < (long long)m.dims[d];
      offset += (unsigned long long)at * m.strides[d];
    }
    unsigned char* dst = t.dst + e * m.itemsize;
    if (m.swizzle) dst = swizzled(dst);
    if (inside) std::memcpy(dst, m.base + offset, m.itemsize);
    else std::memset(dst, 0, m.itemsize);
  }
  t.bar->tx_phase -= (int)(total * m.itemsize) << 1;
  phase_done_if_due(*t.bar);
}

inline void tma_queue(void* dst, const irkit_tensor_map* map, const int* c, void* bar) {
  if (tma_count == TMA_CAPACITY) {
    async_overflow = true;  // the launch fails, naming the fault
    return;
  }
  TmaCopy& t = tma_copies[tma_count++];
  t = {(Mbarrier*)bar, (unsigned char*)dst, *map, {}};
  for (unsigned d = 0; d < map->rank; d++) t.c[d] = c[d];
#ifdef IRKIT_TMA_EARLY
  // the earliest moment instead: the box lands as it is issued, so a stage handed back
  // while a wgmma still reads it (which computes at its wait) shows
  land_tma(t);
  tma_count--;
#endif
}

// `mask` (multicast): the box lands in each block of the cluster whose rank's bit is set,
// at `dst`'s offset in its shared memory, counting down the mbarrier at `bar`'s offset there
inline void tma_issue(void* dst, const irkit_tensor_map* map, const int* c, void* bar,
                      unsigned mask) {
  if (!mask) { tma_queue(dst, map, c, bar); return; }
  for (unsigned r = 0; r < 16; r++) {
    if (mask >> r & 1u) tma_queue(peer(dst, r), map, c, peer(bar, r));
  }
}
}  // namespace irkit_host

inline void irkit_mbarrier_init(void* bar, unsigned count) {
  *(irkit_host::Mbarrier*)bar = {(unsigned short)count, (unsigned short)count, 0};
  irkit_host::mbarrier_events++;
}

inline void irkit_mbarrier_arrive_expect_tx(void* bar, unsigned bytes) {
  irkit_host::Mbarrier& m = *(irkit_host::Mbarrier*)bar;
  m.tx_phase += (int)bytes << 1;
  m.pending--;
  irkit_host::phase_done_if_due(m);
}

inline void irkit_mbarrier_arrive(void* bar) {
  irkit_host::Mbarrier& m = *(irkit_host::Mbarrier*)bar;
  m.pending--;
  irkit_host::phase_done_if_due(m);
}

// an arrival on the barrier at `bar`'s offset in block `cta` of the cluster
inline void irkit_mbarrier_arrive_cluster(void* bar, unsigned cta) {
  irkit_mbarrier_arrive(irkit_host::peer(bar, cta));
}

// setmaxnreg: the host has no register file to share
template <int N> inline void irkit_setmaxnreg_inc() {}
template <int N> inline void irkit_setmaxnreg_dec() {}

// Returns once the phase of parity `parity` has completed; first lands the copies that
// complete on this barrier, and while the phase is still open lets the other threads run.
inline void irkit_mbarrier_wait(void* bar, unsigned parity) {
  using namespace irkit_host;
  Mbarrier& m = *(Mbarrier*)bar;
  for (;; current->state = AT_MBARRIER, fiber_yield()) {
    if ((unsigned)(m.tx_phase & 1) != parity) break;
    unsigned kept = 0;
    for (unsigned i = 0; i < tma_count; i++) {
      if (tma_copies[i].bar == &m) land_tma(tma_copies[i]);
      else tma_copies[kept++] = tma_copies[i];
    }
    tma_count = kept;
    if ((unsigned)(m.tx_phase & 1) != parity) break;
    if (!in_fiber) { stray_barrier = true; return; }
  }
  mbarrier_events++;  // a wait returned: progress
}
