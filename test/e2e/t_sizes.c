/* Size arithmetic on the copy path (issue 15 item 9):
 *  - cuMemAllocPitch with a width and height whose product wraps around
 *    is refused, not served with a small allocation;
 *  - cuMemcpy2D with a row offset that wraps the address space back onto
 *    the allocation is refused, not served from the wrong row;
 *  - when the client's host-region table is full, cuMemHostAlloc fails
 *    instead of handing out memory that cuMemFreeHost then unmaps only in
 *    part. */
#include "common.h"


#define MAX_HOST 4200 /* more than the client's region table holds */

/* How many of the n addresses at p[i] + off lie in a mapping of this
 * process (read once from /proc/self/maps: valgrind-clean). */
static int count_mapped(void **p, int n, size_t off)
{
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f != NULL, "cannot read /proc/self/maps");
	static uintptr_t lo[65536], hi[65536];
	int m = 0, hits = 0;
	unsigned long a, b;
	char line[512];
	while (m < 65536 && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &a, &b) == 2) {
			lo[m] = a;
			hi[m++] = b;
		}
	fclose(f);
	for (int i = 0; i < n; i++) {
		uintptr_t x = (uintptr_t)p[i] + off;
		for (int k = 0; k < m; k++)
			if (x >= lo[k] && x < hi[k]) {
				hits++;
				break;
			}
	}
	return hits;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);

	/* 2^20-byte rows times 2^44 + 1 rows is 2^64 + 2^20: 1 MiB if wrapped */
	CUdeviceptr d = 0;
	size_t pitch = 0;
	CUresult rc = cuMemAllocPitch(&d, &pitch, 1u << 20, (1ull << 44) + 1, 4);
	CHECK(rc != CUDA_SUCCESS, "cuMemAllocPitch of 2^64 + 2^20 bytes succeeded (pitch %zu)",
	      pitch);
	say("cuMemAllocPitch with a wrapping size: %s", cu_name(rc));

	/* row 2^44 of 2^20-byte rows is 2^64 bytes in: back at the start */
	CK(cuMemAlloc(&d, 1u << 20));
	CK(cuMemsetD8(d, 7, 1u << 20));
	uint8_t row[16];
	CUDA_MEMCPY2D m = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d,
			    .srcY = 1ull << 44, .srcPitch = 1u << 20,
			    .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = row, .dstPitch = 16,
			    .WidthInBytes = 16, .Height = 1 };
	EXPECT_RC(cuMemcpy2D(&m), CUDA_ERROR_INVALID_VALUE);
	m.srcY = 0; /* the same copy without the wrap works */
	CK(cuMemcpy2D(&m));
	CHECK(row[0] == 7 && row[15] == 7, "cuMemcpy2D copied the wrong bytes");
	CK(cuMemFree(d));

	static void *h[MAX_HOST];
	int n = 0;
	for (; n < MAX_HOST; n++) {
		rc = cuMemHostAlloc(&h[n], 4096, 0);
		if (rc)
			break;
		((volatile char *)h[n])[0] = 1;
	}
	CHECK(n < MAX_HOST, "%d host allocations all succeeded: the region table never filled", n);
	CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "a full region table gave %s", cu_name(rc));
	say("cuMemHostAlloc fails with %s after %d allocations", cu_name(rc), n);
	/* every allocation handed out is freed whole: nothing of its
	 * mapping stays behind */
	CHECK(count_mapped(h, n, 0) == n, "host allocations are not where /proc/self/maps says");
	for (int i = 0; i < n; i++)
		CK(cuMemFreeHost(h[i]));
	int left = count_mapped(h, n, 0) + count_mapped(h, n, 64u << 10);
	CHECK(left == 0, "%d pieces of freed host allocations are still mapped", left);
	void *again;
	CK(cuMemHostAlloc(&again, 4096, 0));
	CK(cuMemFreeHost(again));
	say("all freed whole; allocating works again");
	return 0;
}
