/* RGPU_SERVERS points at a closed port: cuInit must fail (the script checks
 * that the client's log names host:port on stderr). */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	if (!via_rgpu())
		skip("RGPU_SERVERS is not set (this test is for the rgpu client)");
	CUresult rc = cuInit(0);
	say("cuInit: %s (%d)", cu_name(rc), (int)rc);
	CHECK(rc != CUDA_SUCCESS, "cuInit succeeded with no server listening at %s",
	      getenv("RGPU_SERVERS"));
	/* later calls fail too, without crashing */
	int n = -1;
	CUresult rc2 = cuDeviceGetCount(&n);
	say("cuDeviceGetCount: %s, n=%d", cu_name(rc2), n);
	CHECK(rc2 != CUDA_SUCCESS || n == 0, "cuDeviceGetCount says %d devices with no server", n);
	say("PASS");
	return 0;
}
