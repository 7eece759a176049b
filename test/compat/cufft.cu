#include "compat.h"
#include <cufft.h>
#include <math.h>
#define CF(x) do { cufftResult r_ = (x); if (r_ != CUFFT_SUCCESS) { \
	printf("FAIL %s:%d: %s -> cufft result %d\n", __FILE__, __LINE__, #x, (int)r_); exit(1); } } while (0)
/* 1D C2C forward (vs a host DFT) and inverse (round trip), batched; 2D R2C */
int main()
{
	const int N = 1024, B = 4;
	cufftComplex *h = (cufftComplex *)malloc(sizeof(cufftComplex) * N * B), *o = (cufftComplex *)malloc(sizeof(cufftComplex) * N * B);
	uint32_t s = 77; for (int i = 0; i < N * B; i++) { h[i].x = frand(&s); h[i].y = frand(&s); }
	cufftComplex *d; CK(cudaMalloc(&d, sizeof(cufftComplex) * N * B));
	CK(cudaMemcpy(d, h, sizeof(cufftComplex) * N * B, cudaMemcpyHostToDevice));
	cufftHandle p; CF(cufftPlan1d(&p, N, CUFFT_C2C, B));
	CF(cufftExecC2C(p, d, d, CUFFT_FORWARD)); CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(o, d, sizeof(cufftComplex) * N * B, cudaMemcpyDeviceToHost));
	double e = 0, scale = 0;
	for (int b = 0; b < B; b++) for (int k = 0; k < N; k += 3) {
		double re = 0, im = 0;
		for (int t = 0; t < N; t++) { double a = -2 * M_PI * (double)((long)k * t % N) / N; re += h[b*N+t].x * cos(a) - h[b*N+t].y * sin(a); im += h[b*N+t].x * sin(a) + h[b*N+t].y * cos(a); }
		double dx = o[b*N+k].x - re, dy = o[b*N+k].y - im, m = sqrt(dx * dx + dy * dy);
		if (m > e) e = m; double mag = sqrt(re * re + im * im); if (mag > scale) scale = mag;
	}
	verdict("cufft_c2c_fwd", e / scale, 1e-5);
	CF(cufftExecC2C(p, d, d, CUFFT_INVERSE)); CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(o, d, sizeof(cufftComplex) * N * B, cudaMemcpyDeviceToHost));
	e = 0; for (int i = 0; i < N * B; i++) { double dx = o[i].x / N - h[i].x, dy = o[i].y / N - h[i].y; double m = sqrt(dx*dx+dy*dy); if (m > e) e = m; }
	verdict("cufft_c2c_roundtrip", e, 1e-5);
	printf("INFO cufft_c2c_bits fnv=%016llx\n", (unsigned long long)fnv(o, sizeof(cufftComplex) * N * B));
	CF(cufftDestroy(p));
	/* 2D R2C 256x256: DC term and a round trip through C2R */
	const int R = 256; float *r = (float *)malloc(sizeof(float) * R * R), *r2 = (float *)malloc(sizeof(float) * R * R);
	double sum = 0; for (int i = 0; i < R * R; i++) { r[i] = frand(&s); sum += r[i]; }
	float *dr; cufftComplex *dc;
	CK(cudaMalloc(&dr, sizeof(float) * R * R)); CK(cudaMalloc(&dc, sizeof(cufftComplex) * R * (R / 2 + 1)));
	CK(cudaMemcpy(dr, r, sizeof(float) * R * R, cudaMemcpyHostToDevice));
	cufftHandle p2, p3; CF(cufftPlan2d(&p2, R, R, CUFFT_R2C)); CF(cufftPlan2d(&p3, R, R, CUFFT_C2R));
	CF(cufftExecR2C(p2, dr, dc)); cufftComplex dcterm; CK(cudaMemcpy(&dcterm, dc, sizeof dcterm, cudaMemcpyDeviceToHost));
	verdict("cufft_r2c_dc", fabs(dcterm.x - sum) / (fabs(sum) > 1 ? fabs(sum) : 1), 1e-4);
	CF(cufftExecC2R(p3, dc, dr)); CK(cudaMemcpy(r2, dr, sizeof(float) * R * R, cudaMemcpyDeviceToHost));
	e = 0; for (int i = 0; i < R * R; i++) { double x = fabs(r2[i] / (R * R) - r[i]); if (x > e) e = x; }
	verdict("cufft_r2c_roundtrip", e, 1e-5);
	CF(cufftDestroy(p2)); CF(cufftDestroy(p3));
	return finish();
}
