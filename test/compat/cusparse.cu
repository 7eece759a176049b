#include "compat.h"
#include <cusparse.h>
#define CS(x) do { cusparseStatus_t r_ = (x); if (r_ != CUSPARSE_STATUS_SUCCESS) { \
	printf("FAIL %s:%d: %s -> cusparse status %d\n", __FILE__, __LINE__, #x, (int)r_); exit(1); } } while (0)
/* generic API: CSR SpMV (y = a*A*x + b*y) and SpMM, vs a host reference */
int main()
{
	const int n = 20000, per = 16, nnz = n * per, K = 8;
	int *rp = (int *)malloc((n + 1) * 4), *ci = (int *)malloc(nnz * 4);
	float *v = (float *)malloc(nnz * 4), *x = (float *)malloc(n * K * 4), *y = (float *)malloc(n * K * 4), *y0 = (float *)malloc(n * K * 4);
	uint32_t s = 31;
	for (int r = 0; r < n; r++) { rp[r] = r * per; for (int j = 0; j < per; j++) { ci[r * per + j] = (r + j * 1237) % n; v[r * per + j] = frand(&s); } }
	rp[n] = nnz;
	/* column indices must be sorted within a row */
	for (int r = 0; r < n; r++) for (int a = 0; a < per; a++) for (int b = a + 1; b < per; b++)
		if (ci[r*per+b] < ci[r*per+a]) { int t = ci[r*per+a]; ci[r*per+a] = ci[r*per+b]; ci[r*per+b] = t; float f = v[r*per+a]; v[r*per+a] = v[r*per+b]; v[r*per+b] = f; }
	for (int i = 0; i < n * K; i++) { x[i] = frand(&s); y0[i] = frand(&s); }
	int *drp, *dci; float *dv, *dx, *dy;
	CK(cudaMalloc(&drp, (n + 1) * 4)); CK(cudaMalloc(&dci, nnz * 4)); CK(cudaMalloc(&dv, nnz * 4));
	CK(cudaMalloc(&dx, n * K * 4)); CK(cudaMalloc(&dy, n * K * 4));
	CK(cudaMemcpy(drp, rp, (n + 1) * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dci, ci, nnz * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dv, v, nnz * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dx, x, n * K * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dy, y0, n * K * 4, cudaMemcpyHostToDevice));
	cusparseHandle_t h; CS(cusparseCreate(&h));
	cusparseSpMatDescr_t A; cusparseDnVecDescr_t vx, vy; cusparseDnMatDescr_t mx, my;
	CS(cusparseCreateCsr(&A, n, n, nnz, drp, dci, dv, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	CS(cusparseCreateDnVec(&vx, n, dx, CUDA_R_32F)); CS(cusparseCreateDnVec(&vy, n, dy, CUDA_R_32F));
	float al = 2.0f, be = 0.5f; size_t bs = 0; void *buf;
	CS(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &al, A, vx, &be, vy, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &bs));
	CK(cudaMalloc(&buf, bs + 16));
	CS(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &al, A, vx, &be, vy, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, buf));
	CK(cudaDeviceSynchronize()); CK(cudaMemcpy(y, dy, n * 4, cudaMemcpyDeviceToHost));
	double e = 0;
	for (int r = 0; r < n; r++) { double a = 0; for (int j = rp[r]; j < rp[r + 1]; j++) a += (double)v[j] * x[ci[j]]; double ref = al * a + be * y0[r]; double q = relerr(y[r], ref); if (q > e) e = q; }
	verdict("cusparse_spmv", e, 1e-5);
	/* SpMM: Y(n x K, col-major) = A * X */
	CK(cudaMemcpy(dy, y0, n * K * 4, cudaMemcpyHostToDevice));
	CS(cusparseCreateDnMat(&mx, n, K, n, dx, CUDA_R_32F, CUSPARSE_ORDER_COL)); CS(cusparseCreateDnMat(&my, n, K, n, dy, CUDA_R_32F, CUSPARSE_ORDER_COL));
	size_t bs2 = 0; void *buf2;
	CS(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &al, A, mx, &be, my, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &bs2));
	CK(cudaMalloc(&buf2, bs2 + 16));
	CS(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &al, A, mx, &be, my, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buf2));
	CK(cudaDeviceSynchronize()); CK(cudaMemcpy(y, dy, n * K * 4, cudaMemcpyDeviceToHost));
	e = 0;
	for (int c = 0; c < K; c++) for (int r = 0; r < n; r += 3) { double a = 0; for (int j = rp[r]; j < rp[r + 1]; j++) a += (double)v[j] * x[c * n + ci[j]]; double ref = al * a + be * y0[c * n + r]; double q = relerr(y[c * n + r], ref); if (q > e) e = q; }
	verdict("cusparse_spmm", e, 1e-5);
	CS(cusparseDestroySpMat(A)); CS(cusparseDestroyDnVec(vx)); CS(cusparseDestroyDnVec(vy));
	CS(cusparseDestroyDnMat(mx)); CS(cusparseDestroyDnMat(my)); CS(cusparseDestroy(h));
	return finish();
}
