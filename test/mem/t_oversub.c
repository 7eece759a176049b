/*
 * A tenant for the memory-manager tests (test/mem/run-mem.sh): holds device
 * memory and checks it stays intact while other sessions push it out of
 * the GPU and back.
 *
 * usage: t_oversub MiB[+MiB...]
 *        t_oversub alt MiB PIECES ITERS KERNELS HOST_MS
 *
 * Allocates each size in turn (exit 3 with "OOM" when one is refused with
 * CUDA_ERROR_OUT_OF_MEMORY), fills the first allocation with a pattern and
 * stores its address inside a small second allocation (a pointer kept in
 * device memory), prints "READY" and then obeys lines on stdin:
 *   go    adds 1 to every word with a kernel, then reads the pointer back
 *         from device memory, follows it and checks every word; "OK n"
 *   free  frees the big allocation; "FREED"
 *   grow N  allocates N MiB more and fills them; "GREW", or "OOM" and
 *         exit 3 when refused
 *   quit  exits 0
 * Any mismatch or other CUDA error exits 1.  T_OVERSUB_POOL=1: the sizes
 * are allocated from the device's stream-ordered pool (cuMemAllocAsync),
 * which rgpud serves from the same memory manager.
 *
 * alt: an alternating tenant (bench/oversubscribe/emu.sh, the alt case of
 * run-mem.sh), the emulated twin of bench/oversubscribe/tenant.cu: allocates
 * MiB in PIECES allocations whose addresses it keeps in device memory, fills
 * them, then ITERS times a GPU phase (KERNELS rounds of a kernel adding 1 to
 * every word of every piece, then a synchronisation) and a host phase
 * (HOST_MS ms asleep, touching no GPU); then reads the addresses back from
 * device memory and checks every word.  Prints READY s, PHASE i gpu s,
 * RESULT ok|bad, TIME s; exit 0, 1 (mismatch or CUDA error), 3 (OOM).
 */
#include "../e2e/common.h"

#include <unistd.h>

#define MiB (1ull << 20)
#define CHUNK (8 * MiB)

static uint32_t pattern(uint64_t i) { return (uint32_t)(i * 2654435761u) ^ 0x5a5a5a5au; }

static double now_s(void) { return now_ms() / 1e3; }

static uint32_t alt_pattern(unsigned j, uint64_t i)
{
	return (uint32_t)(i * 2654435761u) ^ (0x9e3779b9u * (j + 1));
}

#define ALT_MAX 64

static int alt(int argc, char **argv)
{
	if (argc != 7)
		fail("usage: t_oversub alt MiB PIECES ITERS KERNELS HOST_MS");
	uint64_t mib = strtoull(argv[2], NULL, 10);
	unsigned npiece = (unsigned)atoi(argv[3]), iters = (unsigned)atoi(argv[4]);
	unsigned kernels = (unsigned)atoi(argv[5]), host_ms = (unsigned)atoi(argv[6]);
	if (!mib || !npiece || npiece > ALT_MAX)
		fail("alt: MiB > 0 and 1 <= PIECES <= %d", ALT_MAX);
	double t0 = now_s();
	CK(cuInit(0));
	CUdevice dev;
	primary_ctx(0, &dev);
	CUmodule mod = load_test_module();
	CUfunction inc = get_func(mod, "inc_i32");
	uint64_t per = mib * MiB / npiece / 4 * 4, words = per / 4;
	if (words > 0x7fffffff)
		fail("alt: pieces too large for the test kernel");
	CUdeviceptr piece[ALT_MAX], tab;
	for (unsigned j = 0; j < npiece; j++) {
		CUresult rc = cuMemAlloc(&piece[j], per);
		if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
			printf("OOM\n");
			return 3;
		}
		if (rc)
			cu_die(__FILE__, __LINE__, "cuMemAlloc", rc);
	}
	CK(cuMemAlloc(&tab, sizeof(piece)));
	CK(cuMemcpyHtoD(tab, piece, sizeof(piece)));
	uint32_t *buf = xmalloc(CHUNK);
	for (unsigned j = 0; j < npiece; j++)
		for (uint64_t off = 0; off < per; off += CHUNK) {
			uint64_t n = per - off < CHUNK ? per - off : CHUNK;
			for (uint64_t i = 0; i < n / 4; i++)
				buf[i] = alt_pattern(j, off / 4 + i);
			CK(cuMemcpyHtoD(piece[j] + off, buf, n));
		}
	printf("READY %.3f\n", now_s() - t0);
	for (unsigned it = 0; it < iters; it++) {
		double g = now_s();
		int n = (int)words;
		for (unsigned k = 0; k < kernels; k++)
			for (unsigned j = 0; j < npiece; j++) {
				void *args[] = { &piece[j], &n };
				CK(cuLaunchKernel(inc, (unsigned)((words + 255) / 256), 1, 1, 256, 1, 1, 0,
						  NULL, args, NULL));
			}
		CK(cuCtxSynchronize());
		printf("PHASE %u gpu %.3f\n", it, now_s() - g);
		usleep(host_ms * 1000u);
	}
	/* the addresses as device memory kept them, then every word */
	CUdeviceptr back[ALT_MAX];
	CK(cuMemcpyDtoH(back, tab, sizeof(back)));
	uint64_t bad = 0;
	uint32_t add = iters * kernels;
	for (unsigned j = 0; j < npiece; j++) {
		CHECK(back[j] == piece[j], "piece %u's address in device memory reads %#llx, not %#llx",
		      j, (unsigned long long)back[j], (unsigned long long)piece[j]);
		for (uint64_t off = 0; off < per; off += CHUNK) {
			uint64_t n = per - off < CHUNK ? per - off : CHUNK;
			CK(cuMemcpyDtoH(buf, back[j] + off, n));
			for (uint64_t i = 0; i < n / 4; i++)
				bad += buf[i] != alt_pattern(j, off / 4 + i) + add;
		}
	}
	printf("RESULT %s %llu\n", bad ? "bad" : "ok", (unsigned long long)bad);
	for (unsigned j = 0; j < npiece; j++)
		CK(cuMemFree(piece[j]));
	CK(cuMemFree(tab));
	free(buf);
	printf("TIME %.3f\n", now_s() - t0);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	if (argc >= 2 && !strcmp(argv[1], "alt"))
		return alt(argc, argv);
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
		CUresult rc = env_long("T_OVERSUB_POOL", 0) ? cuMemAllocAsync(&p, mib * MiB, NULL)
							  : cuMemAlloc(&p, mib * MiB);
		if (!rc)
			rc = cuStreamSynchronize(NULL);
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
		if (!strncmp(line, "grow ", 5)) {
			CUdeviceptr g;
			uint64_t n = strtoull(line + 5, NULL, 10) * MiB;
			CUresult rc = cuMemAlloc(&g, n);
			if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
				printf("OOM\n");
				return 3;
			}
			if (rc)
				cu_die(__FILE__, __LINE__, "cuMemAlloc", rc);
			CK(cuMemsetD8(g, 7, n));
			printf("GREW\n");
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
