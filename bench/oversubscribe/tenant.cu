// A tenant of the oversubscription benchmark (bench/oversubscribe/run.sh).
//
//   tenant info                  device memory (cudaMemGetInfo): TOTAL, FREE
//   tenant bw                    pinned copy bandwidth, 4 GiB, best of 3
//   tenant run MIB ITERS PASSES HOST_MS
//       allocates MIB MiB in 8 pieces whose addresses it keeps in device
//       memory (a table the kernels read them from), fills them, then ITERS
//       times: a GPU phase (PASSES passes adding 1 to every word, then a
//       synchronisation) and a host phase (HOST_MS ms asleep, touching no
//       GPU); then checks every word with a kernel that again follows the
//       pointers stored in device memory.  Prints RESULT ok|bad, TIME.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#define CK(x)                                                                        \
	do {                                                                         \
		cudaError_t e_ = (x);                                                \
		if (e_ != cudaSuccess) {                                             \
			printf("ERROR %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
			return 2;                                                    \
		}                                                                    \
	} while (0)

#define NPIECE 8

__device__ __forceinline__ unsigned pattern(unsigned j, unsigned long long i)
{
	return (unsigned)(i * 2654435761ull) ^ (0x9e3779b9u * (j + 1));
}

__global__ void fill(unsigned **tab, unsigned long long words)
{
	for (unsigned j = 0; j < NPIECE; j++) {
		unsigned *p = tab[j];
		for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
		     i < words; i += (unsigned long long)gridDim.x * blockDim.x)
			p[i] = pattern(j, i);
	}
}

__global__ void touch(unsigned **tab, unsigned long long words)
{
	for (unsigned j = 0; j < NPIECE; j++) {
		unsigned *p = tab[j];
		for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
		     i < words; i += (unsigned long long)gridDim.x * blockDim.x)
			p[i] += 1;
	}
}

__global__ void check(unsigned **tab, unsigned long long words, unsigned add,
		      unsigned long long *bad)
{
	unsigned long long n = 0;
	for (unsigned j = 0; j < NPIECE; j++) {
		unsigned *p = tab[j];
		for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
		     i < words; i += (unsigned long long)gridDim.x * blockDim.x)
			n += p[i] != pattern(j, i) + add;
	}
	if (n)
		atomicAdd(bad, n);
}

static double now()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int info()
{
	size_t fr, tot;
	CK(cudaMemGetInfo(&fr, &tot));
	printf("TOTAL %zu FREE %zu\n", tot, fr);
	return 0;
}

static int bw()
{
	size_t n = 4ull << 30;
	void *h, *d;
	CK(cudaMallocHost(&h, n));
	CK(cudaMalloc(&d, n));
	memset(h, 1, n);
	double best_d2h = 0, best_h2d = 0;
	for (int k = 0; k < 3; k++) {
		double t = now();
		CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
		double r = n / (now() - t) / 1e9;
		best_d2h = r > best_d2h ? r : best_d2h;
		t = now();
		CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
		r = n / (now() - t) / 1e9;
		best_h2d = r > best_h2d ? r : best_h2d;
	}
	printf("PINNED_DTOH %.2f GB/s\nPINNED_HTOD %.2f GB/s\n", best_d2h, best_h2d);
	return 0;
}

static int run(unsigned long long mib, int iters, int passes, int host_ms)
{
	double t0 = now(), gpu_s = 0;
	unsigned long long bytes = mib << 20, per = bytes / NPIECE / 4 * 4, words = per / 4;
	unsigned *piece[NPIECE];
	for (int j = 0; j < NPIECE; j++)
		CK(cudaMalloc(&piece[j], per));
	unsigned **tab;
	unsigned long long *bad;
	CK(cudaMalloc(&tab, sizeof(piece)));
	CK(cudaMalloc(&bad, sizeof(*bad)));
	CK(cudaMemcpy(tab, piece, sizeof(piece), cudaMemcpyHostToDevice));
	const int grid = 132 * 8, block = 256;
	fill<<<grid, block>>>(tab, words);
	CK(cudaDeviceSynchronize());
	double ready = now();
	printf("READY %.2f s\n", ready - t0);
	fflush(stdout);
	for (int it = 0; it < iters; it++) {
		double g = now();
		for (int p = 0; p < passes; p++)
			touch<<<grid, block>>>(tab, words);
		CK(cudaDeviceSynchronize());
		gpu_s += now() - g;
		printf("PHASE %d gpu %.3f s\n", it, now() - g);
		fflush(stdout);
		std::this_thread::sleep_for(std::chrono::milliseconds(host_ms));
	}
	unsigned long long nbad = 0;
	CK(cudaMemset(bad, 0, sizeof(*bad)));
	check<<<grid, block>>>(tab, words, (unsigned)(iters * passes), bad);
	CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
	printf("RESULT %s %llu\n", nbad ? "bad" : "ok", nbad);
	for (int j = 0; j < NPIECE; j++)
		CK(cudaFree(piece[j]));
	CK(cudaFree(tab));
	CK(cudaFree(bad));
	printf("TIME %.3f gpu %.3f\n", now() - t0, gpu_s);
	return nbad ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "info"))
		return info();
	if (argc >= 2 && !strcmp(argv[1], "bw"))
		return bw();
	if (argc == 6 && !strcmp(argv[1], "run"))
		return run(strtoull(argv[2], 0, 10), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr, "usage: tenant info | bw | run MIB ITERS PASSES HOST_MS\n");
	return 2;
}
