/* Stream memory operations (cuStreamWriteValue*, cuStreamWaitValue*,
 * cuStreamBatchMemOp): queued like copies and run by the stream's worker
 * in order.  A wait holds its stream, and only its stream, until the word
 * satisfies it, as on a GPU; it polls, since any thread or kernel may
 * write the word.  A faulted context drops it, as it drops queued work. */
#include "emu.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int satisfied(uint64_t have, uint64_t want, unsigned flags, unsigned elem)
{
	if (elem == 4) {
		have = (uint32_t)have;
		want = (uint32_t)want;
	}
	switch (flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) {
	case CU_STREAM_WAIT_VALUE_GEQ: /* cyclic, as the driver compares */
		return elem == 4 ? (int32_t)(uint32_t)(have - want) >= 0 : (int64_t)(have - want) >= 0;
	case CU_STREAM_WAIT_VALUE_EQ:
		return have == want;
	case CU_STREAM_WAIT_VALUE_AND:
		return (have & want) != 0;
	default: /* NOR */
		return (elem == 4 ? (uint32_t) ~(have | want) : ~(have | want)) != 0;
	}
}

static uint64_t load(const void *p, unsigned elem)
{
	if (elem == 4)
		return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
	return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

CUresult emu_memop_exec(struct emu_ctx *ctx, struct emu_op *op)
{
	for (;;) {
		emu_mem_rdlock(ctx);
		void *p = emu_mem_map(ctx, op->dptr, op->elem);
		if (!p) {
			emu_mem_rdunlock(ctx);
			return CUDA_ERROR_ILLEGAL_ADDRESS;
		}
		if (op->kind == EMU_OP_WRITE_VALUE) {
			if (op->elem == 4)
				__atomic_store_n((uint32_t *)p, (uint32_t)op->value64, __ATOMIC_RELEASE);
			else
				__atomic_store_n((uint64_t *)p, op->value64, __ATOMIC_RELEASE);
			emu_mem_rdunlock(ctx);
			return CUDA_SUCCESS;
		}
		int ok = satisfied(load(p, op->elem), op->value64, op->memop_flags, op->elem);
		emu_mem_rdunlock(ctx);
		if (ok)
			return CUDA_SUCCESS;
		emu_lock(&ctx->lock);
		int dead = emu_ctx_sticky(ctx) != 0;
		emu_unlock(&ctx->lock);
		if (dead)
			return CUDA_SUCCESS; /* the fault is the context's already */
		struct timespec ts = { 0, 50 * 1000 };
		nanosleep(&ts, NULL);
	}
}

static CUresult check(int wait, CUdeviceptr addr, unsigned elem, unsigned flags)
{
	if (addr % elem)
		return CUDA_ERROR_INVALID_VALUE;
	if (wait) {
		unsigned cmp = flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH;
		return cmp <= CU_STREAM_WAIT_VALUE_NOR ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	}
	return flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER ? CUDA_ERROR_INVALID_VALUE
									 : CUDA_SUCCESS;
}

/* Queues one operation; the stream's context must reach the word. */
static CUresult enqueue(CUstream h, int wait, CUdeviceptr addr, uint64_t value, unsigned elem,
			unsigned flags)
{
	CUresult rc = check(wait, addr, elem, flags);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct emu_op *op = calloc(1, sizeof *op);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->kind = wait ? EMU_OP_WAIT_VALUE : EMU_OP_WRITE_VALUE;
	op->dptr = addr;
	op->bytes = elem;
	op->elem = elem;
	op->value64 = value;
	op->memop_flags = flags;
	return emu_mem_queue(h, op, elem);
}

#define PT(s) ((s) ? (s) : CU_STREAM_PER_THREAD)

EMU_API CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f)
{
	return enqueue(s, 0, a, v, 4, f);
}
EMU_API CUresult CUDAAPI cuStreamWriteValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f)
{
	return enqueue(s, 0, a, v, 8, f);
}
EMU_API CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f)
{
	return enqueue(s, 1, a, v, 4, f);
}
EMU_API CUresult CUDAAPI cuStreamWaitValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f)
{
	return enqueue(s, 1, a, v, 8, f);
}
EMU_API CUresult CUDAAPI cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f)
{
	return enqueue(PT(s), 0, a, v, 4, f);
}
EMU_API CUresult CUDAAPI cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f)
{
	return enqueue(PT(s), 0, a, v, 8, f);
}
EMU_API CUresult CUDAAPI cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f)
{
	return enqueue(PT(s), 1, a, v, 4, f);
}
EMU_API CUresult CUDAAPI cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f)
{
	return enqueue(PT(s), 1, a, v, 8, f);
}

/* One operation of a batch as enqueue() takes it; 0: nothing to queue (a
 * barrier or flush orders nothing more here, where each write is visible
 * when made), -1: not an operation. */
struct memop {
	int wait;
	CUdeviceptr addr;
	uint64_t value;
	unsigned elem, flags;
};

static int decode(const CUstreamBatchMemOpParams *o, struct memop *m)
{
	switch (o->operation) {
	case CU_STREAM_MEM_OP_WAIT_VALUE_32:
	case CU_STREAM_MEM_OP_WAIT_VALUE_64:
		m->wait = 1;
		m->elem = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8;
		m->addr = o->waitValue.address;
		m->value = m->elem == 4 ? o->waitValue.value : o->waitValue.value64;
		m->flags = o->waitValue.flags;
		return 1;
	case CU_STREAM_MEM_OP_WRITE_VALUE_32:
	case CU_STREAM_MEM_OP_WRITE_VALUE_64:
		m->wait = 0;
		m->elem = o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;
		m->addr = o->writeValue.address;
		m->value = m->elem == 4 ? o->writeValue.value : o->writeValue.value64;
		m->flags = o->writeValue.flags;
		return 1;
	case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
	case CU_STREAM_MEM_OP_BARRIER:
		return 0;
	default:
		return -1;
	}
}

CUresult emu_memop_batch_check(const CUstreamBatchMemOpParams *ops, unsigned count, unsigned flags)
{
	if (!ops || !count || count > 256 || flags)
		return CUDA_ERROR_INVALID_VALUE;
	struct memop m;
	for (unsigned i = 0; i < count; i++) {
		int k = decode(&ops[i], &m);
		if (k < 0 || (k && check(m.wait, m.addr, m.elem, m.flags) != CUDA_SUCCESS))
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* Every operation is checked before any is queued. */
CUresult emu_memop_batch(CUstream s, unsigned count, const CUstreamBatchMemOpParams *ops, unsigned flags)
{
	CUresult rc = emu_memop_batch_check(ops, count, flags);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct memop m;
	for (unsigned i = 0; i < count; i++) {
		if (decode(&ops[i], &m) <= 0)
			continue;
		if ((rc = enqueue(s, m.wait, m.addr, m.value, m.elem, m.flags)) != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
					       unsigned int flags)
{
	return emu_memop_batch(s, count, ops, flags);
}
EMU_API CUresult CUDAAPI cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count,
						    CUstreamBatchMemOpParams *ops, unsigned int flags)
{
	return emu_memop_batch(PT(s), count, ops, flags);
}
