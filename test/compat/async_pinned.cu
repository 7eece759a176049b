#include "compat.h"
/* pinned host memory (cudaMallocHost, cudaHostAlloc default/portable),
 * cudaHostRegister, async copies overlapping with kernels on two streams */
__global__ void sq(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * 2.0f + 1.0f; }
int main()
{
	const int n = 1 << 22, CH = 4, cn = n / CH; size_t sz = n * sizeof(float);
	float *h_in, *h_out, *reg; CK(cudaMallocHost(&h_in, sz)); CK(cudaHostAlloc(&h_out, sz, cudaHostAllocPortable));
	uint32_t s = 11; for (int i = 0; i < n; i++) h_in[i] = frand(&s);
	float *d; CK(cudaMalloc(&d, sz));
	cudaStream_t st[2]; CK(cudaStreamCreate(&st[0])); CK(cudaStreamCreate(&st[1]));
	for (int c = 0; c < CH; c++) {
		cudaStream_t q = st[c & 1];
		CK(cudaMemcpyAsync(d + c * cn, h_in + c * cn, cn * sizeof(float), cudaMemcpyHostToDevice, q));
		sq<<<cn / 256, 256, 0, q>>>(d + c * cn, cn); CK(cudaGetLastError());
		CK(cudaMemcpyAsync(h_out + c * cn, d + c * cn, cn * sizeof(float), cudaMemcpyDeviceToHost, q));
	}
	CK(cudaStreamSynchronize(st[0])); CK(cudaStreamSynchronize(st[1]));
	int bad = 0; for (int i = 0; i < n; i++) if (h_out[i] != h_in[i] * 2.0f + 1.0f) bad++;
	result_hash("async_pinned", h_out, sz);
	/* cudaHostRegister on malloc'd memory */
	reg = (float *)malloc(sz); memcpy(reg, h_in, sz);
	CK(cudaHostRegister(reg, sz, cudaHostRegisterDefault));
	CK(cudaMemcpyAsync(d, reg, sz, cudaMemcpyHostToDevice, st[1]));
	sq<<<n / 256, 256, 0, st[1]>>>(d, n);
	CK(cudaMemcpyAsync(reg, d, sz, cudaMemcpyDeviceToHost, st[1]));
	CK(cudaStreamSynchronize(st[1]));
	for (int i = 0; i < n; i++) if (reg[i] != h_out[i]) bad++;
	CK(cudaHostUnregister(reg));
	printf("RESULT async_pinned_bad %d\n", bad);
	if (bad) g_fail = 1;
	CK(cudaFreeHost(h_in)); CK(cudaFreeHost(h_out)); CK(cudaFree(d));
	return finish();
}
