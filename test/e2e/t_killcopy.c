/* A client that copies device-to-host forever, for run-e2e.sh to stop and
 * kill mid-copy (issue 16 item 8): rgpud must notice the client is gone
 * and free its session within a couple of seconds, not after its
 * shared-memory wait gives up.  Prints "READY" once copying. */
#include "common.h"

#define BYTES (96u << 20) /* more than the staging ring holds */

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUdeviceptr d;
	CK(cuMemAlloc(&d, BYTES));
	CK(cuMemsetD8(d, 0x5a, BYTES));
	uint8_t *h = xmalloc(BYTES);
	CK(cuMemcpyDtoH(h, d, BYTES));
	CHECK(h[0] == 0x5a && h[BYTES - 1] == 0x5a, "the first copy came back wrong");
	say("READY");
	for (;;)
		CK(cuMemcpyDtoH(h, d, BYTES));
}
