#include "compat.h"
/* printf from a kernel: the lines themselves are RESULT lines (compared) */
__global__ void hello(int v) { printf("RESULT kprintf block %d thread %d value %d\n", blockIdx.x, threadIdx.x, v * (threadIdx.x + 1)); }
int main()
{
	hello<<<2, 4>>>(21); CKK();
	fflush(stdout);
	printf("RESULT kprintf_done 1\n");
	return finish();
}
