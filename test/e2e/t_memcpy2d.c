/* Pitched copies: host -> pitched device memory -> another pitched
 * allocation -> host, with offsets; the gaps between rows stay untouched.
 * The same with CU_MEMORYTYPE_UNIFIED sides (addresses in the device
 * fields, host memory included).
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

	/* CU_MEMORYTYPE_UNIFIED on both sides, the addresses (host ones too)
	 * in the device fields, as cudaMemcpy2DAsync(..., cudaMemcpyDefault)
	 * passes them (cuBLASXt's tiles): host rows 2.. of src, 900 bytes
	 * from byte 50, into d1 at row 3, byte 8; then back into a host
	 * buffer of pitch w */
	const size_t uw = 900, uh = h - 10;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
	c.srcDevice = (CUdeviceptr)(uintptr_t)src;
	c.srcPitch = w;
	c.srcXInBytes = 50;
	c.srcY = 2;
	c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
	c.dstDevice = d1;
	c.dstPitch = p1;
	c.dstXInBytes = 8;
	c.dstY = 3;
	c.WidthInBytes = uw;
	c.Height = uh;
	CK(cuMemcpy2DAsync(&c, s));
	uint8_t *back = xmalloc(w * uh);
	memset(back, 0xee, w * uh);
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
	c.srcDevice = d1;
	c.srcPitch = p1;
	c.srcXInBytes = 8;
	c.srcY = 3;
	c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
	c.dstDevice = (CUdeviceptr)(uintptr_t)back;
	c.dstPitch = w;
	c.WidthInBytes = uw;
	c.Height = uh;
	CK(cuMemcpy2DAsync(&c, s));
	CK(cuStreamSynchronize(s));
	for (size_t y = 0; y < uh; y++)
		for (size_t x = 0; x < w; x++) {
			uint8_t want = x < uw ? src[(y + 2) * w + 50 + x] : 0xee;
			if (back[y * w + x] != want)
				fail("unified copy: back[%zu][%zu] = %#x, want %#x", y, x, back[y * w + x], want);
		}
	free(back);

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
