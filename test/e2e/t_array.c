/* CUDA arrays: 2D and 3D copies in every direction (host, device, array),
 * with offsets and pitches, one larger than a request carries; texture and
 * surface objects on arrays and on device memory.  The same program runs
 * against the real driver in the GPU suite. */
#include "common.h"

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)lcg(&seed);
}

/* 2D: host (pitched, with gaps) -> array -> host, and device <-> array at
 * an offset */
static void two_d(CUstream s)
{
	const size_t W = 300, H = 200, es = 4, rowb = W * es, hp = rowb + 16;
	CUarray a;
	CUDA_ARRAY_DESCRIPTOR ad = { .Width = W, .Height = H, .Format = CU_AD_FORMAT_FLOAT,
				     .NumChannels = 1 };
	CK(cuArrayCreate(&a, &ad));
	CUDA_ARRAY_DESCRIPTOR got;
	CK(cuArrayGetDescriptor(&got, a));
	CHECK(got.Width == W && got.Height == H && got.Format == CU_AD_FORMAT_FLOAT &&
		      got.NumChannels == 1,
	      "descriptor %zux%zu format %d channels %u", got.Width, got.Height, (int)got.Format,
	      got.NumChannels);
	uint8_t *src = xmalloc(hp * H), *back = xmalloc(hp * H);
	fill(src, hp * H, 7);
	memset(back, 0x5a, hp * H);
	CUDA_MEMCPY2D c = { .srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = src, .srcPitch = hp,
			    .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a,
			    .WidthInBytes = rowb, .Height = H };
	CK(cuMemcpy2D(&c));
	c = (CUDA_MEMCPY2D){ .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a,
			     .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = back, .dstPitch = hp,
			     .WidthInBytes = rowb, .Height = H };
	CK(cuMemcpy2DAsync(&c, s));
	CK(cuStreamSynchronize(s));
	for (size_t y = 0; y < H; y++)
		for (size_t x = 0; x < hp; x++) {
			uint8_t want = x < rowb ? src[y * hp + x] : 0x5a;
			if (back[y * hp + x] != want)
				fail("2D array round trip: byte (%zu, %zu) = %#x, want %#x", x, y,
				     back[y * hp + x], want);
		}

	/* device -> array at (8 bytes, row 3), 50 x 40; array -> device */
	const size_t bw = 200, bh = 40;
	CUdeviceptr d, e;
	CK(cuMemAlloc(&d, bw * bh));
	CK(cuMemAlloc(&e, bw * bh));
	uint8_t *blk = xmalloc(bw * bh), *blk2 = xmalloc(bw * bh);
	fill(blk, bw * bh, 11);
	CK(cuMemcpyHtoD(d, blk, bw * bh));
	c = (CUDA_MEMCPY2D){ .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d, .srcPitch = bw,
			     .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a,
			     .dstXInBytes = 8, .dstY = 3, .WidthInBytes = bw, .Height = bh };
	CK(cuMemcpy2D(&c));
	c = (CUDA_MEMCPY2D){ .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a,
			     .srcXInBytes = 8, .srcY = 3, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			     .dstDevice = e, .dstPitch = bw, .WidthInBytes = bw, .Height = bh };
	CK(cuMemcpy2D(&c));
	CK(cuMemcpyDtoH(blk2, e, bw * bh));
	CHECK(memcmp(blk, blk2, bw * bh) == 0, "device -> array -> device changed the data");
	/* and the rest of the array kept what the host put there */
	CK(cuMemcpy2D(&(CUDA_MEMCPY2D){ .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a,
					.dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = back,
					.dstPitch = rowb, .WidthInBytes = rowb, .Height = H }));
	for (size_t y = 0; y < H; y++)
		for (size_t x = 0; x < rowb; x++) {
			int in = y >= 3 && y < 3 + bh && x >= 8 && x < 8 + bw;
			uint8_t want = in ? blk[(y - 3) * bw + x - 8] : src[y * hp + x];
			if (back[y * rowb + x] != want)
				fail("array after the block: byte (%zu, %zu) = %#x, want %#x", x, y,
				     back[y * rowb + x], want);
		}

	/* array -> array */
	CUarray b;
	CK(cuArrayCreate(&b, &ad));
	CK(cuMemcpy2D(&(CUDA_MEMCPY2D){ .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a,
					.dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = b,
					.WidthInBytes = rowb, .Height = H }));
	uint8_t *third = xmalloc(rowb * H);
	CK(cuMemcpy2D(&(CUDA_MEMCPY2D){ .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = b,
					.dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = third,
					.dstPitch = rowb, .WidthInBytes = rowb, .Height = H }));
	CHECK(memcmp(third, back, rowb * H) == 0, "array -> array changed the data");

	/* a box past the array's edge is refused */
	CHECK(cuMemcpy2D(&(CUDA_MEMCPY2D){ .srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = src,
					   .srcPitch = hp, .dstMemoryType = CU_MEMORYTYPE_ARRAY,
					   .dstArray = a, .dstY = 1, .WidthInBytes = rowb,
					   .Height = H }) != CUDA_SUCCESS,
	      "a copy past the last row succeeded");

	/* 1D copies into a 1D array */
	CUarray l;
	CUDA_ARRAY_DESCRIPTOR ld = { .Width = 4096, .Height = 0, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
				     .NumChannels = 1 };
	CK(cuArrayCreate(&l, &ld));
	CK(cuMemcpyHtoA(l, 100, src, 1000));
	memset(blk2, 0, 1000);
	CK(cuMemcpyAtoH(blk2, l, 100, 1000));
	CHECK(memcmp(blk2, src, 1000) == 0, "1D array round trip changed the data");
	CK(cuMemcpyAtoD(e, l, 100, 1000));
	memset(blk2, 0, 1000);
	CK(cuMemcpyDtoH(blk2, e, 1000));
	CHECK(memcmp(blk2, src, 1000) == 0, "1D array to device changed the data");

	CK(cuArrayDestroy(l));
	CK(cuArrayDestroy(b));
	CK(cuArrayDestroy(a));
	CK(cuMemFree(d));
	CK(cuMemFree(e));
	free(src);
	free(back);
	free(blk);
	free(blk2);
	free(third);
	say("2D and 1D arrays: host, device and array copies intact");
}

/* 3D: host -> array -> pitched device memory -> host, larger than one
 * request, part of it asynchronously */
static void three_d(CUstream s)
{
	const size_t W = 512, H = 512, Dp = 20, es = 4, rowb = W * es, n = rowb * H * Dp;
	CUarray a;
	CUDA_ARRAY3D_DESCRIPTOR ad = { .Width = W, .Height = H, .Depth = Dp,
				       .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1 };
	CK(cuArray3DCreate(&a, &ad));
	CUDA_ARRAY3D_DESCRIPTOR got;
	CK(cuArray3DGetDescriptor(&got, a));
	CHECK(got.Width == W && got.Height == H && got.Depth == Dp, "3D descriptor %zux%zux%zu",
	      got.Width, got.Height, got.Depth);
	uint8_t *src = xmalloc(n), *back = xmalloc(n);
	fill(src, n, 19);
	CUDA_MEMCPY3D c = { .srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = src, .srcPitch = rowb,
			    .srcHeight = H, .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a,
			    .WidthInBytes = rowb, .Height = H, .Depth = Dp };
	CK(cuMemcpy3DAsync(&c, s));
	/* pitched device memory: rows of rowb + 512, slices of H + 3 rows */
	const size_t dp = rowb + 512, dh = H + 3;
	CUdeviceptr d;
	CK(cuMemAlloc(&d, dp * dh * Dp));
	c = (CUDA_MEMCPY3D){ .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a,
			     .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = d, .dstPitch = dp,
			     .dstHeight = dh, .WidthInBytes = rowb, .Height = H, .Depth = Dp };
	CK(cuMemcpy3DAsync(&c, s));
	c = (CUDA_MEMCPY3D){ .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d, .srcPitch = dp,
			     .srcHeight = dh, .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = back,
			     .dstPitch = rowb, .dstHeight = H, .WidthInBytes = rowb, .Height = H,
			     .Depth = Dp };
	CK(cuMemcpy3D(&c));
	CK(cuStreamSynchronize(s));
	CHECK(memcmp(src, back, n) == 0, "3D host -> array -> device -> host changed the data");

	/* a sub-box: slices 5-6, rows 10-19, bytes 64-127, array -> host */
	uint8_t box[2][10][64];
	c = (CUDA_MEMCPY3D){ .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a,
			     .srcXInBytes = 64, .srcY = 10, .srcZ = 5,
			     .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = box, .dstPitch = 64,
			     .dstHeight = 10, .WidthInBytes = 64, .Height = 10, .Depth = 2 };
	CK(cuMemcpy3D(&c));
	for (size_t z = 0; z < 2; z++)
		for (size_t y = 0; y < 10; y++)
			CHECK(memcmp(box[z][y], src + ((5 + z) * H + 10 + y) * rowb + 64, 64) == 0,
			      "sub-box row %zu of slice %zu", y, z);
	CK(cuMemFree(d));
	CK(cuArrayDestroy(a));
	free(src);
	free(back);
	say("3D arrays and pitched 3D copies intact (%zu MiB, more than one request)", n >> 20);
}

static void objects(void)
{
	CUarray a;
	CUDA_ARRAY3D_DESCRIPTOR ad = { .Width = 64, .Height = 64, .Format = CU_AD_FORMAT_FLOAT,
				       .NumChannels = 1, .Flags = CUDA_ARRAY3D_SURFACE_LDST };
	CK(cuArray3DCreate(&a, &ad));
	CUDA_RESOURCE_DESC rd = { .resType = CU_RESOURCE_TYPE_ARRAY };
	rd.res.array.hArray = a;
	CUDA_TEXTURE_DESC td = { .filterMode = CU_TR_FILTER_MODE_POINT };
	td.addressMode[0] = td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
	CUtexObject t1, t2;
	CK(cuTexObjectCreate(&t1, &rd, &td, NULL));
	CHECK(t1 != 0, "texture object 0");
	CUDA_RESOURCE_DESC back;
	CK(cuTexObjectGetResourceDesc(&back, t1));
	CHECK(back.resType == CU_RESOURCE_TYPE_ARRAY && back.res.array.hArray == a,
	      "the resource read back names another array");

	CUdeviceptr d;
	CK(cuMemAlloc(&d, 1 << 16));
	CUDA_RESOURCE_DESC lin = { .resType = CU_RESOURCE_TYPE_LINEAR };
	lin.res.linear.devPtr = d;
	lin.res.linear.format = CU_AD_FORMAT_FLOAT;
	lin.res.linear.numChannels = 1;
	/* more than was allocated, as NVIDIA's convolutionFFT2D declares:
	 * the driver takes it */
	lin.res.linear.sizeInBytes = 3 << 15;
	CK(cuTexObjectCreate(&t2, &lin, &td, NULL));
	CHECK(t2 != t1, "two texture objects with one value");

	CUsurfObject so;
	CK(cuSurfObjectCreate(&so, &rd));
	CK(cuSurfObjectDestroy(so));
	CK(cuTexObjectDestroy(t2));
	CK(cuTexObjectDestroy(t1));
	CK(cuMemFree(d));
	CK(cuArrayDestroy(a));
	say("texture objects on an array and on device memory, a surface object");
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUstream s;
	CK(cuStreamCreate(&s, 0));
	two_d(s);
	three_d(s);
	objects();
	CK(cuStreamDestroy(s));
	say("PASS");
	return 0;
}
