/* Allocates device memory, says so on stdout, then waits to be killed:
 * run-e2e.sh kills it with SIGKILL and checks that rgpud freed the
 * session's memory (a dead client loses nothing but its own state). */
#include "common.h"

#include <unistd.h>

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUdeviceptr p;
	CK(cuMemAlloc(&p, 67137536u)); /* 64 MiB + 7 pages: a size the log shows only for this client */
	CK(cuMemsetD8(p, 0x5a, 67137536u));
	CK(cuCtxSynchronize());
	printf("held\n");
	fflush(stdout);
	sleep(60);
	return 1; /* not reached when killed */
}
