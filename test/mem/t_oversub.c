/*
 * A tenant for the memory-manager tests (test/mem/run-mem.sh): holds device
 * memory and checks it stays intact while other sessions push it out of
 * the GPU and back.
 *
 * usage: t_oversub MiB[+MiB...]
 *
 * Allocates each size in turn (exit 3 with "OOM" when one is refused with
 * CUDA_ERROR_OUT_OF_MEMORY), fills the first allocation with a pattern and
 * stores its address inside a small second allocation (a pointer kept in
 * device memory), prints "READY" and then obeys lines on stdin:
 *   go    adds 1 to every word with a kernel, then reads the pointer back
 *         from device memory, follows it and checks every word; "OK n"
 *   free  frees the big allocation; "FREED"
 *   quit  exits 0
 * Any mismatch or other CUDA error exits 1.
 */
#include "../e2e/common.h"

#include <unistd.h>

#define MiB (1ull << 20)
#define CHUNK (8 * MiB)

static uint32_t pattern(uint64_t i) { return (uint32_t)(i * 2654435761u) ^ 0x5a5a5a5au; }

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	if (argc != 2)
		fail("usage: t_oversub MiB[+MiB...]");
	CUdevice dev;
	CK(cuInit(0));
	CUcontext ctx = primary_ctx(0, &dev);
	(void)ctx;
	CUmodule mod = load_test_module();
	CUfunction inc = get_func(mod, "inc_i32");

	CUdeviceptr big = 0, other;
	uint64_t size = 0;
	char *spec = argv[1];
	for (int k = 0; *spec; k++) {
		char *end;
		unsigned long long mib = strtoull(spec, &end, 10);
		if (end == spec || (*end && *end != '+'))
			fail("bad size list '%s'", argv[1]);
		spec = *end ? end + 1 : end;
		CUdeviceptr p;
		CUresult rc = cuMemAlloc(&p, mib * MiB);
		if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
			printf("OOM\n");
			return 3;
		}
		if (rc)
			cu_die(__FILE__, __LINE__, "cuMemAlloc", rc);
		if (k == 0) {
			big = p;
			size = mib * MiB;
		}
	}
	uint64_t words = size / 4;
	if (words > 0x7fffffff)
		fail("too large for the test kernel");
	uint32_t *buf = xmalloc(CHUNK);
	for (uint64_t off = 0; off < size; off += CHUNK) {
		uint64_t n = size - off < CHUNK ? size - off : CHUNK;
		for (uint64_t i = 0; i < n / 4; i++)
			buf[i] = pattern(off / 4 + i);
		CK(cuMemcpyHtoD(big + off, buf, n));
	}
	/* the big allocation's address, kept in device memory */
	CK(cuMemAlloc(&other, 64));
	CK(cuMemcpyHtoD(other, &big, sizeof(big)));
	printf("READY\n");

	char line[64];
	unsigned rounds = 0;
	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "quit", 4))
			break;
		if (!strncmp(line, "free", 4)) {
			CK(cuMemFree(big));
			big = 0;
			printf("FREED\n");
			continue;
		}
		if (strncmp(line, "go", 2) || !big)
			fail("unexpected command '%s'", line);
		int n = (int)words;
		void *args[] = { &big, &n };
		CK(cuLaunchKernel(inc, (unsigned)((words + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
		CK(cuCtxSynchronize());
		rounds++;
		CUdeviceptr at = 0;
		CK(cuMemcpyDtoH(&at, other, sizeof(at)));
		CHECK(at == big, "the pointer stored in device memory reads %#llx, not %#llx",
		      (unsigned long long)at, (unsigned long long)big);
		for (uint64_t off = 0; off < size; off += CHUNK) {
			uint64_t cnt = size - off < CHUNK ? size - off : CHUNK;
			CK(cuMemcpyDtoH(buf, at + off, cnt));
			for (uint64_t i = 0; i < cnt / 4; i++)
				if (buf[i] != pattern(off / 4 + i) + rounds)
					fail("word %llu is %#x, expected %#x",
					     (unsigned long long)(off / 4 + i), buf[i],
					     pattern(off / 4 + i) + rounds);
		}
		printf("OK %u\n", rounds);
	}
	free(buf);
	return 0;
}
