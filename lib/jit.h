/* JIT options (cuLinkCreate, cuModuleLoadDataEx) whose values are numbers
 * and so travel on the wire (LINK); the others hold host pointers (log
 * buffers) that the client keeps.  One list for client and server. */
#ifndef RGPU_JIT_H
#define RGPU_JIT_H

/* include after cuda.h (the daemon includes it its own way) */

static inline int rgpu_jit_option_numeric(unsigned o)
{
	switch (o) {
	case CU_JIT_MAX_REGISTERS:
	case CU_JIT_THREADS_PER_BLOCK:
	case CU_JIT_OPTIMIZATION_LEVEL:
	case CU_JIT_TARGET_FROM_CUCONTEXT:
	case CU_JIT_TARGET:
	case CU_JIT_FALLBACK_STRATEGY:
	case CU_JIT_GENERATE_DEBUG_INFO:
	case CU_JIT_LOG_VERBOSE:
	case CU_JIT_GENERATE_LINE_INFO:
	case CU_JIT_CACHE_MODE:
	case CU_JIT_POSITION_INDEPENDENT_CODE:
	case CU_JIT_MIN_CTA_PER_SM:
	case CU_JIT_MAX_THREADS_PER_BLOCK:
	case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
		return 1;
	default:
		return 0;
	}
}

#endif
