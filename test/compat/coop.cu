#include "compat.h"
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
/* cudaLaunchCooperativeKernel with a grid-wide sync: two phases */
__global__ void two_phase(int *x, int *out, int n)
{
	cg::grid_group g = cg::this_grid();
	for (int i = g.thread_rank(); i < n; i += g.size()) x[i] = i % 1000;
	g.sync();
	for (int i = g.thread_rank(); i < n; i += g.size()) out[i] = x[i] + x[n - 1 - i];
}
int main()
{
	int dev = 0, coop = 0, sms = 0, nb = 0;
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, two_phase, 256, 0));
	printf("INFO coop=%d sms=%d blocks/sm=%d\n", coop, sms, nb);
	const int n = 1 << 20; int *x, *o;
	CK(cudaMalloc(&x, n * sizeof(int))); CK(cudaMalloc(&o, n * sizeof(int)));
	int nn = n; void *args[] = {&x, &o, &nn};
	CK(cudaLaunchCooperativeKernel((void *)two_phase, dim3(sms * (nb < 2 ? nb : 2)), dim3(256), args, 0, 0));
	CKK();
	int *h = (int *)malloc(n * sizeof(int));
	CK(cudaMemcpy(h, o, n * sizeof(int), cudaMemcpyDeviceToHost));
	int bad = 0; for (int i = 0; i < n; i++) if (h[i] != i % 1000 + (n - 1 - i) % 1000) bad++;
	if (bad) g_fail = 1;
	result_hash("coop", h, n * sizeof(int));
	return finish();
}
