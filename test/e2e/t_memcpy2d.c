/* Pitched copies: host -> pitched device memory -> another pitched
 * allocation -> host, with offsets; the gaps between rows stay untouched.
 * Also stream-ordered allocation. */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	const size_t w = 1000, h = 77;
	CUdeviceptr d1, d2;
	size_t p1, p2;
	CK(cuMemAllocPitch(&d1, &p1, w, h, 4));
	CK(cuMemAllocPitch(&d2, &p2, w + 24, h + 1, 4));
	CHECK(p1 >= w && p2 >= w + 24, "pitches %zu %zu", p1, p2);
	CK(cuMemsetD8(d1, 0xab, p1 * h));
	CK(cuMemsetD8(d2, 0xcd, p2 * (h + 1)));
	uint8_t *src = xmalloc(w * h), *out = xmalloc(p2 * (h + 1));
	uint32_t seed = 3;
	for (size_t i = 0; i < w * h; i++)
		src[i] = (uint8_t)lcg(&seed);

	CUDA_MEMCPY2D c = { 0 };
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = src;
	c.srcPitch = w;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = d1;
	c.dstPitch = p1;
	c.WidthInBytes = w;
	c.Height = h;
	CK(cuMemcpy2D(&c));

	/* device to device, into row 1, byte 24 of d2 */
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = d1;
	c.srcPitch = p1;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = d2;
	c.dstPitch = p2;
	c.dstXInBytes = 24;
	c.dstY = 1;
	c.WidthInBytes = w;
	c.Height = h;
	CUstream s;
	CK(cuStreamCreate(&s, 0));
	CK(cuMemcpy2DAsync(&c, s));
	CK(cuStreamSynchronize(s));

	/* the whole of d2 back, pitched to pitched */
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = d2;
	c.srcPitch = p2;
	c.dstMemoryType = CU_MEMORYTYPE_HOST;
	c.dstHost = out;
	c.dstPitch = p2;
	c.WidthInBytes = p2;
	c.Height = h + 1;
	CK(cuMemcpy2D(&c));
	for (size_t y = 0; y < h + 1; y++)
		for (size_t x = 0; x < p2; x++) {
			uint8_t want = (y >= 1 && x >= 24 && x < 24 + w) ? src[(y - 1) * w + (x - 24)] : 0xcd;
			if (out[y * p2 + x] != want)
				fail("d2[%zu][%zu] = %#x, want %#x", y, x, out[y * p2 + x], want);
		}
	result("memcpy2d", out, p2 * (h + 1));

	CUdeviceptr a;
	CK(cuMemAllocAsync(&a, 1 << 20, s));
	CK(cuMemsetD32Async(a, 0x11223344u, (1 << 20) / 4, s));
	uint32_t v = 0;
	CK(cuMemcpyDtoHAsync(&v, a + 4096, 4, s));
	CK(cuStreamSynchronize(s));
	CHECK(v == 0x11223344u, "async allocation holds %#x", v);
	CK(cuMemFreeAsync(a, s));
	CK(cuStreamSynchronize(s));
	CK(cuStreamDestroy(s));
	CK(cuMemFree(d1));
	CK(cuMemFree(d2));
	free(src);
	free(out);
	say("PASS");
	return 0;
}
