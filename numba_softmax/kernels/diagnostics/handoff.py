"""The DAG chain's primitives alone: how long one worker takes to hand a task to another (GPU only;
``python -m bench probe handoff``).

Thread 0 of a block times itself with ``%globaltimer`` over ``rounds`` repetitions in one launch; each
word on its own 128-byte line, as the scheduler's words are; every wait bounded by :data:`MAX_POLLS`.

* ``pingpong_kernel`` <<<2, 32>>>: block 0 sets its flag to i and waits for block 1's to read i; block 1
  answers. Ordered: a ``fence.acq_rel.gpu`` then a relaxed store (the scheduler's publish), acquire
  polls; else relaxed stores and polls. One way = elapsed / (2 rounds).
* ``atomic_chain_kernel`` <<<blocks, 32>>>: dependent ``atomicAdd`` round trips on one word, alone or
  with every block's thread 0 adding to it (the DAG's claim counters under load).
* ``load_chain_kernel`` <<<1, 32>>>: a dependent chain of loads of one word (an L2 hit), acquire or relaxed.

Each launcher runs its kernel once, checks what it counted, and returns nanoseconds per round.
"""

import statistics

import numpy as np
from numba import cuda, int32, int64

from ..ordering import fence_acq_rel_gpu, globaltimer, load_acquire_gpu, load_relaxed_gpu, smid, store_relaxed_gpu

#: int32 words per 128-byte line: each flag on its own line, as the scheduler's words are.
LINE = 32
#: Polls before a side gives up (a probe bug must not hang the GPU): far above any real wait.
MAX_POLLS = 1 << 24


@cuda.jit(device=True)
def wait_for(flags, index, value, ordered):
    """Poll flags[index] until it reads ``value`` (acquire loads when ``ordered``); False past MAX_POLLS."""
    polls = 0
    while (load_acquire_gpu(flags, index) if ordered else load_relaxed_gpu(flags, index)) != value:
        polls += 1
        if polls > MAX_POLLS:
            return False
    return True


@cuda.jit
def pingpong_kernel(flags, rounds, ordered, out):
    """Block 0's thread 0 sets flag A to i and waits for flag B == i; block 1's thread 0 waits for
    A == i and answers on B. ``out`` = [elapsed ns of block 0, its SM, block 1's SM, failures]."""
    if cuda.threadIdx.x != 0:
        return
    mine = 0 if cuda.blockIdx.x == 0 else LINE
    theirs = LINE - mine
    start = int64(globaltimer())
    for i in range(1, rounds + 1):
        if cuda.blockIdx.x == 1 and not wait_for(flags, theirs, i, ordered):  # the pong side answers
            out[3] += 1
            return
        if ordered:
            fence_acq_rel_gpu()  # release: what was written before the flag is visible with it
        store_relaxed_gpu(flags, mine, int32(i))
        if cuda.blockIdx.x == 0 and not wait_for(flags, theirs, i, ordered):
            out[3] += 1
            return
    if cuda.blockIdx.x == 0:
        out[0] = int64(globaltimer()) - start
        out[1] = smid()
    else:
        out[2] = smid()


@cuda.jit
def atomic_chain_kernel(counter, rounds, out):
    """Thread 0 of every block: ``rounds`` dependent ``atomicAdd`` on counter[0] (the next index
    is computed from the previous result, always 0, so no add can start before the last returned).
    out[block] = elapsed ns."""
    if cuda.threadIdx.x != 0:
        return
    index = int32(0)
    start = int64(globaltimer())
    for _ in range(rounds):
        old = cuda.atomic.add(counter, index, 1)
        index = (old >> 30) & 1  # 0 while fewer than 2**30 adds
    out[cuda.blockIdx.x] = int64(globaltimer()) - start + index


@cuda.jit
def load_chain_kernel(words, rounds, acquire, out):
    """Thread 0: ``rounds`` dependent loads of words[0] (= 0, so the next index is 0 again)."""
    if cuda.threadIdx.x != 0:
        return
    index = int32(0)
    start = int64(globaltimer())
    for _ in range(rounds):
        index = load_acquire_gpu(words, index) if acquire else load_relaxed_gpu(words, index)
    out[0] = int64(globaltimer()) - start + index


def pingpong_ns(rounds, ordered):
    flags = cuda.to_device(np.zeros(2 * LINE, dtype=np.int32))
    out = cuda.to_device(np.zeros(4, dtype=np.int64))
    pingpong_kernel[2, 32](flags, rounds, ordered, out)
    cuda.synchronize()
    elapsed, sm0, sm1, failures = (int(v) for v in out.copy_to_host())
    if failures:
        raise RuntimeError(f"ping-pong ({'ordered' if ordered else 'relaxed'}) gave up after {MAX_POLLS} polls")
    return {"one_way_ns": elapsed / (2 * rounds), "sms": [sm0, sm1], "rounds": rounds}


def atomic_chain_ns(rounds, blocks):
    counter = cuda.to_device(np.zeros(LINE, dtype=np.int32))
    out = cuda.to_device(np.zeros(blocks, dtype=np.int64))
    atomic_chain_kernel[blocks, 32](counter, rounds, out)
    cuda.synchronize()
    per_block = out.copy_to_host() / rounds
    total = int(counter.copy_to_host()[0])
    if total != rounds * blocks:
        raise RuntimeError(f"atomic chain: counter {total} != {rounds} x {blocks}")
    return {"median_ns": float(statistics.median(per_block)), "p90_ns": float(np.percentile(per_block, 90)),
            "blocks": blocks, "rounds": rounds}


def load_chain_ns(rounds, acquire):
    words = cuda.to_device(np.zeros(LINE, dtype=np.int32))
    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    load_chain_kernel[1, 32](words, rounds, acquire, out)
    cuda.synchronize()
    return {"ns": float(out.copy_to_host()[0]) / rounds, "rounds": rounds}
