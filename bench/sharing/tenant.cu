// A tenant of bench/sharing/run.sh: launches compute kernels of a chosen
// length and grid, alone or beside other tenants, and reports what it got.
//
//   tenant --calibrate [--blocks B] [--threads T]
//       prints "ITERS_PER_US x": loop iterations per microsecond of a
//       kernel of that grid, run alone (the bench then asks for lengths)
//   tenant --iters I [--blocks B] [--threads T] (--kernels N | --seconds S)
//          [--depth D] [--sync] [--fault-ms M] [--label L] [--start-at T]
//       N kernels, or as many as fit in S seconds; a synchronisation every
//       D launches (--sync: after each, and its latency is measured);
//       --fault-ms: after M ms, an illegal address (the fault test);
//       --start-at: begin at unix time T (after initialising), so tenants
//       started one after another run their timed part together
//
// The kernel computes (a dependent chain of FMAs, I iterations per thread),
// so time-slicing cannot make it "progress" while it is switched out, as a
// spin on the clock would.  Each block adds 1 to a counter; the counters are
// checked at the end (verify=ok).  One line on stdout:
//
//   RESULT label=L kernels=N elapsed_s=T rate=R p50_us=A p99_us=B verify=ok
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>

__global__ void work(long long iters, float *sink, unsigned *count)
{
	float x = threadIdx.x * 1e-3f, a = 1.0000001f, b = 1e-7f;
	for (long long i = 0; i < iters; i++)
		x = fmaf(x, a, b);
	if (x == 12345.678f) // never true: keeps the loop
		sink[threadIdx.x] = x;
	__syncthreads();
	if (threadIdx.x == 0)
		atomicAdd(&count[blockIdx.x & 1023], 1u);
}

__global__ void bad(int *p)
{
	*p = 1;
}

static double now_s()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

#define CK(x)                                                                              \
	do {                                                                               \
		cudaError_t e_ = (x);                                                      \
		if (e_ != cudaSuccess) {                                                   \
			printf("RESULT label=%s error=%s\n", label.c_str(), cudaGetErrorName(e_)); \
			fprintf(stderr, "tenant %s: %s: %s\n", label.c_str(), #x,          \
				cudaGetErrorString(e_));                                   \
			return 2;                                                          \
		}                                                                          \
	} while (0)

int main(int argc, char **argv)
{
	long long iters = 1000, kernels = 0;
	int blocks = 132, threads = 256, depth = 8, sync = 0, calibrate = 0;
	double seconds = 0, fault_ms = 0, start_at = 0;
	std::string label = "t";
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		auto next = [&]() -> const char * {
			if (i + 1 >= argc) {
				fprintf(stderr, "tenant: %s needs a value\n", a.c_str());
				exit(2);
			}
			return argv[++i];
		};
		if (a == "--iters")
			iters = atoll(next());
		else if (a == "--blocks")
			blocks = atoi(next());
		else if (a == "--threads")
			threads = atoi(next());
		else if (a == "--kernels")
			kernels = atoll(next());
		else if (a == "--seconds")
			seconds = atof(next());
		else if (a == "--depth")
			depth = atoi(next());
		else if (a == "--sync")
			sync = 1;
		else if (a == "--fault-ms")
			fault_ms = atof(next());
		else if (a == "--label")
			label = next();
		else if (a == "--start-at")
			start_at = atof(next());
		else if (a == "--calibrate")
			calibrate = 1;
		else {
			fprintf(stderr, "tenant: unknown option %s\n", a.c_str());
			return 2;
		}
	}
	if (blocks < 1 || threads < 1 || threads > 1024 || iters < 1 || depth < 1) {
		fprintf(stderr, "tenant: bad sizes\n");
		return 2;
	}
	float *sink;
	unsigned *count;
	CK(cudaMalloc(&sink, 1024 * sizeof(float)));
	CK(cudaMalloc(&count, 1024 * sizeof(unsigned)));
	CK(cudaMemset(count, 0, 1024 * sizeof(unsigned)));
	// warm up (module load, clocks)
	work<<<blocks, threads>>>(1000, sink, count);
	CK(cudaDeviceSynchronize());
	long long launched = 1;
	if (calibrate) {
		cudaEvent_t e0, e1;
		CK(cudaEventCreate(&e0));
		CK(cudaEventCreate(&e1));
		long long n = 200000;
		float ms = 0;
		for (int round = 0; round < 4; round++) {
			CK(cudaEventRecord(e0));
			work<<<blocks, threads>>>(n, sink, count);
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (ms > 20)
				break;
			n *= 4;
		}
		printf("ITERS_PER_US %.3f\n", n / (ms * 1e3));
		return 0;
	}
	if (start_at > 0) {
		double wall = std::chrono::duration<double>(
				      std::chrono::system_clock::now().time_since_epoch()).count();
		if (start_at > wall)
			usleep((useconds_t)((start_at - wall) * 1e6));
	}
	std::vector<double> lat;
	double t0 = now_s();
	long long done = 0;
	for (;;) {
		double t = now_s() - t0;
		if (kernels ? done >= kernels : t >= seconds)
			break;
		if (fault_ms > 0 && t * 1e3 >= fault_ms) {
			bad<<<1, 1>>>((int *)16);
			cudaError_t e = cudaDeviceSynchronize();
			printf("RESULT label=%s faulted=%s\n", label.c_str(), cudaGetErrorName(e));
			return e == cudaErrorIllegalAddress ? 3 : 4;
		}
		if (sync) {
			double a = now_s();
			work<<<blocks, threads>>>(iters, sink, count);
			CK(cudaDeviceSynchronize());
			lat.push_back((now_s() - a) * 1e6);
			done++;
			launched++;
			continue;
		}
		int n = depth;
		if (kernels && kernels - done < n)
			n = (int)(kernels - done);
		for (int k = 0; k < n; k++)
			work<<<blocks, threads>>>(iters, sink, count);
		CK(cudaGetLastError());
		CK(cudaDeviceSynchronize());
		done += n;
		launched += n;
	}
	double el = now_s() - t0;
	std::vector<unsigned> h(1024);
	CK(cudaMemcpy(h.data(), count, 1024 * sizeof(unsigned), cudaMemcpyDeviceToHost));
	unsigned long long sum = 0;
	for (unsigned v : h)
		sum += v;
	const char *verify = sum == (unsigned long long)launched * blocks ? "ok" : "BAD";
	double p50 = 0, p99 = 0;
	if (!lat.empty()) {
		std::sort(lat.begin(), lat.end());
		p50 = lat[lat.size() / 2];
		p99 = lat[(size_t)(0.99 * (lat.size() - 1))];
	}
	printf("RESULT label=%s kernels=%lld elapsed_s=%.4f rate=%.2f p50_us=%.1f p99_us=%.1f verify=%s\n",
	       label.c_str(), done, el, done / el, p50, p99, verify);
	return verify[0] == 'o' ? 0 : 5;
}
