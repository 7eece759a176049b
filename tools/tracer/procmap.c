/*
 * procmap: which exported function a libcuda.so.1 hands out for each
 * cuGetProcAddress request, to compare the rgpu client with the driver.
 *   procmap LIBCUDA < requests      (lines "name version flags")
 * prints "name version flags -> rc symbol".
 */
#define _GNU_SOURCE
#include <cuda.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: procmap LIBCUDA < requests\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "procmap: %s\n", dlerror());
		return 1;
	}
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
		(CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))dlsym(
			h, "cuGetProcAddress_v2");
	CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
	if (!gpa || !init)
		return 1;
	init(0);
	char name[256];
	int version;
	unsigned long long flags;
	while (scanf("%255s %d %llu", name, &version, &flags) == 3) {
		void *p = NULL;
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		CUresult rc = gpa(name, &p, version, flags, &st);
		Dl_info di;
		const char *sym = "-";
		if (p && dladdr(p, &di) && di.dli_sname)
			sym = di.dli_sname;
		printf("%s %d %llu -> %d %d %s\n", name, version, flags, (int)rc, (int)st, p ? sym : "NULL");
	}
	return 0;
}
