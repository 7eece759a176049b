/* Mapped pinned host memory is live to the device (as NCCL's proxy flags
 * and XLA's host buffers need): with cuMemHostAlloc(DEVICEMAP) memory,
 *  - a running kernel sees a value the host writes after the launch (it
 *    spins on a flag), and the host sees the kernel's answer in that
 *    memory without any synchronisation call;
 *  - a memset given the device address of host memory writes the host's
 *    bytes;
 *  - the same with cuMemHostRegister(DEVICEMAP) of a shared file's pages
 *    (NCCL's /dev/shm buffers), at an offset into the file and an
 *    unaligned address; another mapping of the file (as the peer process
 *    has) sees the kernel's answer too;
 *  - then the application's own VMM memory still maps and holds data (XLA
 *    allocates so after pinning host memory: rgpu's live host memory must
 *    not lie where the server reserves the application's VMM window).
 * On the local driver this is CUDA's own behaviour; through rgpu it holds
 * on the same-host path, where rgpud maps the client's pages at the same
 * address for its GPU.  Over TCP the device sees host memory only at
 * launches and synchronisations: there the test checks that a flag set
 * after a launch reaches the running kernel at a synchronisation. */
#include "common.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* wait_flag on s: spins on the int at device address d until it is set
 * (or timeout_s passes: then -1), and writes its value + 1 at d + 4. */
static void launch_wait(CUfunction f_wait, CUstream s, CUdeviceptr d, unsigned timeout_s)
{
	CUdeviceptr dflag = d, dout = d + 4;
	unsigned long long timeout = timeout_s * 1000ull * 1000 * 1000;
	void *args[] = { &dflag, &dout, &timeout };
	CK(cuLaunchKernel(f_wait, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
	struct timespec ms20 = { 0, 20 * 1000 * 1000 };
	nanosleep(&ms20, NULL); /* (running, its flag not set) */
}

/* A kernel spins on flag (device address d), the host sets it to v, and
 * the answer (v + 1) must come back in host memory at *out without any
 * synchronisation; then the stream is synchronised. */
static void live_round(CUfunction f_wait, CUstream s, CUdeviceptr d, volatile int *flag,
		       volatile int *out, int v, const char *what)
{
	*flag = 0;
	*out = 0;
	launch_wait(f_wait, s, d, 20);
	__atomic_store_n(flag, v, __ATOMIC_SEQ_CST);
	double t0 = now_s();
	int got = 0;
	while ((got = __atomic_load_n(out, __ATOMIC_SEQ_CST)) == 0 && now_s() - t0 < 15.0) {
		struct timespec ms1 = { 0, 1000 * 1000 };
		nanosleep(&ms1, NULL);
	}
	CHECK(got == v + 1, "%s: the kernel's answer in host memory is %d (%d: it saw the host's "
	      "%d; 0: nothing came back without a synchronisation; -1: it never saw the flag)",
	      what, got, v + 1, v);
	CK(cuStreamSynchronize(s));
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	const char *tp = getenv("RGPU_TRANSPORT");
	(void)primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction f_wait = get_func(mod, "wait_flag");
	volatile int *h = NULL;
	CK(cuMemHostAlloc((void **)&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
	CUdeviceptr d = 0;
	CK(cuMemHostGetDevicePointer(&d, (void *)h, 0));

	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	if (tp && !strcmp(tp, "tcp")) {
		/* over TCP the device sees host memory at launches and
		 * synchronisations: a flag the host sets after a launch
		 * reaches the kernel spinning on it when the host waits for
		 * it (UnifiedMemoryPerf's latch), and the kernel's answer
		 * comes back then */
		for (int round = 0; round < 2; round++) {
			h[0] = 0;
			h[1] = 0;
			launch_wait(f_wait, s, d, 5);
			h[0] = 41 + round;
			if (round == 0)
				CK(cuStreamSynchronize(s));
			else
				CK(cuCtxSynchronize());
			CHECK(h[1] == 42 + round, "over TCP, after the %s synchronisation the kernel's answer "
			      "is %d (%d: it saw the host's flag; -1: it never did)",
			      round ? "context's" : "stream's", h[1], 42 + round);
		}
		CK(cuStreamDestroy(s));
		CK(cuMemFreeHost((void *)h));
		CK(cuModuleUnload(mod));
		printf("OK (over TCP: at synchronisations)\n");
		return 0;
	}
	live_round(f_wait, s, d, &h[0], &h[1], 41, "pinned memory");
	CHECK(h[1] == 42, "after the synchronisation the answer is %d, not 42", h[1]);

	/* a memset through the device address writes the host's bytes */
	CK(cuMemsetD32(d + 64, 0x5a5a1234u, 16));
	const volatile unsigned *u = (const volatile unsigned *)((const volatile char *)h + 64);
	for (int i = 0; i < 16; i++)
		CHECK(u[i] == 0x5a5a1234u, "host word %d after the memset is %#x", i, u[i]);

	/* registered pages of a shared file, at an offset, unaligned and up to
	 * the file's end, which is not a page's end (NCCL's /dev/shm buffers
	 * are 9637892 bytes) */
	{
		char name[64];
		snprintf(name, sizeof(name), "/rgpu-t-hostmem-%d", (int)getpid());
		int sfd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
		CHECK(sfd >= 0, "shm_open %s failed", name);
		const size_t fsz = (1 << 20) + 4, at = 8192 + 128;
		CHECK(ftruncate(sfd, (off_t)fsz) == 0, "ftruncate failed");
		char *m1 = mmap(NULL, fsz, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
		char *m2 = mmap(NULL, fsz, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
		CHECK(m1 != MAP_FAILED && m2 != MAP_FAILED, "mmap of the shared file failed");
		char *p = m1 + at;
		CK(cuMemHostRegister(p, fsz - at, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
		shm_unlink(name); /* (NCCL unlinks once its peer has it open) */
		close(sfd);
		CUdeviceptr rd = 0;
		CK(cuMemHostGetDevicePointer(&rd, p, 0));
		live_round(f_wait, s, rd, (volatile int *)p, (volatile int *)(p + 4), 7,
			   "registered shared file");
		volatile int *peer = (volatile int *)(m2 + at + 4);
		CHECK(*peer == 8, "another mapping of the file reads %d, not 8", *peer);
		/* the file's last bytes, through the device address */
		CK(cuMemsetD32(rd + (fsz - at) - 4, 0x600dfeedu, 1));
		CHECK(*(volatile unsigned *)(m2 + fsz - 4) == 0x600dfeedu,
		      "the file's last word after a memset through the device reads %#x",
		      *(volatile unsigned *)(m2 + fsz - 4));
		CK(cuMemHostUnregister(p));
		munmap(m1, fsz);
		munmap(m2, fsz);
	}

	/* VMM memory after pinned host memory */
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	size_t gran = 0;
	CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CUdeviceptr va = 0;
	CUmemGenericAllocationHandle ph;
	CK(cuMemAddressReserve(&va, gran, 0, 0, 0));
	CK(cuMemCreate(&ph, gran, &prop, 0));
	CK(cuMemMap(va, gran, 0, ph, 0));
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(cuMemSetAccess(va, gran, &acc, 1));
	CK(cuMemsetD32(va, 0xc0ffee, gran / 4));
	unsigned last = 0;
	CK(cuMemcpyDtoH(&last, va + gran - 4, 4));
	CHECK(last == 0xc0ffee, "VMM memory after pinned host memory reads %#x", last);
	CK(cuMemUnmap(va, gran));
	CK(cuMemRelease(ph));
	CK(cuMemAddressFree(va, gran));

	CK(cuStreamDestroy(s));
	CK(cuMemFreeHost((void *)h));
	CK(cuModuleUnload(mod));
	printf("OK\n");
	return 0;
}
