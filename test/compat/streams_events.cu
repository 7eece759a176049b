#include "compat.h"
/* several streams, events, cudaStreamWaitEvent, cudaEventElapsedTime,
 * cudaStreamQuery/cudaEventQuery, a non-blocking stream */
__global__ void step(int *x, int n, int k)
{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * 3 + k + i; }
int main()
{
	const int NS = 4, n = 1 << 20;
	cudaStream_t st[NS]; cudaEvent_t ev[NS], t0, t1;
	int *d[NS];
	for (int i = 0; i < NS; i++) {
		CK(i == NS - 1 ? cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking) : cudaStreamCreate(&st[i]));
		CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
		CK(cudaMalloc(&d[i], n * sizeof(int)));
		CK(cudaMemsetAsync(d[i], i, n * sizeof(int), st[i]));
	}
	CK(cudaEventCreate(&t0)); CK(cudaEventCreate(&t1));
	CK(cudaEventRecord(t0, st[0]));
	for (int r = 0; r < 20; r++)
		for (int i = 0; i < NS; i++) {
			step<<<n / 256, 256, 0, st[i]>>>(d[i], n, r + i);
			CK(cudaGetLastError());
		}
	/* stream 0 waits for the others, then combines */
	for (int i = 1; i < NS; i++) { CK(cudaEventRecord(ev[i], st[i])); CK(cudaStreamWaitEvent(st[0], ev[i], 0)); }
	for (int i = 1; i < NS; i++)
		CK(cudaMemcpyAsync(d[0] + (i - 1) * 1024, d[i], 1024 * sizeof(int), cudaMemcpyDeviceToDevice, st[0]));
	CK(cudaEventRecord(t1, st[0]));
	CK(cudaEventSynchronize(t1));
	float ms = -1; CK(cudaEventElapsedTime(&ms, t0, t1));
	CK(cudaStreamQuery(st[0])); CK(cudaEventQuery(ev[1]));
	printf("INFO elapsed %.3f ms (timed with events)\n", ms);
	if (!(ms > 0)) { printf("INFO elapsed time not positive\n"); g_fail = 1; }
	int *h = (int *)malloc(n * sizeof(int));
	uint64_t hash = 1469598103934665603ull;
	for (int i = 0; i < NS; i++) {
		CK(cudaMemcpy(h, d[i], n * sizeof(int), cudaMemcpyDeviceToHost));
		hash = fnv(h, n * sizeof(int), hash);
	}
	printf("RESULT streams fnv=%016llx\n", (unsigned long long)hash);
	for (int i = 0; i < NS; i++) { CK(cudaStreamDestroy(st[i])); CK(cudaEventDestroy(ev[i])); CK(cudaFree(d[i])); }
	return finish();
}
