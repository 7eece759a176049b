/*
 * CUDA IPC of device memory between two processes (cuIpcGetMemHandle,
 * cuIpcOpenMemHandle, cuIpcCloseMemHandle), as PyTorch's multiprocessing
 * and MPI libraries use it.  The parent allocates a large and a small
 * buffer (the small one shares its memory with a neighbour), writes them,
 * and hands their handles to a child process (argv: "child HEX HEX"),
 * which checks the data, a kernel's view of it, and writes its own; the
 * parent then sees the child's writes.  Also: a pointer inside an
 * allocation has no handle, a forged handle is refused, a handle closed
 * twice is refused.  Then an interprocess event (cuIpcGetEventHandle,
 * cuIpcOpenEventHandle): the parent records it after a long kernel and a
 * fill of the big buffer; the child ("evchild HEX HEX") makes its stream
 * wait for it and must read the fill.  Then a pool made exportable
 * (POSIX file descriptors): its shareable handle and a pointer's export data
 * go to a child ("poolchild FD HEX"), which imports the pool and the
 * pointer, reads the parent's data, writes its own and frees the pointer;
 * a pointer is refused into another pool, and an imported pool allocates
 * nothing.  Runs on the local driver too.
 */
#include "../e2e/common.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (8u << 20) /* bytes */
#define SMALL 4096u

/* (memory and event handles alike: 64 bytes) */
#define hex(h, out) hexb((h)->reserved, sizeof((h)->reserved), out)
#define unhex(s, h) unhexb(s, (h)->reserved, sizeof((h)->reserved))

static void hexb(const void *p, size_t n, char *out)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static int unhexb(const char *s, void *p, size_t n)
{
	unsigned char *b = p;
	if (strlen(s) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		b[i] = (unsigned char)v;
	}
	return 0;
}

/* Runs "self mode a b" in a child process; it must exit 0. */
static void child_run(const char *self, const char *mode, const char *a, const char *b)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, mode, a, b, (char *)NULL);
		_exit(127);
	}
	CHECK(pid > 0, "fork");
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the %s failed (status %#x)", mode, st);
}

static void pattern(uint32_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = seed * 2654435761u + (uint32_t)i;
}

static int child(const char *hb, const char *hs)
{
	(void)primary_ctx(0, NULL);
	CUipcMemHandle big, small;
	CHECK(unhex(hb, &big) == 0 && unhex(hs, &small) == 0, "bad handles on the command line");
	CUdeviceptr db = 0, ds = 0;
	CK(cuIpcOpenMemHandle(&db, big, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CK(cuIpcOpenMemHandle(&ds, small, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	uint32_t *buf = malloc(BIG), *want = malloc(BIG);
	CHECK(buf && want, "malloc");
	pattern(want, BIG / 4, 7);
	CK(cuMemcpyDtoH(buf, db, BIG));
	CHECK(!memcmp(buf, want, BIG), "the child does not see the parent's big buffer");
	pattern(want, SMALL / 4, 8);
	CK(cuMemcpyDtoH(buf, ds, SMALL));
	CHECK(!memcmp(buf, want, SMALL), "the child does not see the parent's small buffer");
	/* a kernel of the child writes the parent's memory */
	CUmodule mod = load_test_module();
	CUfunction fill = get_func(mod, "fill_u32");
	unsigned long long n = SMALL / 4;
	unsigned v = 0x5eed5eed;
	void *args[] = { &ds, &v, &n };
	CK(cuLaunchKernel(fill, (unsigned)(n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
	CK(cuCtxSynchronize());
	pattern(want, BIG / 4, 9);
	CK(cuMemcpyHtoD(db, want, BIG));
	CK(cuIpcCloseMemHandle(db));
	CK(cuIpcCloseMemHandle(ds));
	CHECK(cuIpcCloseMemHandle(ds) != CUDA_SUCCESS, "a handle closed twice");
	CUipcMemHandle forged;
	memset(&forged, 0x5a, sizeof(forged));
	CUdeviceptr dx = 0;
	CHECK(cuIpcOpenMemHandle(&dx, forged, 0) != CUDA_SUCCESS, "a forged handle was opened");
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	free(buf);
	free(want);
	printf("child: opened both handles, read, launched on and wrote the parent's memory\n");
	return 0;
}

#define EV_FILL 0xe7e7e7e7u

static int child_event(const char *hm, const char *he)
{
	(void)primary_ctx(0, NULL);
	CUipcMemHandle mh;
	CUipcEventHandle eh;
	CHECK(unhex(hm, &mh) == 0 && unhex(he, &eh) == 0, "bad handles on the command line");
	CUdeviceptr db = 0;
	CK(cuIpcOpenMemHandle(&db, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CUevent ev;
	CK(cuIpcOpenEventHandle(&ev, eh));
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	uint32_t *buf = malloc(BIG);
	CHECK(buf, "malloc");
	/* the copy waits for the parent's fill */
	CK(cuStreamWaitEvent(s, ev, 0));
	CK(cuMemcpyDtoHAsync(buf, db, BIG, s));
	CK(cuStreamSynchronize(s));
	for (unsigned i = 0; i < BIG / 4; i++)
		if (buf[i] != EV_FILL) {
			CHECK(0, "word %u read %#x: the stream did not wait for the parent's event", i,
			      buf[i]);
			break;
		}
	CK(cuEventSynchronize(ev));
	CK(cuEventQuery(ev));
	CK(cuEventDestroy(ev));
	CK(cuStreamDestroy(s));
	CK(cuIpcCloseMemHandle(db));
	primary_ctx_release(0);
	free(buf);
	printf("child: waited for the parent's interprocess event, read its fill\n");
	return 0;
}

/* the event part (see the top) */
static void event_phase(const char *self, CUdeviceptr db)
{
	CUmodule mod = load_test_module();
	CUfunction busy = get_func(mod, "busy_wait_ns"), fill = get_func(mod, "fill_u32");
	CUevent plain, ev;
	CUipcEventHandle eh;
	CK(cuEventCreate(&plain, CU_EVENT_DEFAULT));
	CHECK(cuIpcGetEventHandle(&eh, plain) != CUDA_SUCCESS,
	      "an event made without CU_EVENT_INTERPROCESS got a handle");
	CK(cuEventDestroy(plain));
	CK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
	CK(cuIpcGetEventHandle(&eh, ev));
	CUipcMemHandle mh;
	CK(cuIpcGetMemHandle(&mh, db));
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	unsigned long long ns = 500ull * 1000 * 1000, n = BIG / 4;
	unsigned v = EV_FILL;
	void *bargs[] = { &ns };
	void *fargs[] = { &db, &v, &n };
	launch1d(busy, 1, s, bargs);
	launch1d(fill, (unsigned)n, s, fargs);
	CK(cuEventRecord(ev, s));
	char sm[2 * sizeof(mh.reserved) + 1], se[2 * sizeof(eh.reserved) + 1];
	hex(&mh, sm);
	hex(&eh, se);
	child_run(self, "evchild", sm, se);
	CK(cuStreamSynchronize(s));
	CK(cuEventDestroy(ev));
	CK(cuStreamDestroy(s));
	CK(cuModuleUnload(mod));
}

#define POOL_BYTES (4u << 20)

static int child_pool(const char *sfd, const char *hd)
{
	(void)primary_ctx(0, NULL);
	CUmemPoolPtrExportData data;
	CHECK(unhex(hd, &data) == 0, "bad export data on the command line");
	CUmemoryPool pool, other;
	int fd = -1, ofd = -1;
	CHECK(sscanf(sfd, "%d,%d", &fd, &ofd) == 2, "bad descriptors on the command line");
	CK(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
					      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CK(cuMemPoolImportFromShareableHandle(&other, (void *)(intptr_t)ofd,
					      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CUdeviceptr p = 0, x = 0;
	/* the pointer is pool's, not other's: refused there (programs try
	 * each pool) */
	CHECK(cuMemPoolImportPointer(&x, other, &data) != CUDA_SUCCESS,
	      "a pointer was imported into another pool");
	CK(cuMemPoolImportPointer(&p, pool, &data));
	CHECK(cuMemAllocFromPoolAsync(&x, 4096, pool, NULL) != CUDA_SUCCESS,
	      "an imported pool allocated memory");
	uint32_t *buf = malloc(POOL_BYTES), *want = malloc(POOL_BYTES);
	CHECK(buf && want, "malloc");
	pattern(want, POOL_BYTES / 4, 21);
	CK(cuMemcpyDtoH(buf, p, POOL_BYTES));
	CHECK(!memcmp(buf, want, POOL_BYTES), "the child does not see the parent's pool memory");
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuMemsetD32Async(p, 0x600d600d, POOL_BYTES / 4, s));
	/* freed before the exporter frees it, as CUDA asks */
	CK(cuMemFreeAsync(p, s));
	CK(cuStreamSynchronize(s));
	CK(cuStreamDestroy(s));
	CK(cuMemPoolDestroy(pool));
	CK(cuMemPoolDestroy(other));
	primary_ctx_release(0);
	free(buf);
	free(want);
	printf("child: imported the parent's pool and pointer, read, wrote and freed it\n");
	return 0;
}

/* the pool part (see the top) */
static void pool_phase(const char *self)
{
	CUmemPoolProps pp;
	memset(&pp, 0, sizeof(pp));
	pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	pp.location.id = 0;
	CUmemoryPool pool, other;
	CK(cuMemPoolCreate(&pool, &pp));
	CK(cuMemPoolCreate(&other, &pp));
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUdeviceptr p;
	CK(cuMemAllocFromPoolAsync(&p, POOL_BYTES, pool, s));
	uint32_t *buf = malloc(POOL_BYTES);
	CHECK(buf, "malloc");
	pattern(buf, POOL_BYTES / 4, 21);
	CK(cuMemcpyHtoDAsync(p, buf, POOL_BYTES, s));
	CK(cuStreamSynchronize(s));
	int fd = -1, ofd = -1;
	CK(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CK(cuMemPoolExportToShareableHandle(&ofd, other, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CUmemPoolPtrExportData data;
	CK(cuMemPoolExportPointer(&data, p));
	/* the child gets both */
	CHECK(fcntl(fd, F_SETFD, 0) == 0 && fcntl(ofd, F_SETFD, 0) == 0, "fcntl");
	char sfd[32], sd[2 * sizeof(data.reserved) + 1];
	snprintf(sfd, sizeof(sfd), "%d,%d", fd, ofd);
	hex(&data, sd);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, "poolchild", sfd, sd, (char *)NULL);
		_exit(127);
	}
	CHECK(pid > 0, "fork");
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the pool child failed (status %#x)", st);
	CK(cuMemcpyDtoH(buf, p, POOL_BYTES));
	for (unsigned i = 0; i < POOL_BYTES / 4; i++)
		if (buf[i] != 0x600d600d) {
			CHECK(0, "word %u of the pool memory: %#x after the child's writes", i, buf[i]);
			break;
		}
	close(fd);
	close(ofd);
	CK(cuMemFreeAsync(p, s));
	CK(cuStreamSynchronize(s));
	CK(cuStreamDestroy(s));
	CK(cuMemPoolDestroy(pool));
	CK(cuMemPoolDestroy(other));
	free(buf);
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	if (argc == 4 && !strcmp(argv[1], "child"))
		return child(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "evchild"))
		return child_event(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "poolchild"))
		return child_pool(argv[2], argv[3]);
	(void)primary_ctx(0, NULL);
	CUdeviceptr db, ds, dn;
	CK(cuMemAlloc(&db, BIG));
	CK(cuMemAlloc(&dn, SMALL)); /* a neighbour in the same chunk */
	CK(cuMemAlloc(&ds, SMALL));
	uint32_t *buf = malloc(BIG), *want = malloc(BIG);
	CHECK(buf && want, "malloc");
	pattern(want, BIG / 4, 7);
	CK(cuMemcpyHtoD(db, want, BIG));
	pattern(want, SMALL / 4, 8);
	CK(cuMemcpyHtoD(ds, want, SMALL));
	CK(cuMemsetD32(dn, 0x11111111, SMALL / 4));
	CUipcMemHandle hb, hs, hx;
	CK(cuIpcGetMemHandle(&hb, db));
	CK(cuIpcGetMemHandle(&hs, ds));
	/* inside an allocation: the allocation's handle, as the driver gives;
	 * outside every allocation: none */
	CK(cuIpcGetMemHandle(&hx, db + 4096));
	CHECK(cuIpcGetMemHandle(&hx, (CUdeviceptr)4096) != CUDA_SUCCESS,
	      "a pointer outside every allocation got a handle");
	char sb[2 * sizeof(hb.reserved) + 1], ss[2 * sizeof(hs.reserved) + 1];
	hex(&hb, sb);
	hex(&hs, ss);
	child_run(argv[0], "child", sb, ss);
	pattern(want, BIG / 4, 9);
	CK(cuMemcpyDtoH(buf, db, BIG));
	CHECK(!memcmp(buf, want, BIG), "the parent does not see the child's writes");
	CK(cuMemcpyDtoH(buf, ds, SMALL));
	for (unsigned i = 0; i < SMALL / 4; i++)
		CHECK(buf[i] == 0x5eed5eed, "word %u of the small buffer: %#x after the child's kernel",
		      i, buf[i]);
	CK(cuMemcpyDtoH(buf, dn, SMALL));
	for (unsigned i = 0; i < SMALL / 4; i++)
		CHECK(buf[i] == 0x11111111, "the neighbour changed: word %u is %#x", i, buf[i]);
	event_phase(argv[0], db);
	pool_phase(argv[0]);
	CK(cuMemFree(db));
	CK(cuMemFree(ds));
	CK(cuMemFree(dn));
	primary_ctx_release(0);
	free(buf);
	free(want);
	say("IPC: two allocations shared with a child process, data both ways, a kernel's "
	    "writes seen; an interprocess event waited for in the child; a pool and a pointer "
	    "imported there");
	return 0;
}
