#include "compat.h"
/* CUDA graphs: stream capture of kernels + memcpy, instantiate, replay */
__global__ void k1(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * 0.5f + 1.0f; }
__global__ void k2(float *x, const float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += y[i]; }
int main()
{
	const int n = 1 << 20; size_t sz = n * sizeof(float);
	float *x, *y, *h; CK(cudaMalloc(&x, sz)); CK(cudaMalloc(&y, sz)); CK(cudaMallocHost(&h, sz));
	uint32_t s = 9; for (int i = 0; i < n; i++) h[i] = frand(&s);
	CK(cudaMemcpy(x, h, sz, cudaMemcpyHostToDevice)); CK(cudaMemcpy(y, h, sz, cudaMemcpyHostToDevice));
	cudaStream_t st; CK(cudaStreamCreate(&st));
	cudaGraph_t g; cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	k1<<<n / 256, 256, 0, st>>>(x, n);
	k2<<<n / 256, 256, 0, st>>>(x, y, n);
	CK(cudaMemcpyAsync(y, x, sz, cudaMemcpyDeviceToDevice, st));
	CK(cudaStreamEndCapture(st, &g));
	size_t nodes = 0; CK(cudaGraphGetNodes(g, NULL, &nodes));
	printf("RESULT graph_nodes %zu\n", nodes);
	CK(cudaGraphInstantiate(&ge, g, 0));
	for (int r = 0; r < 10; r++) CK(cudaGraphLaunch(ge, st));
	CK(cudaStreamSynchronize(st));
	CK(cudaMemcpy(h, x, sz, cudaMemcpyDeviceToHost));
	result_hash("graph", h, sz);
	CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
	return finish();
}
